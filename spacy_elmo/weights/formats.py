"""The weight formats this package reads, in the order `locate` asks them whether a directory is
theirs.

A format is a module of its own that imports no other: `KIND` (its `ModelFiles.kind`),
`detect(directory)` (whether a directory is in this format), `held(directory)` (the names of the
files that show a model of this format there, for writers), `model_files(directory)` (its files)
and `read(files) -> ModelData` (what a network needs, see `data.py`; `load.build` makes the
network). A new format is a module and a line here.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Sequence, Tuple

from ..errors import ElmoFileError
from . import efml, hdf5, own, pipeline
from .data import ModelFiles

# hdf5 last: it claims every directory no other format does, and says what the directory lacks
FORMATS: Tuple[ModuleType, ...] = (own, efml, pipeline, hdf5)
# what a writer's error calls a model of each format
DESCRIPTIONS = {
    own.KIND: "a model in this project's format",
    efml.KIND: "an ELMoForManyLangs model",
    pipeline.KIND: "a saved spaCy pipeline",
    hdf5.KIND: "bilm-tf hdf5 weights",
}


def format_of(model: ModelFiles) -> ModuleType:
    """The format module that reads `model` (by its `kind`)."""
    return next(fmt for fmt in FORMATS if fmt.KIND == model.kind)


def check_destination(directory: Path, kind: str, names: Sequence[str], writer: str) -> None:
    """Before `writer` writes the files `names` of a model of format `kind` into the existing
    `directory`: ElmoFileError naming it and what it holds where it holds a model of another format
    (`held`): the two would stand side by side, and `load_bilm` reads the one `FORMATS` puts first,
    whichever is newer; or naming the file where one of `names` is a directory (never replaced)."""
    for fmt in FORMATS:
        held = [] if fmt.KIND == kind else fmt.held(directory)
        if held:
            listed = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
            raise ElmoFileError(
                f"{directory} already holds {DESCRIPTIONS[fmt.KIND]} ({listed}): {writer} writes "
                "into a new or empty directory, or over a model of its own format; choose another"
            )
    for name in names:
        if (directory / name).is_dir() and not (directory / name).is_symlink():
            raise ElmoFileError(f"{directory / name} is a directory: {writer} writes a file there")
