"""Docs through the biLM: a Doc's non-whitespace tokens cut into windows (the biLM's inputs), and
the windows' outputs put back at the Doc's token positions (whitespace tokens get zero vectors)."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
from spacy.attrs import IS_SPACE
from spacy.tokens import Doc

from .windows import Window, rule_sentences, windows_of

# A Doc's plan: the token indices of its non-whitespace tokens `(n,)`, and the windows over them.
Plan = Tuple[np.ndarray, List[Window]]


def doc_windows(doc: Doc, use_sents: bool, max_length: int) -> Plan:
    """A Doc's biLM inputs: the token indices of its non-whitespace tokens `(n,)`, and windows of at
    most `max_length` over them, within its sentences (with `use_sents`, where it has boundaries)
    or else the sentences of `rule_sentences`."""
    not_space = doc.to_array([IS_SPACE]) == 0 if len(doc) else np.zeros(0, dtype=bool)
    keep = np.flatnonzero(not_space)
    if use_sents and doc.has_annotation("SENT_START"):
        before = np.concatenate([[0], np.cumsum(not_space)])
        sents = [(int(before[s.start]), int(before[s.end])) for s in doc.sents]
        sents = [(a, b) for a, b in sents if b > a]
    else:
        texts = [doc[int(i)].text for i in keep]
        sents = rule_sentences(texts)
    return keep, windows_of(sents, max_length)


def window_texts(docs: Sequence[Doc], plans: Sequence[Plan]) -> List[List[str]]:
    """The token texts of every window of `docs` (planned by `doc_windows`), Doc after Doc."""
    return [
        [doc[int(i)].text for i in keep[w.start : w.end]]
        for doc, (keep, wins) in zip(docs, plans)
        for w in wins
    ]


def doc_layers(
    doc: Doc, plan: Plan, outputs: List[np.ndarray], n_layers: int, width: int, dtype: type
) -> np.ndarray:
    """The outputs of a Doc's windows, `(n_layers, window length, width)` each, put together:
    read-only `(n_layers, len(doc), width)`, of `dtype` (the one window's array itself where it
    covers the whole Doc)."""
    keep, wins = plan
    if len(wins) == 1 and len(keep) == len(doc) and wins[0] == Window(0, len(doc), 0, len(doc)):
        return outputs[0]
    layers = np.zeros((n_layers, len(doc), width), dtype=dtype)
    for w, arr in zip(wins, outputs):
        layers[:, keep[w.keep_start : w.keep_end]] = arr[
            :, w.keep_start - w.start : w.keep_end - w.start
        ]
    layers.setflags(write=False)
    return layers
