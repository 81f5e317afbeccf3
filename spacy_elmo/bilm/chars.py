"""Token texts -> ELMo character ids (the bilm-tf / AllenNLP mapping).

A token becomes `max_chars` slots `[BOW, utf-8 bytes..., EOW, PAD...]`, bytes cut to
`max_chars - 2`; every id is then shifted by +1 so that 0 means "no token" (padding).
`<S>` / `</S>` (added around each sentence, or given literally as token texts) become
`[BOW, 256 or 257, EOW, PAD...]`.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


@lru_cache(maxsize=8192)  # misses of the token cache, and the "carry" path
def _word_ids(text: str, max_chars: int) -> np.ndarray:
    ids = np.full(max_chars, PAD_CHAR + 1, dtype=np.int64)
    if text == BOS_TOKEN:
        body = [BOS_CHAR]
    elif text == EOS_TOKEN:
        body = [EOS_CHAR]
    else:
        body = list(text.encode("utf-8", "ignore")[: max_chars - 2])
    ids[0] = BOW_CHAR + 1
    ids[1 : 1 + len(body)] = np.asarray(body, dtype=np.int64) + 1
    ids[1 + len(body)] = EOW_CHAR + 1
    ids.setflags(write=False)
    return ids


def word_char_ids(text: str, max_chars: int = 50) -> np.ndarray:
    """One token text -> int64 array `(max_chars,)` of shifted character ids (read-only)."""
    if not isinstance(text, str):
        raise TypeError(f"token texts must be str, got {type(text).__name__}: {text!r}")
    return _word_ids(text, max_chars)


def words_char_ids(words: Sequence[str], max_chars: int = 50) -> np.ndarray:
    """Token texts -> int64 array `(n_words, max_chars)`."""
    if not words:
        return np.zeros((0, max_chars), dtype=np.int64)
    return np.stack([word_char_ids(w, max_chars) for w in words])


def batch_char_ids(sentences: Sequence[Sequence[str]], max_chars: int = 50) -> np.ndarray:
    """Sentences -> int64 array `(n_sentences, max_len + 2, max_chars)` with `<S>`/`</S>` added.

    Rows shorter than the longest sentence are padded with 0 (the "no token" id).
    """
    max_len = max((len(s) for s in sentences), default=0)
    out = np.zeros((len(sentences), max_len + 2, max_chars), dtype=np.int64)
    for i, sent in enumerate(sentences):
        out[i, : len(sent) + 2] = words_char_ids([BOS_TOKEN, *sent, EOS_TOKEN], max_chars)
    return out
