"""The weight formats this package reads, in the order `locate` asks them whether a directory is
theirs.

A format is a module of its own that imports no other: `KIND` (its `ModelFiles.kind`),
`detect(directory)` (whether a directory is in this format), `model_files(directory)` (its files)
and `read(files) -> ModelData` (what a network needs, see `data.py`; `load.build` makes the
network). A new format is a module and a line here. `pipeline` (a saved spaCy pipeline) has no
`read` yet: its biLM is thinc's serialization, which the component's own loader reads into an
embedder (`pipeline.load_pipeline`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Tuple

from . import efml, hdf5, own, pipeline
from .data import ModelFiles

# hdf5 last: it claims every directory no other format does, and says what the directory lacks
FORMATS: Tuple[ModuleType, ...] = (own, efml, pipeline, hdf5)


def format_of(model: ModelFiles) -> ModuleType:
    """The format module that reads `model` (by its `kind`)."""
    return next(fmt for fmt in FORMATS if fmt.KIND == model.kind)
