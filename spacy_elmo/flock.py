"""Exclusive locks on files between processes: an flock on a file at a path, taken on the file
still at that path (a holder may remove it as it lets go). The kernel releases a flock when its
holder dies, so a lock left by a killed process blocks nothing."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

PathLike = Union[str, Path]


def take_flock(
    path: PathLike, wait: bool = True, on_wait: Optional[Callable[[], None]] = None
) -> int:
    """A descriptor (read and write) of the file now at `path`, created where missing (never
    through a symlink), under an exclusive flock that lasts until it is closed. Where another
    process holds it: wait (calling `on_wait()` once first), or without `wait` BlockingIOError. A
    holder may remove the file as it releases it: a process that waited on the removed file takes
    the one now at `path`. OSError where `path` cannot be opened (a read-only file system)."""
    path, waited = Path(path), False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise
                if on_wait is not None and not waited:
                    on_wait()
                waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # removed by its holder meanwhile


@contextmanager
def exclusive_lock(path: PathLike, on_wait: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """`take_flock(path, wait=True, on_wait)` for the block; the file is removed as the lock is
    released."""
    fd = take_flock(path, True, on_wait)
    try:
        yield
    finally:
        try:
            Path(path).unlink()
        except OSError:
            pass
        os.close(fd)
