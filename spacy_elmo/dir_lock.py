"""The lock of a run's directory (`embed`'s, `pretrain`'s): an exclusive flock on a file that names
its holder (its pid and host), so that a second writer is refused, or told whom it waits for. The
kernel releases a flock when its holder dies, so a lock left by a killed run blocks nothing."""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Optional

from .errors import ElmoFileError, ElmoResumeError
from .files import write_error
from .flock import take_flock

RETRY = "free space and run again"


def take_lock(path: Path, output: Path, wait: bool = False, retry: str = RETRY) -> IO[str]:
    """`flock.take_flock` on `path`, waiting for it (`wait`) or refusing where another process holds
    it (naming it: the holder writes its pid and host into the file); the lock lasts until the
    returned file is closed (`release`). A file that cannot be made: one error, with `retry` where
    the disk is full."""
    try:
        # the caller holds it open; its name is `path`
        file = open(path, "r+", opener=lambda name, _flags: take_flock(name, wait))
    except BlockingIOError:
        try:
            with open(path) as held:
                who = _holder(held)
        except OSError:
            who = ""
        raise ElmoResumeError(
            f"{output} is locked by another process that is writing it ("
            f"{f'{who}; ' if who else ''}{path}): wait for it to finish, or stop it and run "
            "again"
        ) from None
    except OSError as err:
        raise (write_error(err, path, retry) or ElmoFileError(f"cannot write {path}")) from None
    try:
        file.truncate(0)
        file.write(f"{os.getpid()} {socket.gethostname()}\n")
        file.flush()
    except OSError:
        pass  # the lock holds without its holder's name (a full disk)
    return file


def release(lock: IO[str], remove: bool = False) -> None:
    """Release a lock of `take_lock`; `remove`: remove its file first (no lock file stays once a run
    is done)."""
    if remove:
        try:
            os.unlink(lock.name)
        except OSError:
            pass
    lock.close()


@contextmanager
def locked(path: Path, output: Path, wait: bool = False, retry: str = RETRY) -> Iterator[None]:
    """`take_lock` for the block; the lock's file is removed as it is released."""
    lock = take_lock(path, output, wait, retry)
    try:
        yield
    finally:
        release(lock, remove=True)


def _holder(lock: IO[str]) -> str:
    """`pid N on HOST` as the holder of `lock` wrote it, or ""."""
    try:
        lock.seek(0)
        found = lock.read(300).split()
    except (OSError, UnicodeDecodeError):
        return ""
    return f"pid {found[0]} on {found[1]}" if len(found) == 2 and found[0].isdigit() else ""


def held_by(path: Path) -> Optional[str]:
    """Whether another process holds the lock at `path`: `pid N on HOST` (or "a process" where it
    did not say which), else None."""
    try:
        file = open(path)
    except OSError:
        return None
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(file) or "a process"
        return None
