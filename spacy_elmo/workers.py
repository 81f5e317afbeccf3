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
reads only its queue of texts), and at the worker's exit read what is left in its queue of texts, up
to the parent's end-of-work sentinel. A process that is not such a worker is left alone.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
import warnings
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from multiprocessing.reduction import ForkingPickler as _ForkingPickler
from multiprocessing.util import Finalize
from typing import List, Optional, Set

DRAIN_SECONDS = 30.0  # the most a worker spends reading its left-over texts at exit
_guarded_pid: Optional[int] = None
_worker_pid: Optional[int] = None  # this process's pid where it is such a worker
_warned: Set[str] = set()


def in_spacy_worker() -> bool:
    """Whether this process is a worker of spaCy's `nlp.pipe(n_process=N)` (guarded)."""
    guard_spacy_worker()
    return _worker_pid == os.getpid()


def worker_threads(threads: Optional[int]) -> Optional[int]:
    """The torch threads of a component whose setting is `threads` (None: torch's default): 1 where
    that is None in a worker of spaCy's `nlp.pipe` (its workers share the cores; a forked one is
    at 1 already, a spawned one would take them all). Applies the guard."""
    worker = in_spacy_worker()  # first: the guard applies whatever the setting
    return 1 if threads is None and worker else threads


CARRY_IN_WORKER = (
    "elmo's state policy 'carry' in a worker of nlp.pipe(n_process=N): each worker carries its own "
    "state, so a Doc's vectors depend on how spaCy shares out the texts; use n_process=1 for "
    "bilm-tf's semantics, or the 'warm' policy"
)


def warn_in_spacy_worker(message: str) -> None:
    """Warn with `message` once per process, where it is a worker of spaCy's `nlp.pipe`."""
    if message not in _warned and in_spacy_worker():
        _warned.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


def guard_spacy_worker() -> None:
    """Apply the guard (see the module) where this process is a worker of spaCy's `nlp.pipe`; once
    per process, cheap after that."""
    global _guarded_pid, _worker_pid
    if _guarded_pid == os.getpid():
        return
    _guarded_pid = os.getpid()
    from spacy.language import _apply_pipes, _WorkDoneSentinel

    process = multiprocessing.current_process()
    args = getattr(process, "_args", ())
    if (
        getattr(process, "_target", None) is not _apply_pipes
        or len(args) < 4
        or not isinstance(args[2], Queue)
    ):
        return
    _worker_pid = os.getpid()
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
    ended: List[bool] = []  # whether the worker took the parent's end-of-work sentinel
    get = texts.get

    def get_noting_the_end(*args, **kwargs):
        item = get(*args, **kwargs)
        if isinstance(item, _WorkDoneSentinel):
            ended.append(True)
        return item

    texts.get = get_noting_the_end
    Finalize(None, _drain, args=(texts._reader, ended), exitpriority=100)


def _drain(reader: Connection, ended: List[bool]) -> None:
    """Read what the parent still sends to this worker's queue, up to the end-of-work sentinel that
    spaCy's parent always sends last (nothing when the worker took it). Its feeder thread may not
    have written the texts left yet when the worker gets here: waiting for the sentinel, not for a
    quiet pipe, lets it finish."""
    from spacy.language import _WorkDoneSentinel

    if ended:
        return
    deadline = time.monotonic() + DRAIN_SECONDS
    try:
        while reader.poll(max(deadline - time.monotonic(), 0)):
            if isinstance(_ForkingPickler.loads(reader.recv_bytes()), _WorkDoneSentinel):
                return
    except (OSError, EOFError):
        pass
