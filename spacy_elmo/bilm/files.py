"""Files read and written safely.

Reading: every reader opens its file through `open_regular` (or checks it with `regular_file` where a
library opens it by name): a regular file, or a symlink to one, of a bounded size. A FIFO, a device or
a directory is refused, naming what it is, before it is opened (a FIFO blocks, `/dev/zero` never ends).

Writing: files become visible only when complete: written under a temporary name beside the target,
fsynced, renamed into place, the rename made durable; the temporary is removed on failure.
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Union

from ..errors import ElmoFileError

PathLike = Union[str, Path]
RECORD_BYTES = 64 << 20  # bound on manifests, configs and records of a run (JSON or text, KB to a few MB)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


# ---------------------------------------------------------------------------------------------- reading
def regular_file(path: PathLike, what: str, max_bytes: Optional[int] = None) -> os.stat_result:
    """The status of `path` where it is a regular file (symlinks followed) of at most `max_bytes`;
    else ElmoFileError naming the file, `what` it should be and what it is."""
    path = Path(path)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        dangling = f" (a symlink to {os.readlink(path)}, which does not exist)" if path.is_symlink() else ""
        raise ElmoFileError(f"{what} not found: {path}{dangling}") from None
    except OSError as err:
        raise ElmoFileError(f"{path}: cannot read the {what} ({err.strerror})") from None
    _check_status(path, status, what, max_bytes)
    return status


def _check_status(path: Path, status: os.stat_result, what: str, max_bytes: Optional[int]) -> None:
    if not stat.S_ISREG(status.st_mode):
        kind = next((name for is_kind, name in _KINDS if is_kind(status.st_mode)), "not a regular file")
        if path.is_symlink():
            kind = f"a symlink to {os.path.realpath(path)}, {kind}"
        raise ElmoFileError(f"{path}: the {what} must be a regular file, but this is {kind}")
    if max_bytes is not None and status.st_size > max_bytes:
        raise ElmoFileError(f"{path}: {status.st_size:,} bytes is too large for the {what} (at most {max_bytes:,})")


def open_regular(path: PathLike, what: str, max_bytes: Optional[int] = None) -> BinaryIO:
    """`path` opened to read, in binary, once `regular_file` accepts it; checked again once open (it
    may have been replaced in between)."""
    path = Path(path)
    regular_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # never blocks, even on a FIFO
    except OSError as err:
        raise ElmoFileError(f"{path}: cannot read the {what} ({err.strerror})") from None
    try:
        _check_status(path, os.fstat(fd), what, max_bytes)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of `path`, read whole (see `open_regular`): at most `max_bytes`."""
    with open_regular(path, what, max_bytes) as f:
        data = f.read(os.fstat(f.fileno()).st_size)
        if f.read(1):
            raise ElmoFileError(f"{path}: the {what} grew while it was read (is it still being written?)")
    return data


# ---------------------------------------------------------------------------------------------- writing
def fsync_dir(path: PathLike) -> None:
    """Make the directory entries of `path` (new, renamed or removed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write; on success it is fsynced and renamed to `path`
    (readers see the old file or the whole new one, even after a crash); on failure it is removed."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: PathLike, data: Union[str, bytes]) -> None:
    """Write `data` (str as UTF-8) to `path` whole (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
