"""What a load may allocate: the memory available to this process, and the check made before a biLM
is built."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import ElmoResourceError

CGROUP = Path("/sys/fs/cgroup")


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate: the kernel's MemAvailable, lowered to what a cgroup
    (v2) memory limit leaves; None where neither can be read (not Linux)."""
    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            limits.append(int(limit) - int((CGROUP / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def check_memory(need: int, source: str) -> None:
    """ElmoResourceError naming `source` where loading it needs more than `need` bytes than are
    available."""
    available = available_memory()
    if available is not None and need > available:
        raise ElmoResourceError(
            f"{source}: loading this biLM needs about {need / 2**30:.2f} GiB of memory, "
            f"{max(available, 0) / 2**30:.2f} GiB are available"
        )


def is_allocation_failure(err: BaseException) -> bool:
    """Whether torch's or numpy's error says an allocation failed (torch raises RuntimeError for
    it)."""
    text = str(err)
    return (
        isinstance(err, MemoryError)
        or "DefaultCPUAllocator" in text
        or "can't allocate memory" in text
        or "not enough memory" in text
        or "out of memory" in text.lower()
    )
