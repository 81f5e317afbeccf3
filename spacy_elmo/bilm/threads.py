"""torch's threads: how many a call uses, the pool that runs the two LSTM directions side by side,
and what a forked child must reset.

torch keeps two counts: one process-wide (set by `torch.set_num_threads`, taken by a thread when it
first uses torch) and, under OpenMP, one per thread (what `torch.get_num_threads` reads and torch's
parallel loops use; `torch.set_num_threads` sets both). A thread that first uses torch while
another one runs a `torch_threads` block takes that block's count.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterator, Optional

import torch

from ..errors import ElmoConfigError

# torch starts one OS thread per count, and threads beyond the cores only wait: 1024 is the hardware
# threads of the largest servers (a fixed bound, so that a config written on one loads on a smaller
# machine). Far more fail inside torch ("could not create a primitive", a segfault, libgomp's
# "Thread creation failed").
MAX_THREADS = 1024
_in_forked_child = False
_counts_lock = threading.Lock()
_blocks = 0  # `torch_threads` blocks running now, in all threads
_count_found = 0  # the count when the first of them began


def check_threads(threads: Optional[int], name: str = "threads") -> Optional[int]:
    """None (torch's default) or an int from 1 to MAX_THREADS; anything else is an ElmoConfigError
    naming `name`."""
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS
    ):
        raise ElmoConfigError(
            f"{name} must be an integer from 1 to {MAX_THREADS} or null (torch's default), "
            f"got {threads!r}"
        )
    return threads


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block on `threads` torch threads (None: leave them as they are). After it, the
    calling thread is at the count it had; after the last block running in any thread, the whole
    process is at the count found when the first of them began (threads started later take it).
    Blocks that run at once in several threads share the process-wide count. In a forked child the
    count stays 1 (see `_after_fork_in_child`)."""
    global _blocks, _count_found
    if threads is None or _in_forked_child:
        yield
        return
    check_threads(threads)
    with _counts_lock:
        own = torch.get_num_threads()
        if _blocks == 0:
            _count_found = own
        _blocks += 1
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        with _counts_lock:
            _blocks -= 1
            # The last block sets the count found (the process-wide one, which earlier blocks that
            # ended set to their own); `own` differs from it only in a thread that first used torch
            # during another block.
            torch.set_num_threads(own if _blocks else _count_found)


def both_directions(run: Callable[[int], None]) -> None:
    """`run(0)` and `run(1)` (independent work, one per direction), each on its own half of torch's
    threads when there are at least 2: each direction's small matrix products then run without
    synchronising across all threads."""
    threads = torch.get_num_threads()
    if threads < 2:
        run(0)
        run(1)
        return
    grad_mode = torch.is_grad_enabled()
    inference_mode = torch.is_inference_mode_enabled()

    def task(direction: int) -> None:
        with torch.inference_mode(inference_mode), torch.set_grad_enabled(grad_mode):
            run(direction)

    with torch_threads(threads // 2):  # also MKL's count, which is process-wide only
        pool = _direction_pool(threads // 2)
        for future in [pool.submit(task, d) for d in (0, 1)]:
            future.result()


def _hold_threads(threads: int) -> None:
    """A pool thread's own count, set once: after its first use of torch (which would set it
    again)."""
    torch.get_num_threads()
    torch.set_num_threads(threads)


@lru_cache(maxsize=None)
def _direction_pool(threads_each: int) -> ThreadPoolExecutor:
    """Two worker threads that run torch on `threads_each` threads each, made once per process and
    count (the workers start inside `both_directions`'s block, which restores the count they
    set)."""
    return ThreadPoolExecutor(
        2,
        thread_name_prefix="spacy-elmo-direction",
        initializer=_hold_threads,
        initargs=(threads_each,),
    )


def _after_fork_in_child() -> None:
    """A forked child (spaCy's `n_process`, `spacy apply --n-process`) inherits the parent's thread
    pools but not their threads. It makes its own direction pools, and runs torch on one thread:
    the OpenMP pool of a parent that has run torch cannot be used in a forked child (a parallel
    region there waits forever), and one thread per process is what `n_process` wants anyway."""
    global _in_forked_child
    _in_forked_child = True
    _direction_pool.cache_clear()
    torch.set_num_threads(1)


os.register_at_fork(after_in_child=_after_fork_in_child)
