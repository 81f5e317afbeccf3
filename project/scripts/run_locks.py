"""Locks that let several processes run one step of the study together (one per core, say): each
run is claimed by one of them, and a lock left by a process that died is taken over. A lock holds
its owner's pid and, on Linux, the process's start time, so that a pid reused by another process
(after a restart, say) does not keep the lock."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional


@contextmanager
def claim(lock: Path) -> Iterator[bool]:
    """Whether this process may do the work `lock` guards: so that several processes (one per core,
    say) can run the same step and share its runs. A lock left by a process that died, or whose
    pid now belongs to a process started at another time, is taken over."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    mine = lock.with_name(f"{lock.name}.{pid}")
    mine.write_text(json.dumps({"pid": pid, "started": start_time(pid)}), encoding="utf-8")
    try:
        for _ in range(2):
            try:
                os.link(mine, lock)  # the whole record appears at once, or not at all
            except FileExistsError:
                if held(lock):
                    break
                lock.unlink(missing_ok=True)
                continue
            mine.unlink()
            try:
                yield True
            finally:
                lock.unlink(missing_ok=True)
            return
    finally:
        mine.unlink(missing_ok=True)
    yield False


def start_time(pid: int) -> Optional[int]:
    """When process `pid` started, in clock ticks after boot (field 22 of /proc/PID/stat), or None
    where that cannot be read (no such process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        # the fields after the command name, which is in parentheses: field 3 onwards
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def held(lock: Path) -> bool:
    """Whether the process that wrote `lock` is running: its pid is alive and, where the lock
    records it and this system shows it, that process started when the lock's owner did. A lock
    of the earlier form (a bare pid) is judged by its pid alone."""
    try:
        record = json.loads(lock.read_text(encoding="utf-8"))
        pid, started = (
            (record, None) if isinstance(record, int) else (record["pid"], record.get("started"))
        )
        if pid <= 0:
            return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False  # gone, cut off, or not a lock
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    now = start_time(pid)
    return started is None or now is None or now == started
