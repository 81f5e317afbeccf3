"""The batches of both training schemes: packed streams (bilm-tf's) and one sentence per row.

Batches hold, for both directions at once:

- `index` `(2, B, T)`: per direction, row and position, an index into `chars`, the character ids
  `(U, width)` of the `U` distinct token texts of the batch (the token encoder runs once per text),
  made by the model's own encoder (`BiLM.word_ids`: lowercased where it lowercases), so that
  training feeds a token the ids the trained model gives it at inference;
- `targets` `(2, B, T)`: output-vocabulary ids of the next token in reading order;
- `mask` `(2, B, T)`: True on predicted positions (a prefix of each row).

Direction 0 reads left to right; direction 1 reads the same text reversed (`</S> w_n ... w_1 <S>`),
already in its reading order, as bilm-tf trains its backward LM.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence

import numpy as np
import torch

from .text import TokenizedFile
from .vocab import BOS_ID, EOS_ID

WordIds = Callable[[Sequence[str]], np.ndarray]  # token texts -> (n, width) ids: `BiLM.word_ids`


class Batch(NamedTuple):
    """Both directions of one step: `index`, `targets`, `mask` `(2, B, T)`; `chars` `(U, width)`,
    the model's ids of the batch's token texts."""

    index: torch.Tensor
    chars: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    @property
    def n_predicted(self) -> int:
        """Predicted tokens per direction (both directions predict as many)."""
        return int(self.mask[0].sum())


def make_batch(
    inputs: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    texts: Sequence[str],
    out_ids: np.ndarray,
    word_ids: WordIds,
) -> Batch:
    """inputs, targets `(2, B, T)` text indices; mask `(2, B, T)` -> `Batch` (targets as output
    ids; the texts' character ids from `word_ids`, the model's encoder)."""
    types, inverse = np.unique(inputs, return_inverse=True)
    chars = torch.from_numpy(word_ids([texts[i] for i in types]))
    return Batch(
        torch.from_numpy(inverse.reshape(inputs.shape).astype(np.int64)),
        chars,
        torch.from_numpy(out_ids[targets]),
        torch.from_numpy(mask),
    )


def stream_batches(
    f: TokenizedFile,
    order: np.ndarray,
    out_ids: np.ndarray,
    rows: int,
    window: int,
    rank: int,
    world: int,
    word_ids: WordIds,
) -> List[Callable[[], Batch]]:
    """bilm-tf's packed windows. Sentences (in `order`, each `<S> w.. </S>`) form one stream, cut
    into `world * rows` equal parts; this rank reads parts `rank * rows ...`. Window i of a part
    holds its tokens `i*window ... (i+1)*window - 1` and, for direction 1, the same of the reversed
    part."""
    stream = np.concatenate([np.concatenate(([BOS_ID], f.sentences[i], [EOS_ID])) for i in order])
    part = len(stream) // (world * rows)
    parts = stream[: world * rows * part].reshape(world * rows, part)[
        rank * rows : (rank + 1) * rows
    ]
    both = np.stack([parts, parts[:, ::-1]])  # (2, rows, part)
    mask = np.ones((2, rows, window), dtype=bool)

    def batch(i: int) -> Batch:
        s = slice(i * window, (i + 1) * window)
        t = slice(i * window + 1, (i + 1) * window + 1)
        return make_batch(both[:, :, s], both[:, :, t], mask, f.texts, out_ids, word_ids)

    return [lambda i=i: batch(i) for i in range((part - 1) // window)] if part > 0 else []


def sentence_batches(
    f: TokenizedFile,
    order: np.ndarray,
    out_ids: np.ndarray,
    batch_tokens: int,
    rank: int,
    world: int,
    rng: np.random.RandomState,
    word_ids: WordIds,
) -> List[Callable[[], Batch]]:
    """One sentence per row. Sentences (in `order`) are sorted by length within pools of about 50
    batches and grouped under `world * batch_tokens` padded positions; batches are then shuffled and
    rank r takes sentences r, r + world, ... of each (batches with fewer than `world` are
    dropped)."""
    budget = world * batch_tokens
    lengths = np.array([len(f.sentences[i]) + 1 for i in order])
    pool = max(1, 50 * budget // max(1, int(lengths.mean()) if len(lengths) else 1))
    groups: List[List[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(range(start, min(start + pool, len(order))), key=lambda k: lengths[k])
        group: List[int] = []
        for k in chunk:
            if group and (len(group) + 1) * lengths[k] > budget:
                groups.append(group)
                group = []
            group.append(k)
        if group:
            groups.append(group)
    groups = [groups[i] for i in rng.permutation(len(groups)) if len(groups[i]) >= world]

    def batch(group: List[int]) -> Batch:
        sents = [f.sentences[order[k]] for k in group[rank::world]]
        T = max(len(s) for s in sents) + 1
        inputs = np.zeros((2, len(sents), T), dtype=np.int64)
        targets = np.zeros((2, len(sents), T), dtype=np.int64)
        mask = np.zeros((2, len(sents), T), dtype=bool)
        for row, s in enumerate(sents):
            seq = np.concatenate(([BOS_ID], s, [EOS_ID]))
            for d, x in enumerate((seq, seq[::-1])):
                inputs[d, row, : len(s) + 1] = x[:-1]
                targets[d, row, : len(s) + 1] = x[1:]
                mask[d, row, : len(s) + 1] = True
        return make_batch(inputs, targets, mask, f.texts, out_ids, word_ids)

    return [lambda g=g: batch(g) for g in groups]
