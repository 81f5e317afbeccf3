"""Sizes that keep the package easy to read (the code is formatted by `ruff format` at 100 columns,
which `.ci/run` checks, so lines measure code): no module over 400 lines, no function whose body
(after its docstring) is over 60 lines, an `ElmoEmbedder` facade of at most 200 lines, the state
policy compared by name only where it enters, test modules that import no other test module, and
imports that point down the layers of ../shared/DESIGN.md (read with `ast`: an import inside a
function counts too), each layer clear of the libraries of the layers above it, the weight formats
(one module each) clear of each other."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, Tuple

import spacy_elmo
from spacy_elmo.bilm import embedder
from spacy_elmo.weights.formats import FORMATS

PACKAGE = Path(spacy_elmo.__file__).parent
TESTS = Path(__file__).parent
MODULE_LINES, FUNCTION_LINES, FACADE_LINES = 400, 60, 200


def package_modules() -> list:
    return sorted(PACKAGE.rglob("*.py"))


def function_bodies(path: Path) -> Iterator[Tuple[str, int]]:
    """`(name at line, body lines)` of each function: from the first statement after the docstring
    to the function's last line (a CLI command's typer parameters are its signature, not
    counted)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            docstring = (
                isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            )
            first = body[1] if docstring and len(body) > 1 else body[0]
            yield f"{node.name} at line {node.lineno}", node.end_lineno - first.lineno + 1


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in package_modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert not long, long


def test_no_function_is_over_60_lines():
    long = [
        f"{p.relative_to(PACKAGE)}: {name} ({n} lines)"
        for p in package_modules()
        for name, n in function_bodies(p)
        if n > FUNCTION_LINES
    ]
    assert not long, long


def test_the_embedder_is_a_facade():
    tree = ast.parse(Path(embedder.__file__).read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ElmoEmbedder"]
    assert cls.end_lineno - cls.lineno + 1 <= FACADE_LINES


def test_the_state_policy_is_compared_by_name_only_where_it_enters():
    compare = re.compile(r"""[!=]=\s*["'](carry|warm|zero)["']|["'](carry|warm|zero)["']\s*[!=]=""")
    sites = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in package_modules()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if compare.search(line)
    ]
    assert len(sites) <= 2, sites


def test_no_test_module_imports_another():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    found = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [alias.name for alias in node.names]
            found += [
                f"{path.relative_to(TESTS)}:{node.lineno} imports {name}"
                for name in names
                if name.rpartition(".")[2] in test_modules
            ]
    assert not found, found


# The layers of ../shared/DESIGN.md, bottom up: a module imports its own layer's or lower ones'.
LAYERS = {
    "errors": 0, "about": 0, "flock": 0, "files": 1, "own_locks": 1, "dir_lock": 1, "bilm": 2,
    "weights": 3, "tokenizer": 3, "pretrain": 4, "embed": 4, "doc_data": 5, "extensions": 5,
    "windows": 5,
    "layers": 6, "architectures": 6,
    "component_settings": 7, "doc_windows": 7, "feature_cache": 7, "vector_hooks": 7, "workers": 7,
    "pipeline": 8,
    "cli": 9, "__main__": 9, "__init__": 10,
}  # fmt: skip
# Siblings that must not import each other, and the imports allowed upward, with the reason (none).
SIBLINGS = {frozenset({"pretrain", "embed"})}
UPWARD: Dict[Tuple[str, str], str] = {}


# Libraries a layer must not import (DESIGN.md: the core knows torch and numpy only; spaCy and thinc
# begin with the glue, the command line's library with the command line).
FORBIDDEN = {
    "bilm": {"spacy", "thinc", "h5py", "srsly", "typer", "ray"},
    "weights": {"spacy", "thinc", "typer", "ray"},
    "pretrain": {"typer"},  # thinc's Config reads its config, as spaCy's do
    "embed": {"thinc", "typer"},
}


def imports(path: Path) -> Iterator[Tuple[int, str]]:
    """`(line, absolute name)` of every import in the module at `path`, inside functions too:
    relative imports resolved; `from X import name` is `X.name` (which may be a module)."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = list(rel[:-1])  # of a package's __init__ too
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def imported_parts(path: Path) -> Iterator[Tuple[str, str, int]]:
    """`(importing module, imported top-level part of spacy_elmo, line)` of every import of the
    package in `path`."""
    module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    for line, name in imports(path):
        parts = name.split(".")
        if parts[0] == "spacy_elmo" and len(parts) > 1:
            yield module, parts[1], line


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_imports_point_down():
    """Each layer imports only itself and the layers below it (DESIGN.md's house)."""
    wrong = []
    for path in package_modules():
        for module, part, line in imported_parts(path):
            own = module.split(".")[0]
            if part == own or (module, part) in UPWARD:
                continue
            if LAYERS[part] > LAYERS[own] or frozenset({own, part}) in SIBLINGS:
                wrong.append(f"{module}:{line} imports {part}")
    assert not wrong, wrong
    parts = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }
    assert set(LAYERS) == parts  # every part has its layer


def test_each_layer_leaves_the_libraries_of_the_layers_above_alone():
    wrong = [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for part, libraries in FORBIDDEN.items()
        for path in sorted((PACKAGE / part).rglob("*.py"))
        for line, name in imports(path)
        if name.split(".")[0] in libraries
    ]
    assert not wrong, wrong


def test_weight_formats_do_not_import_each_other():
    names = [fmt.__name__ for fmt in FORMATS]
    assert len(names) >= 3 and all(within(n, "spacy_elmo.weights") for n in names)
    others = [
        f"{fmt.__name__}:{line} imports {name}"
        for fmt in FORMATS
        for line, name in imports(Path(fmt.__file__))
        if any(within(name, other) for other in names if other != fmt.__name__)
    ]
    assert not others, others


def test_the_import_reader_sees_relative_late_and_outside_imports():
    """The checks above read what they should: relative imports resolved, imports inside functions
    and of other libraries found."""
    found = {name for _, name in imports(PACKAGE / "weights" / "efml.py")}
    assert {"spacy_elmo.bilm.options.BiLMOptions", "spacy_elmo.weights.checks.check_float"} <= found
    found = {name for _, name in imports(PACKAGE / "bilm" / "__init__.py")}
    assert {"spacy_elmo.bilm.model.BiLM", "spacy_elmo.errors.ElmoFileError"} <= found
    assert any(name.startswith("spacy.") for _, name in imports(PACKAGE / "pipeline.py"))
