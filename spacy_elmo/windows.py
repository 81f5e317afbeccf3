"""A Doc's biLM inputs: sentences (a rule where the Doc has no boundaries) cut into windows of
bounded length.

These set what the biLM reads as one sequence; `bilm/runner.py`'s exact windows only bound memory.
"""

from __future__ import annotations

from typing import Iterable, List, NamedTuple, Sequence, Tuple

# sentence-final marks: Latin, CJK full and half width (。！？｡), Arabic and Urdu (؟ ۔), Devanagari
# dandas (। ॥)
SENTENCE_END = frozenset(".!?\u2026\u3002\uff01\uff1f\uff61\u061f\u06d4\u0964\u0965")
CLOSING = frozenset(
    ['"', "'", "''", "\u201d", "\u2019", ")", "]", "\u00bb", "\u300d", "\u300f", "\uff09"]
)


class Window(NamedTuple):
    """One biLM input over a Doc's non-whitespace tokens: positions `[start, end)`; the outputs
    at `[keep_start, keep_end)` are kept (the rest is context shared with the neighbouring
    windows)."""

    start: int
    end: int
    keep_start: int
    keep_end: int


def rule_sentences(texts: Sequence[str]) -> List[Tuple[int, int]]:
    """`[start, end)` ranges that end after sentence-final punctuation (and any closing quotes)."""
    out, start, i, n = [], 0, 0, len(texts)
    while i < n:
        text = texts[i]
        i += 1
        if text and all(c in SENTENCE_END for c in text):
            while i < n and texts[i] in CLOSING:
                i += 1
            out.append((start, i))
            start = i
    if start < n:
        out.append((start, n))
    return out


def windows_of(sentences: Iterable[Tuple[int, int]], max_length: int) -> List[Window]:
    """Sentences -> biLM inputs of at most `max_length` tokens; a longer sentence becomes
    overlapping windows with `max_length // 4` tokens of context on each side of the part that is
    kept."""
    context = max_length // 4
    step = max_length - 2 * context
    out = []
    for a, b in sentences:
        if b - a <= max_length:
            out.append(Window(a, b, a, b))
            continue
        k = a
        while k < b:
            keep_end = min(k + step, b)
            start, end = max(a, k - context), min(b, keep_end + context)
            if start == a:
                end = min(b, a + max_length)
            if end == b:  # the last window: it keeps the rest
                start, keep_end = max(a, b - max_length), b
            out.append(Window(start, end, k, keep_end))
            k = keep_end
    return out
