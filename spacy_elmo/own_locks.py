"""The copy rule of objects guarded by locks of their own (the caches, the biLM's warm state).

A lock cannot be pickled, and a copy sharing one, or the cached contents it guards, would stay tied
to its original: so copies and pickles get new locks and start without the cached contents. This
module imports nothing of the package (every layer may use it).
"""

from __future__ import annotations

import threading
from typing import ClassVar, Tuple


class OwnLocks:
    """Mixin: copies and pickles get new `threading.Lock`s in the attributes named by
    `_lock_names`, and the attributes `_fresh_state()` gives in place of the original's."""

    _lock_names: ClassVar[Tuple[str, ...]] = ("_lock",)

    def _fresh_state(self) -> dict:
        """Attributes a copy starts with instead of the original's (default: none)."""
        return {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__, **self._fresh_state())
        for name in self._lock_names:
            del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for name in self._lock_names:
            setattr(self, name, threading.Lock())
