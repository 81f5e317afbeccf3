"""Locks that let several processes run one step of the study together (one per core, say): each
run is claimed by one of them, and a lock left by a process that died is taken over."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def claim(lock: Path) -> Iterator[bool]:
    """Whether this process may do the work `lock` guards: so that several processes (one per core,
    say) can run the same step and share its runs. A lock left by a process that died is taken
    over."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if process_alive(lock):
                break
            lock.unlink(missing_ok=True)
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        try:
            yield True
        finally:
            lock.unlink(missing_ok=True)
        return
    yield False


def process_alive(lock: Path) -> bool:
    """Whether the process whose pid `lock` holds is running."""
    try:
        pid = int(lock.read_text(encoding="utf-8"))
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's process
    except (ProcessLookupError, ValueError, FileNotFoundError):
        return False
    return True
