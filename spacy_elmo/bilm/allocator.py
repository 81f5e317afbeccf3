"""glibc's allocator, set for a process that embeds much text (`python -m spacy_elmo embed`).

Each LSTM direction runs in its own thread (`threads.both_directions`), and glibc gives each thread
an arena of its own: there every batch's large tensors (the gate inputs of a batch's words, tens
of MiB at the original size) grow new 64 MiB heaps that are unmapped again when freed, so the
kernel maps and zeroes the same memory batch after batch. One arena, a fixed mmap threshold of
32 MiB (the largest glibc takes) and no trimming below 1 GiB keep freed memory in the process for
the next batch instead (bench/README.md gives the figures). These are settings of the whole
process, which is why the library leaves them alone: a program that embeds in its own process sets
the same with `GLIBC_TUNABLES` (README.md).
"""

from __future__ import annotations

import ctypes
import platform

# mallopt's parameter (malloc.h) and GLIBC_TUNABLES's name of each setting, and its value
SETTINGS = (
    (-8, "arena_max", 1),
    (-3, "mmap_threshold", 32 << 20),
    (-1, "trim_threshold", 1 << 30),
)
# The same as GLIBC_TUNABLES, for a process started with it
TUNABLES = ":".join(f"glibc.malloc.{name}={value}" for _, name, value in SETTINGS)


def keep_freed_memory() -> bool:
    """Set this process's allocator as above. A thread that first allocates after this shares an
    arena that exists (the main one where no thread allocated before); one that allocated before
    keeps the arena glibc gave it. False, and nothing changed, where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(parameter, value) == 1 for parameter, _, value in SETTINGS)
