"""The `elmo` component's cache of biLM outputs per input sequence: an LRU bounded in bytes, keyed
by a digest of each sequence (a fixed size, however long its token texts)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Dict, Hashable, List, Optional, Sequence

import numpy as np

from .own_locks import OwnLocks


def sequence_digest(seq: Sequence[str]) -> bytes:
    """sha256 of token texts, each prefixed by its length in bytes: another sequence, however it
    splits the same characters, has another digest."""
    digest = hashlib.sha256()
    for text in seq:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


class FeatureCache(OwnLocks):
    """An LRU cache of read-only arrays bounded by their total size in bytes (0 disables it).
    Safe to share between threads: every change happens under a lock. Copies and pickles start
    empty, with a lock of their own (a pickled pipeline carries no cached arrays)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.entries: "OrderedDict[Hashable, np.ndarray]" = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def _fresh_state(self) -> dict:
        return {"entries": OrderedDict(), "nbytes": 0}

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: Hashable) -> Optional[np.ndarray]:
        with self._lock:
            value = self.entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self.entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: np.ndarray) -> None:
        with self._lock:
            if value.nbytes > self.max_bytes or key in self.entries:
                return
            while self.nbytes + value.nbytes > self.max_bytes:
                self.nbytes -= self.entries.popitem(last=False)[1].nbytes
            self.entries[key] = value
            self.nbytes += value.nbytes

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.nbytes = 0

    def through(
        self,
        prefix: Hashable,
        inputs: Sequence[List[str]],
        compute: Callable[[List[List[str]]], List[np.ndarray]],
    ) -> List[np.ndarray]:
        """The arrays of `inputs` (token-text sequences), keyed by `(prefix, sequence_digest)`:
        those cached are read, the others computed together by `compute` (one array per sequence,
        each distinct sequence once) and stored."""
        keys = [(prefix, sequence_digest(seq)) for seq in inputs]
        results = [self.get(key) for key in keys]
        todo: Dict[Hashable, List[int]] = {}
        for i, r in enumerate(results):
            if r is None:
                todo.setdefault(keys[i], []).append(i)
        if todo:
            computed = compute([inputs[rows[0]] for rows in todo.values()])
            for (key, rows), arr in zip(todo.items(), computed):
                self.put(key, arr)
                for i in rows:
                    results[i] = arr
        return results
