"""The package's layers (DESIGN.md section 2): imports point down only. The biLM core
(`spacy_elmo/bilm/`) imports nothing of the package but itself and the general utilities beside
`errors.py`; the weight formats (`spacy_elmo/weights/`, one module per format) do not import each
other; names that moved out of `spacy_elmo.bilm` still work there, with a DeprecationWarning naming
their new place. Imports are read with `ast`, so an import inside a function counts too."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Iterator, Tuple

import pytest

import spacy_elmo
from spacy_elmo.weights.formats import FORMATS

PACKAGE = Path(spacy_elmo.__file__).parent
CORE_MAY_IMPORT = (
    "spacy_elmo.bilm",
    "spacy_elmo.errors",
    "spacy_elmo.files",
    "spacy_elmo.own_locks",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: Path) -> Iterator[Tuple[int, str]]:
    """`(line, absolute module name)` of every import of `spacy_elmo` in the module at `path`
    (relative imports resolved; `from X import name` counts as `X.name`, which may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        yield from (
            (node.lineno, t) for t in targets if t == "spacy_elmo" or t.startswith("spacy_elmo.")
        )


def within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


@pytest.mark.parametrize("path", sorted((PACKAGE / "bilm").glob("*.py")), ids=lambda p: p.name)
def test_the_core_imports_nothing_above_it(path):
    above = [
        f"{path.name}:{line} imports {target}"
        for line, target in package_imports(path)
        if not any(within(target, allowed) for allowed in CORE_MAY_IMPORT)
    ]
    assert not above, (
        "spacy_elmo.bilm imports a layer above it (spacy_elmo.weights, ...): " + "; ".join(above)
    )


def test_weight_formats_do_not_import_each_other():
    names = [fmt.__name__ for fmt in FORMATS]
    assert len(names) >= 3 and all(within(n, "spacy_elmo.weights") for n in names)
    for fmt in FORMATS:
        others = [
            f"{fmt.__name__}:{line} imports {target}"
            for line, target in package_imports(Path(fmt.__file__))
            if any(within(target, other) for other in names if other != fmt.__name__)
        ]
        assert not others, "; ".join(others)


def test_the_import_reader_sees_relative_and_late_imports(tmp_path):
    """The check above reads what it should: relative imports resolved, imports inside functions
    found."""
    found = dict((t, line) for line, t in package_imports(PACKAGE / "weights" / "efml.py"))
    assert (
        "spacy_elmo.bilm.options.BiLMOptions" in found
        and "spacy_elmo.weights.checks.check_float" in found
    )
    found = [t for _, t in package_imports(PACKAGE / "bilm" / "__init__.py")]
    assert "spacy_elmo.bilm.model.BiLM" in found and "spacy_elmo.errors.ElmoFileError" in found


@pytest.mark.parametrize(
    "name",
    [
        "load_bilm",
        "locate",
        "save_bilm",
        "export_hdf5",
        "read_state_dict",
        "bilm_from_state_dict",
        "ModelFiles",
    ],
)
def test_names_moved_to_weights_still_work_from_bilm(name):
    bilm = importlib.import_module("spacy_elmo.bilm")
    with pytest.warns(DeprecationWarning, match=f"use spacy_elmo.weights.{name}"):
        old = getattr(bilm, name)
    assert old is getattr(importlib.import_module("spacy_elmo.weights"), name)
    assert name not in bilm.__all__


def test_options_from_a_file_still_work_from_the_core(fixture_dir):
    """`BiLMOptions.from_file` reads a file, which the core no longer does: it is
    `spacy_elmo.weights.read_options`, and the old name still works with a DeprecationWarning."""
    from spacy_elmo.bilm import BiLMOptions
    from spacy_elmo.weights import read_options

    with pytest.warns(DeprecationWarning, match="use spacy_elmo.weights.read_options"):
        old = BiLMOptions.from_file(fixture_dir / "options.json")
    assert old == read_options(fixture_dir / "options.json")


def test_the_public_names_stay():
    from spacy_elmo.bilm import BiLM, BiLMOptions, ElmoEmbedder, batch_char_ids  # noqa: F401

    for name in ("load_bilm", "save_bilm", "export_hdf5", "BiLM", "BiLMOptions", "ElmoEmbedder"):
        assert name in spacy_elmo.__all__ and getattr(spacy_elmo, name) is not None
