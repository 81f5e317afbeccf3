"""Reading an `embed` output, lazily, by line number: a single file or a shard directory."""
from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from ..bilm.files import regular_file
from ..errors import ElmoFileError
from .h5writer import INDEX, SETTINGS
from .outdir import MANIFEST, WorkDir, piece_name


class Embeddings:
    """Read-only, lazy access by line number to an embed output: a single file or a shard directory.
    `len`, `[i] -> np.ndarray` (`(n_layers + 1, n_tokens, dim)` or `(n_tokens, dim)`), iteration in
    order, `settings`. Close it (or use `with`) to close its files."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            manifest = WorkDir(self.path, self.path, "shard").manifest()
            if manifest.output != "shards":
                raise ElmoFileError(f"{self.path}: the parts of an unfinished run: finish it with "
                                    "`python -m spacy_elmo embed ... --resume`, then open its output file")
            self.settings = manifest.settings
            ranges = manifest.ranges
            complete = manifest.complete or []
            self.paths = [self.path / piece_name("shard", i) for i in range(len(ranges))]
            missing = [p.name for p, done in zip(self.paths, complete) if not done or not p.is_file()]
            if missing or len(complete) != len(ranges):
                raise ElmoFileError(f"{self.path}: incomplete: {', '.join(missing) or 'shards'} not written; "
                                    "run the same embed command again to finish it")
        else:
            self.paths, ranges, self.settings = [self.path], None, None
        self.files: list[h5py.File | None] = [None] * len(self.paths)
        first = self._file(0)
        if self.settings is None:
            self.settings = json.loads(first.attrs[SETTINGS]) if SETTINGS in first.attrs else {}
            ranges = [(0, len(first) - (INDEX in first))]
        self.starts = [start for start, _ in ranges]
        self.length = ranges[-1][1] if ranges else 0

    def _file(self, i: int) -> h5py.File:
        if self.files[i] is None:
            regular_file(self.paths[i], "embed output")
            try:
                f = h5py.File(self.paths[i], "r")
            except OSError as err:
                raise ElmoFileError(f"{self.paths[i]}: cannot be read as hdf5 ({err})") from None
            if self.settings is not None and json.loads(f.attrs.get(SETTINGS, "null")) != self.settings:
                f.close()
                raise ElmoFileError(f"{self.paths[i]}: written with other settings than {self.path / MANIFEST}")
            self.files[i] = f
        return self.files[i]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> np.ndarray:
        if not isinstance(i, (int, np.integer)) or not -self.length <= i < self.length:
            raise IndexError(f"line {i} out of range for {self.length} lines")
        i = int(i) % self.length
        return self._file(bisect.bisect_right(self.starts, i) - 1)[str(i)][...]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(self.length))

    def close(self) -> None:
        for f in self.files:
            if f is not None:
                f.close()
        self.files = [None] * len(self.paths)

    def __enter__(self) -> Embeddings:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_embeddings(path: str | os.PathLike) -> Embeddings:
    """Open the output of `python -m spacy_elmo embed` (a file, or a directory of shards) for reading."""
    return Embeddings(path)
