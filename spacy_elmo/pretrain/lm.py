"""The bidirectional LM objective on the biLM core, and dev perplexity under each state policy."""

from __future__ import annotations

import math
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm import tqdm

from ..bilm import BiLM, ElmoEmbedder, LSTMState, StatePolicy
from .batches import Batch
from .corpus import DevSet


class BiLanguageModel(nn.Module):
    """Forward and backward LMs sharing the token encoder and the softmax `head`.

    `forward` reads both directions stacked, direction 1 already in its reading order (see
    `corpus`), through the core's LSTM stack (`BiLSTMStack.run_directions`), so that it can start
    from any state: zeros for single sentences, or the state carried from the previous window of a
    packed stream. `dropout` is applied in training to each LSTM layer's input (by the stack) and to
    the top layer before the softmax.
    """

    def __init__(self, bilm: BiLM, head: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.bilm = bilm
        self.head = head
        self.dropout = dropout

    def forward(
        self, batch: Batch, lstm_state: Optional[LSTMState] = None
    ) -> Tuple[Tensor, LSTMState]:
        """`batch` (index, targets, mask `(2, B, T)`; chars `(U, width)`), `lstm_state` `h (L, 2, B,
        P)`, `c (L, 2, B, D)` or None (zeros) -> NLL summed per direction `(2,)`, and the LSTM state
        at each row's last masked position (detached, to carry into the next window)."""
        _, B, T = batch.index.shape
        lstm = self.bilm.lstm
        # gathers by index_select: its backward (index_add_) sums each word's gradients in one
        # order at any thread count; advanced indexing's did not, so runs were not repeatable
        words = self.bilm.token_encoder(batch.chars)  # (U, P)
        x = words.index_select(0, batch.index.flatten()).view(2, B, T, -1)  # (2, B, T, P)
        if lstm_state is None:
            lstm_state = lstm.zero_state(B, x.device, x.dtype)
        final_index = batch.mask[0].sum(1) - 1  # (B,)
        outputs, last = lstm.run_directions(x, lstm_state, final_index, self.dropout)
        top = F.dropout(outputs[-1], self.dropout, self.training)
        nll = self.head(top[batch.mask], batch.targets[batch.mask])  # (N,)
        direction = batch.mask.nonzero()[:, 0]
        sums = torch.zeros(2, dtype=nll.dtype, device=nll.device).index_add_(0, direction, nll)
        return sums, LSTMState(last.h.detach(), last.c.detach())


def _length_batches(dev: DevSet, batch_size: int) -> Iterator[List[int]]:
    order = sorted(range(len(dev.sentences)), key=lambda i: len(dev.sentences[i]))
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def _carry_batches(dev: DevSet, batch_size: int) -> Iterator[List[int]]:
    """Row k reads sentences `k * n_rows ... ` in order (bilm-tf's layout); rows present form a
    prefix."""
    n = len(dev.sentences)
    block = math.ceil(n / batch_size)
    for i in range(block):
        yield [k * block + i for k in range(batch_size) if k * block + i < n]


@torch.no_grad()
def dev_nll(
    bilm: BiLM,
    head: nn.Module,
    dev: DevSet,
    policy: StatePolicy,
    batch_size: int = 64,
    progress: bool = False,
) -> Tensor:
    """Summed NLL `(2,)` (forward, backward) of `dev` through `bilm.forward`, as at inference.

    Each sentence is read as `<S> w_1 .. w_n </S>`, in the ids `bilm.char_ids` gives (the ones it
    reads at inference); the forward LM predicts `w_1 .. w_n </S>`,
    the backward LM `w_n .. w_1 <S>` (n + 1 tokens each). Start states follow `policy`, as
    `ElmoEmbedder` applies it: "zero" or "warm" (the warm state of the weights as they are now)
    start every sentence from that state (batches sorted by length); "carry" reads the sentences in
    order, row k of each batch starting where row k of the previous batch ended. `progress`: a
    progress bar.
    """
    was_training = bilm.training, head.training
    bilm.eval()
    head.eval()
    policy = StatePolicy.parse(policy)
    if policy.warm_start:
        bilm.compute_warm_state()
    inference = ElmoEmbedder(bilm, state=policy, cache_size=0)
    P = bilm.options.projection_dim
    totals = torch.zeros(2, dtype=torch.float64)
    batches = (
        _length_batches(dev, batch_size)
        if policy.allows_regrouping
        else _carry_batches(dev, batch_size)
    )
    bar = tqdm(
        total=len(dev.sentences),
        desc="dev perplexity",
        unit=" sentences",
        leave=False,
        disable=not progress,
    )
    for rows in batches:
        sents = [dev.sentences[i] for i in rows]
        ids = torch.from_numpy(bilm.char_ids(sents)).to(bilm.device)  # the model's own ids
        B, T = ids.shape[:2]
        targets = np.zeros((B, T), dtype=np.int64)
        for row, i in enumerate(rows):
            targets[row, : len(dev.ids[i])] = dev.ids[i]
        targets_t = torch.from_numpy(targets).to(bilm.device)
        out = inference.forward(ids)
        top = out.layers[-1]  # (B, T, 2P)
        valid = out.mask[:, 1:]  # position t + 1 is a real token
        fwd = head(top[:, :-1, :P][valid], targets_t[:, 1:][valid])
        bwd = head(top[:, 1:, P:][valid], targets_t[:, :-1][valid])
        totals += torch.stack([fwd.sum(), bwd.sum()]).double().cpu()
        bar.update(len(rows))
    bar.close()
    bilm.train(was_training[0])
    head.train(was_training[1])
    return totals


def perplexities(nll: Tensor, n_predicted: int) -> Dict[str, float]:
    """Summed NLL `(2,)` -> per-direction perplexity exp(mean NLL) and their arithmetic mean."""
    fwd, bwd = (math.exp(float(v) / n_predicted) for v in nll)
    return {"forward": fwd, "backward": bwd, "mean": (fwd + bwd) / 2}
