"""Files that become visible only when complete: written under a temporary name in the same
directory, flushed and fsynced, renamed into place, and the rename made durable."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union


def fsync_dir(path: Union[str, Path]) -> None:
    """Make the directory entries of `path` (new, renamed or removed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: Union[str, Path]) -> Iterator[Path]:
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


def write_atomic(path: Union[str, Path], data: Union[str, bytes]) -> None:
    """Write `data` (str as UTF-8) to `path` whole (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
