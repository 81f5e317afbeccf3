"""What the packed inference path computes together: compute batches regrouped by length, the
distinct words of a batch, and the prefix trees that let each direction step every distinct
prefix once."""

from __future__ import annotations

from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

# Bytes of float32 gate inputs per chunk of the packed path (and per piece of the first layer's, a
# row per distinct word): bounds its memory, below glibc's largest mmap threshold (32 MiB), so a
# chunk reuses heap memory rather than fresh pages (bench/README.md).
PACKED_CHUNK_BYTES = 16 * 2**20


def chunk_rows(width: int) -> int:
    """Rows of `width` float32 values in `PACKED_CHUNK_BYTES` (at least 1)."""
    return max(1, PACKED_CHUNK_BYTES // (4 * width))


def word_gate_rows(width: int, n_words: int, device: torch.device) -> int:
    """Rows per piece of a batch's per-word gate inputs `(n_words, width)`: on a CPU a chunk
    (`chunk_rows`); on a GPU all of them, since gathering from several pieces waits for the GPU
    (`gather_rows` asks which rows each piece holds)."""
    return max(1, n_words) if device.type == "cuda" else chunk_rows(width)


# Compute batches (packed, so without padding) hold up to `batch_size * ROWS_PER_BATCH` sentences
# and `batch_size * TOKENS_PER_BATCH` tokens: large matrix products, memory bounded by batch_size.
ROWS_PER_BATCH = 8
TOKENS_PER_BATCH = 256


def batches_by_length(sentences: Sequence[Sequence[str]], batch_size: int) -> Iterator[List[int]]:
    """Indices of non-empty sentences, longest first, in groups of at most
    `batch_size * ROWS_PER_BATCH` sentences and `batch_size * TOKENS_PER_BATCH` tokens."""
    order = sorted((i for i, s in enumerate(sentences) if s), key=lambda i: -len(sentences[i]))
    max_rows, max_tokens = batch_size * ROWS_PER_BATCH, batch_size * TOKENS_PER_BATCH
    batch: List[int] = []
    tokens = 0
    for i in order:
        if batch and (len(batch) == max_rows or tokens + len(sentences[i]) > max_tokens):
            yield batch
            batch, tokens = [], 0
        batch.append(i)
        tokens += len(sentences[i])
    if batch:
        yield batch


def word_index(sentences: Sequence[Sequence[str]]) -> Tuple[List[str], np.ndarray]:
    """Non-empty sentences -> their distinct words and a `(B, T)` int64 index into them
    (0-padded)."""
    vocab: dict = {}
    index = np.zeros((len(sentences), max(len(s) for s in sentences)), dtype=np.int64)
    for row, sent in enumerate(sentences):
        index[row, : len(sent)] = [vocab.setdefault(w, len(vocab)) for w in sent]
    return list(vocab), index


class PrefixTree(NamedTuple):
    """The distinct prefixes of a batch of rows read in one direction, depth-major: under a start
    state shared by every row, rows that begin with the same words have the same states there, so
    each distinct prefix is stepped once.

    words `(N,)`: the word read at each node; batch_sizes: nodes per depth (never 0); parents: per
    depth, the index of each node's parent among the previous depth's nodes `(batch_sizes[t],)`, or
    None where node k continues node k (at depth 0: where every node starts from the shared state).
    """

    words: Tensor
    batch_sizes: List[int]
    parents: List[Optional[Tensor]]


def prefix_tree(
    word_ids: np.ndarray, lengths: np.ndarray, device=None
) -> Tuple[PrefixTree, np.ndarray]:
    """word_ids `(B, T)` int64 (row b reads `word_ids[b, :lengths[b]]`), lengths `(B,)` >= 1 ->
    the tree and `(B, T)` node of each position (-1 beyond a row's length)."""
    B, T = word_ids.shape
    n_words = int(word_ids.max()) + 1
    node = np.full((B, T), -1, dtype=np.int64)
    local = np.zeros(B, dtype=np.int64)  # each row's node among the current depth's nodes
    words, batch_sizes, parents = [], [], []
    offset = 0
    for t in range(T):
        running = np.flatnonzero(lengths > t)
        if running.size == 0:
            break
        if running.size == 1:  # one row left: a chain of one node per depth, built at once
            row, k = running[0], local[running[0]]
            rest = int(lengths[row]) - t
            words.append(word_ids[row, t : t + rest])
            batch_sizes += [1] * rest
            parents += [None if t == 0 or k == 0 else np.array([k])] + [None] * (rest - 1)
            node[row, t : t + rest] = offset + np.arange(rest)
            break
        keys, inverse = np.unique(
            local[running] * n_words + word_ids[running, t], return_inverse=True
        )
        parent = keys // n_words
        words.append(keys % n_words)
        batch_sizes.append(len(keys))
        identity = t == 0 or np.array_equal(parent, np.arange(len(keys)))
        parents.append(None if identity else parent)
        local[running] = inverse
        node[running, t] = offset + inverse
        offset += len(keys)
    return PrefixTree(
        torch.from_numpy(np.concatenate(words)).to(device), batch_sizes, on_device(parents, device)
    ), node


def on_device(arrays: List[Optional[np.ndarray]], device) -> List[Optional[Tensor]]:
    """int64 arrays (or None) -> views of one tensor on `device`: one copy to a GPU per tree, not
    one per depth (each copy from host memory waits for the GPU's queued work)."""
    kept = [a for a in arrays if a is not None]
    if not kept:
        return [None] * len(arrays)
    views = iter(torch.from_numpy(np.concatenate(kept)).to(device).split([len(a) for a in kept]))
    return [None if a is None else next(views) for a in arrays]


def reverse_index(lengths: Tensor, max_len: int) -> Tensor:
    """`(B,)` lengths -> `(B, T)` index that reverses each row within its length (padding stays
    put)."""
    t = torch.arange(max_len, device=lengths.device).unsqueeze(0)
    rev = lengths.unsqueeze(1) - 1 - t
    return torch.where(rev >= 0, rev, t)


def direction_trees(
    word_ids: np.ndarray, lengths: np.ndarray, device=None
) -> Tuple[Tuple[PrefixTree, PrefixTree], np.ndarray]:
    """word_ids `(B, T)` in token order, lengths `(B,)` >= 1 -> the prefix trees of the forward and
    the backward reading order, and `(2, B, T)` the node of each token in each (-1 on padding)."""
    # backward step t reads token back[b, t]
    back = reverse_index(torch.from_numpy(lengths), word_ids.shape[1]).numpy()
    forward, forward_node = prefix_tree(word_ids, lengths, device)
    backward, backward_node = prefix_tree(
        np.take_along_axis(word_ids, back, axis=1), lengths, device
    )
    return (forward, backward), np.stack(
        [forward_node, np.take_along_axis(backward_node, back, axis=1)]
    )


def gather_rows(pieces: Sequence[Tensor], index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Rows `index` `(n,)` of the pieces' concatenation -> `(n, W)` (into `out` where given):
    pieces `(R, W)` each (the last one may hold fewer), such as a batch's per-word gate inputs kept
    in pieces of a bounded size."""
    if len(pieces) == 1:
        return torch.index_select(pieces[0], 0, index, out=out)
    rows = len(pieces[0])
    if out is None:
        out = pieces[0].new_empty(len(index), pieces[0].shape[1])
    which = torch.div(index, rows, rounding_mode="floor")
    for k, piece in enumerate(pieces):
        at = (which == k).nonzero().squeeze(1)
        if len(at):
            out.index_copy_(0, at, piece.index_select(0, index[at] - k * rows))
    return out
