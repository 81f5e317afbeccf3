"""Reading an `embed` output, lazily, by line number: a single file or a shard directory."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Optional, Union

import h5py
import numpy as np

from ..errors import ElmoFileError
from ..files import hdf5_dataset, regular_file
from .h5writer import INDEX, recorded_settings
from .outdir import MANIFEST, WorkDir, piece_name

OUTPUT = "an embed output"


class Embeddings:
    """Read-only, lazy access by line number to an embed output: a single file or a shard directory.
    `len`, `[i] -> np.ndarray` (`(n_layers + 1, n_tokens, dim)` or `(n_tokens, dim)`), iteration in
    order, `settings`. Close it (or use `with`) to close its files."""

    def __init__(self, path: Union[str, os.PathLike], verify: bool = False):
        self.path = Path(path)
        if self.path.is_dir():
            work = WorkDir(self.path, self.path, "shard")
            manifest = work.manifest()
            if manifest.output != "shards":
                raise ElmoFileError(
                    f"{self.path}: the parts of an unfinished run: finish it with "
                    "`python -m spacy_elmo embed ... --resume`, then open its output file"
                )
            self.settings = manifest.settings
            ranges = manifest.ranges
            complete = manifest.complete or []
            self.paths = [self.path / piece_name("shard", i) for i in range(len(ranges))]
            missing = [
                p.name for p, done in zip(self.paths, complete) if not done or not p.is_file()
            ]
            if missing or len(complete) != len(ranges):
                raise ElmoFileError(
                    f"{self.path}: incomplete: {', '.join(missing) or 'shards'} not written; "
                    "run the same embed command again to finish it"
                )
            work.check_shards(manifest, range(len(ranges)) if verify else ())
        else:
            if self.path.name.startswith("shard-") and (self.path.parent / MANIFEST).is_file():
                raise ElmoFileError(
                    f"{self.path}: one shard of {self.path.parent} (its lines numbered as in "
                    "the whole input): open the directory"
                )
            self.paths, ranges, self.settings = [self.path], None, None
        self.ranges = ranges
        self.files: list[Optional[h5py.File]] = [None] * len(self.paths)
        first = self._file(0)
        if self.settings is None:
            self.settings = recorded_settings(first, self.paths[0]) or {}
            ranges = [(0, len(first) - 1)]
        self.starts = [start for start, _ in ranges]
        self.length = ranges[-1][1] if ranges else 0

    def _file(self, i: int) -> h5py.File:
        if self.files[i] is None:
            regular_file(self.paths[i], "embed output")
            try:
                f = h5py.File(self.paths[i], "r")
            except OSError as err:
                raise ElmoFileError(f"{self.paths[i]}: cannot be read as hdf5 ({err})") from None
            try:
                if hdf5_dataset(f, INDEX, self.paths[i], OUTPUT) is None:
                    raise ElmoFileError(
                        f"{self.paths[i]}: not an output of `python -m spacy_elmo embed` (it has "
                        f"no "
                        f"'{INDEX}')"
                    )
                if (
                    self.settings is not None
                    and (recorded_settings(f, self.paths[i]) or {}) != self.settings
                ):
                    raise ElmoFileError(
                        f"{self.paths[i]}: written with other settings than {self.path / MANIFEST}"
                    )
                if self.ranges is not None:
                    start, stop = self.ranges[i]
                    # its first and last line (none in a shard of an empty input)
                    ends = (f.get(str(n), getlink=True) for n in {start, stop - 1} if start < stop)
                    if len(f) != stop - start + 1 or any(link is None for link in ends):
                        raise ElmoFileError(
                            f"{self.paths[i]}: holds other lines than {start} to {stop - 1}, those "
                            f"{self.path / MANIFEST} gives it"
                        )
            except BaseException:
                f.close()
                raise
            self.files[i] = f
        return self.files[i]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> np.ndarray:
        if not isinstance(i, (int, np.integer)) or not -self.length <= i < self.length:
            raise IndexError(f"line {i} out of range for {self.length} lines")
        i = int(i) % self.length
        k = bisect.bisect_right(self.starts, i) - 1
        return self._line(self._file(k), self.paths[k], i)[...]

    def _line(self, f: h5py.File, path: Path, i: int) -> h5py.Dataset:
        """The dataset of line `i` in `f`, checked from its metadata: held in the file itself, a
        float array of the settings' dtype shaped `(layers, tokens, dim)` (`--layer all`) or
        `(tokens, dim)`."""
        node = hdf5_dataset(f, str(i), path, OUTPUT)
        if node is None:
            raise ElmoFileError(
                f"{path}: line {i} is missing (no dataset '{i}'): not an output of "
                "`python -m spacy_elmo embed`, or damaged"
            )
        dtypes = (
            [self.settings["dtype"]]
            if "dtype" in self.settings
            else ["float16", "float32", "float64"]
        )
        ndims = (
            [3 if self.settings["layer"] == "all" else 2] if "layer" in self.settings else [2, 3]
        )
        if node.dtype.name not in dtypes or node.ndim not in ndims:
            want = " or ".join(["(tokens, dim)", "(layers, tokens, dim)"][n - 2] for n in ndims)
            raise ElmoFileError(
                f"{path}: dataset '{i}' has dtype {node.dtype} and shape {node.shape}; the lines "
                f"of "
                f"this output are {' or '.join(dtypes)} arrays of shape {want}"
            )
        return node

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


def open_embeddings(path: Union[str, os.PathLike], verify: bool = False) -> Embeddings:
    """Open the output of `python -m spacy_elmo embed` (a file, or a directory of shards) for
    reading. A shard directory's manifest is checked against its shards (ranges, sizes; each shard's
    lines when it is first read); `verify` checks each shard's sha256 too, reading every shard
    once."""
    return Embeddings(path, verify)
