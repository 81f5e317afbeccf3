"""HDF5 files of `embed`, each written whole: the layout, `H5Writer`, the writers of a piece and of
the assembled output, and `HDF5Output`, the `writer.OutputWriter` a run uses.

Every file has the layout `allennlp elmo` wrote: one dataset per input line, named by the line's
number in the whole input, shaped `(n_layers + 1, n_tokens, dim)` (or `(n_tokens, dim)` for one
layer or a mix), float32 or float16; `sentence_to_index`, a one-element string dataset holding JSON
`{sentence text: "index"}` (fixed-length bytes, which can be written a piece at a time, where
AllenNLP's is a variable-length str; `json.loads` of element 0 reads both); and the root
attribute `spacy_elmo.settings` (JSON: the input, the weights' fingerprint, every setting).

Completed work lives only in files that are complete and closed: HDF5 updates its metadata in place,
so a file open for writing is never trusted after a crash. A file is written under a temporary name,
closed, fsynced and renamed (os.replace), then its directory is fsynced. Disk space for it is
reserved ahead of HDF5's writes (posix_fallocate): a full disk then surfaces as ENOSPC from the
reservation, in Python, and never inside HDF5, which answers a failed write with errors it cannot
report and then a crash.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import h5py
import numpy as np

from .. import files
from ..errors import ElmoError, ElmoFileError
from ..files import fsync_dir, parse_json, regular_file
from .writer import Line, Pieces

SETTINGS = "spacy_elmo.settings"
INDEX = "sentence_to_index"
TMP = ".tmp"  # a file under its temporary name: `part-00002.hdf5.tmp`
LIBVER = ("v108", "latest")  # HDF5 1.8's file format or later (see `H5Writer`)
# Compressed: HDF5 1.10's format, whose index of a dataset stored as one chunk takes a few bytes,
# where 1.8's B-tree takes some 3 KB per dataset, more than gzip saves on a line's array.
LIBVER_CHUNKED = ("v110", "latest")
# Upper bounds of what HDF5 allocates beyond the raw data (about twice what it was seen to use):
# the superblock and root group; per dataset its object header and its link in the root group's
# index (some 330 bytes), and for a compressed (chunked) one its chunk index (some 3 KB more).
BASE_BYTES = 1 << 16
OBJECT_BYTES = 1024
CHUNKED_BYTES = 8192
# An assembled `sentence_to_index` of more bytes than this is written a part's index at a time
# (`finish_in_pieces`).
INDEX_IN_PIECES = 1 << 20
RESUME_RETRY = "free space and run again with --resume"  # what to do after a full disk


def write_error(err: OSError, path: Path) -> ElmoError:
    """What went wrong writing `path`, as one line (see `files.write_error`); a full disk:
    `--resume`."""
    return files.write_error(err, path, RESUME_RETRY) or ElmoFileError(f"cannot write {path}")


class H5Writer:
    """An hdf5 file written under a temporary name (`path` + `.tmp`, in `tmp_dir` where given: a
    directory on the same file system) and made visible whole by `commit()`.

    Space is reserved (posix_fallocate) ahead of every dataset, for its bytes and an upper bound of
    HDF5's bookkeeping, so HDF5 never meets a full disk; what is left is given back at each close.
    The file is closed and reopened every `reopen_every` datasets: while a file stays open HDF5
    keeps bookkeeping for every dataset written (a few hundred bytes each), which would grow
    without bound over a file of a million lines. Groups are written in the HDF5 1.8 format
    (`libver`), whose indexed link storage reads only the part of the root group's index it needs;
    the older format keeps all link names in one heap that is read whole and grows by doubling.
    Every h5py reads both.
    """

    def __init__(
        self,
        path: Path,
        reopen_every: int,
        tmp_dir: Optional[Path] = None,
        compressed: bool = False,
    ):
        self.path, self.reopen_every = path, reopen_every
        self.libver = LIBVER_CHUNKED if compressed else LIBVER
        self.tmp = (tmp_dir or path.parent) / (path.name + TMP)
        self.needed, self.reserved, self.count = BASE_BYTES, 0, 0
        self.fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.h5: Optional[h5py.File] = None
        try:
            self._reserve(0)  # before HDF5 writes its superblock
            self.h5 = h5py.File(self.tmp, "w", libver=self.libver)  # truncates: reserve again
            self.reserved = 0
            self._reserve(0)
        except BaseException:
            self.abort()
            raise

    def _reserve(self, nbytes: int, chunked: bool = False) -> None:
        self.needed += nbytes + (CHUNKED_BYTES if chunked else OBJECT_BYTES)
        if self.needed > self.reserved:
            size = max(self.needed, self.reserved + self.reserved // 8)
            try:
                os.posix_fallocate(self.fd, 0, size)
            except OSError as err:
                # no fallocate here: HDF5 writes unguarded
                if err.errno not in (
                    errno.EOPNOTSUPP,
                    errno.EINVAL,
                ):
                    raise
            self.reserved = size

    def add(
        self, name: str, data: Union[np.ndarray, Pieces], compression: Optional[str] = None
    ) -> None:
        """One dataset `name` holding `data`; `compression` (gzip, lzf) where it has elements, as
        one chunk, bytes shuffled (the exponent bytes of the floats together compress best)."""
        if isinstance(data, Pieces):
            self._add_pieces(name, data, compression)
            return
        filters = (
            {"compression": compression, "shuffle": True, "chunks": data.shape}
            if compression and data.size
            else {}
        )
        self._reserve(data.nbytes, chunked=bool(filters))
        self.h5.create_dataset(name, data=data, **filters)
        self._counted()

    def _add_pieces(self, name: str, data: Pieces, compression: Optional[str]) -> None:
        """A dataset written piece by piece along `data.axis`, chunked by the largest piece's
        length: memory holds one piece, never the whole array."""
        chunks = tuple(data.chunk if i == data.axis else n for i, n in enumerate(data.shape))
        filters = {"compression": compression, "shuffle": True} if compression else {}
        self._reserve(
            data.nbytes + OBJECT_BYTES * -(-data.shape[data.axis] // data.chunk), chunked=True
        )
        dataset = self.h5.create_dataset(
            name, shape=data.shape, dtype=data.dtype, chunks=chunks, **filters
        )
        at = 0
        for piece in data.pieces:
            span = piece.shape[data.axis]
            where = tuple(
                slice(at, at + span) if i == data.axis else slice(None)
                for i in range(len(data.shape))
            )
            dataset[where] = piece
            at += span
        if at != data.shape[data.axis]:
            raise ValueError(
                f"dataset {name}: pieces of {at} tokens, expected {data.shape[data.axis]}"
            )
        self._counted()

    def copy_from(self, src: h5py.File, name: str) -> None:
        """Dataset `name` of `src` copied as stored (dtype, filters), without decoding it."""
        # the low-level handle: `src[name]` builds a high-level object per dataset, much slower
        dataset = h5py.h5d.open(src.id, name.encode())
        self._reserve(
            dataset.get_storage_size(),
            chunked=dataset.get_create_plist().get_layout() == h5py.h5d.CHUNKED,
        )
        src.copy(name, self.h5, name=name)
        self._counted()

    def _counted(self) -> None:
        self.count += 1
        if self.count % self.reopen_every == 0:
            self._close()
            self.h5 = h5py.File(self.tmp, "r+", libver=self.libver)
            self.reserved = os.fstat(self.fd).st_size

    def _close(self) -> None:
        """Give back the unused reservation, then close: HDF5 may count a file's whole length as
        allocated at close, and would place the data written after a reopening beyond it."""
        # HDF5's end of allocated space, while open
        os.ftruncate(self.fd, self.h5.id.get_filesize())
        self.h5.close()
        self.h5 = None

    def finish(self, index_json: Union[bytes, bytearray], settings: dict[str, Any]) -> None:
        """Write `sentence_to_index` and the settings, then `commit()`.

        The JSON is written from its buffer as one fixed-length string (`f[INDEX][0]` reads it as
        bytes, as it does a variable-length one): memory peaks at the JSON's size, where a
        variable-length string would be copied twice more."""
        buffer = np.frombuffer(index_json, dtype=f"S{len(index_json)}")  # a view: no copy
        self._reserve(len(index_json) + len(json.dumps(settings)))
        self.h5.create_dataset(INDEX, (1,), dtype=buffer.dtype).write_direct(buffer)
        self.h5.attrs[SETTINGS] = json.dumps(settings, sort_keys=True)
        self.commit()

    def finish_in_pieces(
        self, size: int, pieces: Iterable[Union[bytes, memoryview]], settings: dict[str, Any]
    ) -> None:
        """`finish` for an index of `size` bytes given as consecutive `pieces`, never held whole:
        HDF5 is asked what `finish` asks (the same file, byte for byte), the index's bytes given
        from an untouched anonymous mapping (zero pages, which take no memory); once HDF5 has closed
        the file, the pieces are written over those bytes in place."""
        self._reserve(size + len(json.dumps(settings)))
        zeros = mmap.mmap(-1, size)
        buffer = np.frombuffer(zeros, dtype=f"S{size}")
        dataset = self.h5.create_dataset(INDEX, (1,), dtype=buffer.dtype)
        dataset.write_direct(buffer)
        del buffer
        zeros.close()
        at = start = dataset.id.get_offset()
        self.h5.attrs[SETTINGS] = json.dumps(settings, sort_keys=True)
        self._close()
        for piece in pieces:
            piece = memoryview(piece)
            while piece:
                written = os.pwrite(self.fd, piece, at)
                at, piece = at + written, piece[written:]
        if at - start != size:
            raise ElmoFileError(
                f"{self.path}: {at - start} bytes of {INDEX} written, expected {size}"
            )
        self._publish()

    def commit(self) -> None:
        """Close, fsync, rename to `path`, fsync the directory: the file is visible only whole."""
        self._close()
        self._publish()

    def _publish(self) -> None:
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Close and remove the temporary file (after an error: nothing incomplete stays)."""
        if self.h5 is not None:
            self.h5.close()  # its writes fall in reserved space
            self.h5 = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tmp.unlink(missing_ok=True)


def index_items(texts: Iterable[str], first: int) -> bytes:
    """`"text": "index"` pairs of JSON, comma-separated, for lines `first, first + 1, ...` (ASCII:
    `json.dumps` escapes every non-ASCII character and NUL)."""
    return ", ".join(f'{json.dumps(t)}: "{i}"' for i, t in enumerate(texts, first)).encode("ascii")


def write_piece(
    path: Path,
    first: int,
    count: int,
    lines: Iterable[Line],
    settings: dict[str, Any],
    *,
    compression: Optional[str] = None,
    reopen_every: int = 10_000,
) -> None:
    """Write one whole file at `path` from `(text, array)` for `count` lines, its datasets named
    `first`, `first + 1`, ...; visible only once complete (ElmoFileError where `lines` ends
    early)."""
    out = H5Writer(path, reopen_every, compressed=bool(compression))
    try:
        texts = []
        for text, array in lines:
            out.add(str(first + len(texts)), array, compression)
            texts.append(text)
        if len(texts) != count:
            raise ElmoFileError(
                f"{settings['input']}: {len(texts)} lines from line {first}, expected {count}: "
                "the input changed while it was read"
            )
        out.finish(b"{" + index_items(texts, first) + b"}", settings)
    except BaseException:
        out.abort()
        raise


def assemble(
    pieces: list[Path],
    path: Path,
    settings: dict[str, Any],
    tmp_dir: Path,
    reopen_every: int = 10_000,
) -> None:
    """One file at `path` holding every dataset of `pieces` (in order) and their joined
    `sentence_to_index`, written under a temporary name in `tmp_dir` (on `path`'s file system) and
    renamed when complete. A
    sentence repeated across lines maps to its last line: a JSON reader keeps a key's last value
    (Python's `json` and AllenNLP's reader do), as it did in AllenNLP's own files. Memory holds one
    piece's index at a time (`H5Writer.finish_in_pieces`), where it is larger than
    `INDEX_IN_PIECES`."""
    out = H5Writer(path, reopen_every, tmp_dir, compressed=settings["compression"] != "none")
    try:
        sizes = []  # of each piece's `"text": "index", ...` (its JSON less the braces)
        for piece in pieces:
            regular_file(piece, "part of the output")
            with h5py.File(piece, "r") as src:
                for name in sorted((k for k in src if k != INDEX), key=int):
                    out.copy_from(src, name)
                sizes.append(src[INDEX].dtype.itemsize - 2)
        filled = sum(1 for n in sizes if n)
        size = 2 + sum(sizes) + 2 * max(0, filled - 1)
        if size <= INDEX_IN_PIECES:
            out.finish(b"".join(_joined_index(pieces, sizes)), settings)
        else:
            out.finish_in_pieces(size, _joined_index(pieces, sizes), settings)
    except BaseException:
        out.abort()
        raise


def _joined_index(pieces: list[Path], sizes: list[int]) -> Iterator[Union[bytes, memoryview]]:
    """The bytes of the joined `sentence_to_index`, a piece's index at a time."""
    yield b"{"
    first = True
    for piece, size in zip(pieces, sizes):
        if not size:
            continue
        with h5py.File(piece, "r") as src:
            items = src[INDEX][()].view(np.uint8)[1:-1]  # no copy
        if items.size != size:
            raise ElmoFileError(f"{piece}: its {INDEX} changed while the output was assembled")
        if not first:
            yield b", "
        yield memoryview(items)
        first = False
    yield b"}"


@dataclass(frozen=True)
class HDF5Output:
    """The `OutputWriter` of HDF5 files in the layout above: lines `compression`ed (gzip, lzf or
    None), each file closed and reopened every `reopen_every` datasets (see `H5Writer`)."""

    compression: Optional[str] = None
    reopen_every: int = 10_000

    def write_piece(
        self, path: Path, first: int, count: int, lines: Iterable[Line], settings: dict[str, Any]
    ) -> None:
        write_piece(
            path,
            first,
            count,
            lines,
            settings,
            compression=self.compression,
            reopen_every=self.reopen_every,
        )

    def assemble(
        self, pieces: list[Path], path: Path, settings: dict[str, Any], tmp_dir: Path
    ) -> None:
        assemble(pieces, path, settings, tmp_dir, reopen_every=self.reopen_every)

    def read_settings(self, path: Path) -> dict[str, Any]:
        regular_file(path, "existing output")
        try:
            with h5py.File(path, "r") as f:
                settings = recorded_settings(f, path)
                if settings is None:
                    raise ElmoFileError(f"{path}: not an output of `python -m spacy_elmo embed`")
                return settings
        except OSError as err:
            raise ElmoFileError(
                f"{path}: exists and cannot be read as hdf5 ({err}): choose another output"
            ) from None


def recorded_settings(f: h5py.File, path: Path) -> Optional[dict]:
    """The settings `embed` recorded in output file `f` (at `path`); None where there are none (a
    file `allennlp elmo` wrote); ElmoFileError where they are not a JSON object."""
    if SETTINGS not in f.attrs:
        return None
    value = f.attrs[SETTINGS]
    settings = (
        parse_json(value, path, f"attribute '{SETTINGS}'")
        if isinstance(value, (str, bytes))
        else None
    )
    if not isinstance(settings, dict):
        raise ElmoFileError(f"{path}: its attribute '{SETTINGS}' is not a JSON object")
    return settings
