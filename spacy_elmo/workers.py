"""A guard for the worker processes of spaCy's `nlp.pipe(n_process=N)`, where ELMo's data makes Docs
large.

A worker sends each batch of Docs to the parent through a pipe. When the caller's input raises, the
parent stops reading, closes its end of the pipes and waits for the workers. A worker in the middle
of sending a batch larger than the pipe's buffer (64 KB: a few hundred tokens of ELMo data) should
then get a broken pipe and exit, but under fork it inherited the read ends of every pipe, so its own
copy keeps the pipe open and it blocks forever, and so does the parent. And the parent's queue of
texts for a worker that left keeps its feeder thread writing into a pipe nobody reads, which blocks
the parent's exit.

So, once per worker: close the inherited read ends of pipes that the worker does not read (a worker
reads only its queue of texts), and at the worker's exit read what is left in its queue of texts. A
process that is not such a worker is left alone.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from multiprocessing.util import Finalize
from typing import Optional

DRAIN_SECONDS = 30.0  # the most a worker spends reading its left-over texts at exit
_guarded_pid: Optional[int] = None


def guard_spacy_worker() -> None:
    """Apply the guard (see the module) where this process is a worker of spaCy's `nlp.pipe`; once
    per process, cheap after that."""
    global _guarded_pid
    if _guarded_pid == os.getpid():
        return
    _guarded_pid = os.getpid()
    from spacy.language import _apply_pipes

    process = multiprocessing.current_process()
    args = getattr(process, "_args", ())
    if (
        getattr(process, "_target", None) is not _apply_pipes
        or len(args) < 4
        or not isinstance(args[2], Queue)
    ):
        return
    texts: Queue = args[2]
    # type(), not isinstance(): some objects warn when their __class__ is read
    queue_readers = {id(obj._reader) for obj in gc.get_objects() if issubclass(type(obj), Queue)}
    for obj in gc.get_objects():
        if (
            type(obj) is Connection
            and not obj.closed
            and obj.readable
            and not obj.writable
            and id(obj) not in queue_readers
        ):
            obj.close()
    Finalize(None, _drain, args=(texts._reader,), exitpriority=100)


def _drain(reader: Connection) -> None:
    """Read what the parent still sends to this worker's queue (nothing after a normal end)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    try:
        if not reader.poll(0):
            return
        while time.monotonic() < deadline and reader.poll(0.5):
            reader.recv_bytes()
    except (OSError, EOFError):
        pass
