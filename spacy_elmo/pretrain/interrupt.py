"""Ctrl-C during training stops it at the end of the step, after a checkpoint, so no step is lost;
a second Ctrl-C stops it at once."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def deferred_interrupt() -> Iterator[Callable[[], bool]]:
    """Inside, the first SIGINT only sets a flag, read by the function yielded; the second raises
    KeyboardInterrupt as usual. Off (the flag stays down) outside the main thread, which alone may
    handle signals."""
    caught = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def on_interrupt(signum, frame):
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield lambda: bool(caught)
    finally:
        signal.signal(signal.SIGINT, previous)
