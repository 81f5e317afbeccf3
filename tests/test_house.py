"""Sizes that keep the package easy to read (the code is formatted by `ruff format` at 100 columns,
which `.ci/run` checks, so lines measure code): no module over 400 lines, no function whose body
(after its docstring) is over 60 lines, an `ElmoEmbedder` facade of at most 200 lines, the state
policy compared by name only where it enters, test modules that import no other test module, and
imports that point down the layers of ../shared/DESIGN.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, Tuple

import spacy_elmo
from spacy_elmo.bilm import embedder

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
    "weights": 3, "pretrain": 4, "embed": 4, "doc_data": 5, "windows": 5, "layers": 6,
    "architectures": 6,
    "component_settings": 7, "doc_windows": 7, "feature_cache": 7, "vector_hooks": 7, "workers": 7,
    "pipeline": 8,
    "cli": 9, "__main__": 9, "__init__": 10,
}  # fmt: skip
# Siblings that must not import each other, and the imports allowed upward, with the reason (none).
SIBLINGS = {frozenset({"pretrain", "embed"})}
UPWARD: Dict[Tuple[str, str], str] = {}


def imported_parts(path: Path) -> Iterator[Tuple[str, str, int]]:
    """`(importing module, imported top-level part of spacy_elmo, line)` of every import in `path`,
    inside functions too."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    module, package = ".".join(rel.parts), list(rel.parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = base + (node.module.split(".") if node.module else [])
            for part in target[:1] or [alias.name for alias in node.names]:
                yield module, part, node.lineno
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = (
                [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            )
            for name in names:
                if name and name.startswith("spacy_elmo."):
                    yield module, name.split(".")[1], node.lineno


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
