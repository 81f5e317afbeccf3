"""Where a model's files are: `locate` turns anything `load_bilm` accepts (a published name, a
directory in any format, an `(options, weights)` pair) into a `ModelFiles`, reading nothing but
directory listings (and, where asked, the cache manifest's checksums). Every entry point finds files
through it.

One rule tells names from paths: a published name (`small`, `medium`, `original`, `original-5.5b`, a
str) is the cached model of that name, whatever the working directory holds; anything else
(`./small`, `small/`, an absolute path, any `Path`) is a path. A directory is in the first of
`FORMATS` whose `detect` says so; its files are read from it only (`inside_dir`, then
`ModelFiles.directory`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Tuple, Union

from ..errors import ElmoConfigError, ElmoFileError
from ..files import exists
from . import hdf5, hub
from .data import ModelFiles
from .formats import FORMATS

ModelPath = Union[str, Path, Tuple[Union[str, Path], Union[str, Path]]]


def locate(path: ModelPath, *, verify: bool = False) -> ModelFiles:
    """The files of `path`: a published model's name (`small`, ... in the cache, never downloaded
    here; never a directory of that name in the working directory: `./small` is one), a directory
    (this project's format, the output directory of `pretrain`, an ELMoForManyLangs model, a saved
    spaCy pipeline with one `elmo` component, or an options JSON + one `.hdf5`, published or plain
    names) or an `(options_file, weight_file)` pair. `verify`: check a cached model's files against
    the manifest's sha256. Raises ElmoFileError (missing, ambiguous, changed or outside files) or
    ElmoConfigError (not a path or a pair)."""
    if hub.is_published(path):
        directory = hub.model_dir(path)
        names = [f for f, _ in hub.published_files(path)]
        if not all(os.path.lexists(directory / f) for f in names):
            raise ElmoFileError(hub.missing_message(path, directory))
        verified = hub.verify(directory, path) if verify else True
        return ModelFiles(
            hdf5.KIND, directory / names[0], directory / names[1], published=path, verified=verified
        )
    if isinstance(path, (tuple, list)):
        if len(path) != 2:
            raise ElmoConfigError(f"pass (options_file, weight_file), got {len(path)} paths")
        files = [_path(p) for p in path]
        for file, what in zip(files, ("options file", "weight file")):
            if not os.path.lexists(file):  # what is there is checked when it is read
                raise ElmoFileError(f"ELMo {what} not found: {file}")
        return ModelFiles(hdf5.KIND, *files)
    directory = _path(path)
    if not exists(directory, "ELMo weights"):
        raise ElmoFileError(f"ELMo weights not found: {directory}")
    if not directory.is_dir():
        raise ElmoConfigError(
            f"{directory}: pass a directory or an (options_file, weight_file) pair"
        )
    # the last, hdf5, claims every directory
    fmt = next(fmt for fmt in FORMATS if fmt.detect(directory))
    return replace(fmt.model_files(directory), directory=directory)


def _path(path: object) -> Path:
    """`path` as a Path; ElmoConfigError where it is no path (bytes, a number, None, an empty
    str, which Path reads as the working directory)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ElmoConfigError(
            "pass a path (a str or a Path) or an (options_file, weight_file) pair, got "
            f"{type(path).__name__}"
        )
    if os.fspath(path) == "":
        raise ElmoConfigError("the path is empty: pass a directory or a published model's name")
    return Path(path)


def describe_source(path: ModelPath) -> ModelPath:
    """What the commands call the biLM `path` names: its files' `label` where they have one (a saved
    spaCy pipeline: its `elmo` component's); else `path` itself."""
    return locate(path).label or path
