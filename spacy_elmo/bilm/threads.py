"""torch's threads: how many a call uses, the pool that runs the two LSTM directions side by side,
and what a forked child must reset."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterator, Optional

import torch

from ..errors import ElmoConfigError

_in_forked_child = False


def check_threads(threads: Optional[int]) -> Optional[int]:
    """None (torch's default) or a positive int; anything else is a ValueError."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ElmoConfigError(f"threads must be a positive integer or null (torch's default), got {threads!r}")
    return threads


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block on `threads` torch threads (None: leave them as they are), then restore the
    calling thread's count. In a forked child the count stays 1 (see `_after_fork_in_child`)."""
    if threads is None or _in_forked_child:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(check_threads(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def both_directions(run: Callable[[int], None]) -> None:
    """`run(0)` and `run(1)` (independent work, one per direction), each on its own half of torch's
    threads when there are at least 2: each direction's small matrix products then run without
    synchronising across all threads. Threads are restored after."""
    threads = torch.get_num_threads()
    if threads < 2:
        run(0)
        run(1)
        return
    grad_mode = torch.is_grad_enabled()
    inference_mode = torch.is_inference_mode_enabled()

    def task(direction: int) -> None:
        torch.set_num_threads(threads // 2)
        with torch.inference_mode(inference_mode), torch.set_grad_enabled(grad_mode):
            run(direction)

    try:
        futures = [_direction_pool().submit(task, d) for d in (0, 1)]
        for future in futures:
            future.result()
    finally:
        torch.set_num_threads(threads)


@lru_cache(maxsize=None)
def _direction_pool() -> ThreadPoolExecutor:
    """Two worker threads, made once per process."""
    return ThreadPoolExecutor(2, thread_name_prefix="spacy-elmo-direction")


def _after_fork_in_child() -> None:
    """A forked child (spaCy's `n_process`, `spacy apply --n-process`) inherits the parent's thread
    pools but not their threads. It makes its own direction pool, and runs torch on one thread:
    the OpenMP pool of a parent that has run torch cannot be used in a forked child (a parallel
    region there waits forever), and one thread per process is what `n_process` wants anyway."""
    global _in_forked_child
    _in_forked_child = True
    _direction_pool.cache_clear()
    torch.set_num_threads(1)


os.register_at_fork(after_in_child=_after_fork_in_child)
