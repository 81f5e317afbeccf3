"""An LRU cache of token-layer vectors keyed by token text.

The token layer depends on a token's characters alone, so its vector can be reused for
every occurrence of the word. Rows live in one preallocated table, so a lookup is a
single index operation.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, List, Sequence

import torch
from torch import Tensor


class TokenLayerCache:
    """Maps token texts to rows of a `(capacity, dim)` table; least recently used rows are reused."""

    def __init__(self, capacity: int, dim: int):
        self.capacity, self.dim = int(capacity), dim
        self.table: Tensor = torch.empty(0, dim)
        self.slots: "OrderedDict[str, int]" = OrderedDict()
        self.hits = 0
        self.lookups = 0

    def clear(self) -> None:
        self.slots.clear()
        self.table = torch.empty(0, self.dim)

    def reset_stats(self) -> None:
        self.hits = self.lookups = 0

    def lookup(self, words: Sequence[str], compute: Callable[[List[str]], Tensor]) -> Tensor:
        """Distinct `words` -> `(len(words), dim)`; `compute(missing_words)` fills the misses."""
        self.lookups += len(words)
        if len(words) > self.capacity:  # would evict rows it needs: bypass
            return compute(list(words))
        slots = self.slots
        idx: List[int] = []
        missing: List[int] = []
        for i, w in enumerate(words):
            s = slots.get(w)
            if s is None:
                missing.append(i)
                idx.append(-1)
            else:
                slots.move_to_end(w)
                idx.append(s)
        self.hits += len(words) - len(missing)
        if missing:
            vectors = compute([words[i] for i in missing])
            if self.table.shape[0] == 0:
                self.table = torch.empty(self.capacity, self.dim, dtype=vectors.dtype, device=vectors.device)
            in_use = {idx[i] for i in range(len(words)) if idx[i] >= 0}
            for k, i in enumerate(missing):
                if len(slots) < self.capacity:
                    s = len(slots)
                else:  # evict the least recently used row not needed by this lookup
                    for old in slots:
                        if slots[old] not in in_use:
                            break
                    s = slots.pop(old)
                slots[words[i]] = s
                in_use.add(s)
                idx[i] = s
            self.table[torch.tensor([idx[i] for i in missing], device=self.table.device)] = vectors
        return self.table[torch.tensor(idx, device=self.table.device)]
