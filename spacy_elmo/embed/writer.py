"""The files of an `embed` output as a run sees them: `OutputWriter`, a small interface
(`h5writer.HDF5Output` is the one implementation), and `Pieces`, a line's array given a piece at a
time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Union, runtime_checkable

import numpy as np


@dataclass
class Pieces:
    """An array too large to hold at once (the layers of a very long line), given as consecutive
    pieces along `axis`, each at most `chunk` long there: `shape` and `dtype` of the whole."""

    shape: tuple[int, ...]
    dtype: np.dtype
    axis: int
    chunk: int
    pieces: Iterator[np.ndarray]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


Line = tuple[str, Union[np.ndarray, Pieces]]  # a line's text and its array


@runtime_checkable
class OutputWriter(Protocol):
    """Writes the files of an embed output, each whole: visible under its name only once complete
    (so that a file found under its name is complete, which resume relies on), and nothing of it
    left after an error. `settings` is what the run records (`job.Settings`)."""

    def write_piece(
        self, path: Path, first: int, count: int, lines: Iterable[Line], settings: dict[str, Any]
    ) -> None:
        """One file at `path` of the `count` lines `first, first + 1, ...` (ElmoFileError where
        `lines` ends early)."""

    def assemble(
        self, pieces: list[Path], path: Path, settings: dict[str, Any], tmp_dir: Path
    ) -> None:
        """One file at `path` of every line of `pieces` in order, written in `tmp_dir` (on `path`'s
        file system)."""

    def read_settings(self, path: Path) -> dict[str, Any]:
        """The settings a complete output file records; ElmoFileError where `path` is not one."""
