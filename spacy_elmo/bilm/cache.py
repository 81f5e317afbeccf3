"""An LRU cache of token-layer vectors keyed by what a token's ids depend on (its text, or the cut
of a long one: `BiLM.token_keys`, so no long text is kept).

The token layer depends on a token's characters alone, so its vector can be reused for
every occurrence of the word. Rows live in one preallocated table. Safe to share between
threads: the table and its index change only under a lock, and a lookup copies the rows it
found before another thread can reuse them; the misses are computed outside the lock. Safe from
an interruption (Ctrl-C) at any point: a row counts only once its `owner` names the word, which is
set after the row is written and cleared before it is overwritten. Vectors computed before a
`clear()` (new weights or precision, from another thread) are not stored after it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor

from ..own_locks import OwnLocks


class TokenLayerCache(OwnLocks):
    """Maps token keys (str or bytes) to rows of a `(capacity, dim)` table; least recently used
    rows are reused. Copies and pickles start empty, with a lock of their own."""

    def __init__(self, capacity: int, dim: int):
        self.capacity, self.dim = int(capacity), dim
        self.table: Tensor = torch.empty(0, dim)
        self.slots: "OrderedDict[str, int]" = OrderedDict()
        self.owner: List[Optional[str]] = []  # per row of the table: the word it holds
        self.generation = 0  # counts the clears: what was computed before one is not stored
        self.hits = 0
        self.lookups = 0
        self._lock = threading.Lock()

    def _fresh_state(self) -> dict:
        return {"slots": OrderedDict(), "table": torch.empty(0, self.dim), "owner": []}

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self.slots.clear()
            self.table = torch.empty(0, self.dim)
            self.owner = []

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.lookups = 0

    def lookup(self, words: Sequence[str], compute: Callable[[List[str]], Tensor]) -> Tensor:
        """Distinct `words` -> `(len(words), dim)`; `compute(missing_words)` fills the misses."""
        with self._lock:
            self.lookups += len(words)
            generation = self.generation
            if len(words) > self.capacity:  # would evict rows it needs: bypass
                found, missing = [], list(range(len(words)))
            else:
                held = [self._holds(w) for w in words]
                found = [i for i, h in enumerate(held) if h]
                missing = [i for i, h in enumerate(held) if not h]
                for i in found:
                    self.slots.move_to_end(words[i])
                self.hits += len(found)
            if found:
                rows = torch.tensor([self.slots[words[i]] for i in found], device=self.table.device)
                found_vectors = self.table[rows]  # a copy: safe from later evictions
        if not missing:
            return found_vectors
        vectors = compute([words[i] for i in missing])  # (len(missing), dim)
        if len(words) <= self.capacity:
            self._store([words[i] for i in missing], vectors, generation)
        if not found:
            return vectors
        out = vectors.new_empty(len(words), vectors.shape[1])
        out[torch.tensor(found, device=out.device)] = found_vectors
        out[torch.tensor(missing, device=out.device)] = vectors
        return out

    def _holds(self, word: str) -> bool:
        """Whether `word`'s vector is in the table (its row written for it)."""
        row = self.slots.get(word)
        return row is not None and self.owner[row] == word

    def _store(self, words: List[str], vectors: Tensor, generation: int) -> None:
        """Put `vectors` `(len(words), dim)`, computed in `generation`, in the table, reusing least
        recently used rows; nothing where the cache was cleared since."""
        with self._lock:
            if generation != self.generation:
                return
            if self.table.shape[0] == 0:
                self.table = torch.empty(
                    self.capacity, self.dim, dtype=vectors.dtype, device=vectors.device
                )
                self.owner = [None] * self.capacity
            keep, rows = [], []
            for k, w in enumerate(words):
                if self._holds(w):  # stored meanwhile by another thread
                    continue
                if len(self.slots) < self.capacity:
                    row = len(self.slots)
                else:
                    row = self.slots.pop(next(iter(self.slots)))
                self.slots[w] = row
                keep.append(k)
                rows.append(row)
            if rows:
                for row in rows:
                    self.owner[row] = None
                kept = vectors[torch.tensor(keep, device=vectors.device)]
                self.table[torch.tensor(rows, device=self.table.device)] = kept
                for row, k in zip(rows, keep):
                    self.owner[row] = words[k]
