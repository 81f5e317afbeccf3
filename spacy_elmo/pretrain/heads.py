"""LM heads: the softmax that both directions share, from top-layer outputs to next-token NLL.

Every head maps `h` `(N, P)` and `targets` `(N,)` to the negative log-likelihood `(N,)`. In eval
mode it is exact (full normalisation); `SampledSoftmax` approximates it in train mode.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class FullSoftmax(nn.Module):
    """`logits = h W^T + b` over the whole vocabulary."""

    def __init__(self, dim: int, vocab_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, std=1.0 / math.sqrt(dim))

    def forward(self, h: Tensor, targets: Tensor) -> Tensor:
        """h `(N, P)`, targets `(N,)` -> NLL `(N,)`."""
        return F.cross_entropy(F.linear(h, self.weight, self.bias), targets, reduction="none")


class SampledSoftmax(FullSoftmax):
    """bilm-tf's sampled softmax in training: the target against `n_samples` negatives drawn from a
    log-uniform (Zipf) distribution over ids sorted by frequency, with logits corrected by the log
    expected count and accidental hits removed. The full softmax in eval mode.

    Negatives come from `generator` (its state is saved in checkpoints, so resumed runs repeat
    them).
    """

    def __init__(
        self, dim: int, vocab_size: int, n_samples: int, generator: Optional[torch.Generator] = None
    ):
        super().__init__(dim, vocab_size)
        self.n_samples = min(n_samples, vocab_size)
        self.generator = generator or torch.Generator()
        ids = torch.arange(vocab_size, dtype=torch.float64)
        log_q = torch.log(torch.log1p(1.0 / (ids + 1.0)) / math.log(vocab_size + 1.0))
        self.register_buffer(
            "log_expected", (log_q + math.log(self.n_samples)).float(), persistent=False
        )

    def sample(self) -> Tensor:
        """`(n_samples,)` ids, with replacement, P(k) = log((k + 2) / (k + 1)) / log(V + 1)."""
        u = torch.rand(self.n_samples, generator=self.generator, dtype=torch.float64)
        ids = torch.exp(u * math.log(self.weight.shape[0] + 1.0)).floor().long() - 1
        return ids.clamp_(0, self.weight.shape[0] - 1).to(self.weight.device)

    def forward(self, h: Tensor, targets: Tensor) -> Tensor:
        """h `(N, P)`, targets `(N,)` -> NLL `(N,)`: against the sampled negatives in training,
        the full softmax in eval mode."""
        if not self.training:
            return super().forward(h, targets)
        sampled = self.sample()
        # rows by index_select, whose backward sums a repeated id's gradients in one order at any
        # thread count (advanced indexing's did not: runs were not repeatable)
        true_logit = (
            (h * self.weight.index_select(0, targets)).sum(-1)
            + self.bias.index_select(0, targets)
            - self.log_expected[targets]
        )
        sampled_logits = F.linear(
            h,
            self.weight.index_select(0, sampled),
            self.bias.index_select(0, sampled) - self.log_expected[sampled],
        )
        sampled_logits = sampled_logits.masked_fill(
            targets.unsqueeze(1) == sampled.unsqueeze(0), float("-inf")
        )
        logits = torch.cat([true_logit.unsqueeze(1), sampled_logits], dim=1)
        return -F.log_softmax(logits, dim=1)[:, 0]


class AdaptiveSoftmax(nn.Module):
    """Adaptive softmax (Grave et al. 2017): frequent words in the head, rarer ones in smaller
    clusters."""

    def __init__(self, dim: int, vocab_size: int, cutoffs: Sequence[int]):
        super().__init__()
        if not cutoffs or not all(0 < c < vocab_size for c in cutoffs):
            raise ValueError(
                f"softmax.adaptive_cutoffs must hold values between 0 and the vocabulary size "
                f"({vocab_size}); got {list(cutoffs)}"
            )
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(dim, vocab_size, cutoffs, div_value=4.0)

    def forward(self, h: Tensor, targets: Tensor) -> Tensor:
        """h `(N, P)`, targets `(N,)` -> NLL `(N,)`."""
        return -self.softmax(h, targets).output


def train_loss_softmax(head: nn.Module) -> str:
    """Which softmax the loss of `head` in train mode is: "sampled" (`SampledSoftmax`, far below
    the full softmax's) or "exact"."""
    return "sampled" if isinstance(head, SampledSoftmax) else "exact"


def build_head(
    kind: str,
    dim: int,
    vocab_size: int,
    n_samples: int = 8192,
    cutoffs: Sequence[int] = (),
    generator: Optional[torch.Generator] = None,
) -> nn.Module:
    """The head named by `softmax.type`."""
    if kind == "full":
        return FullSoftmax(dim, vocab_size)
    if kind == "sampled":
        return SampledSoftmax(dim, vocab_size, n_samples, generator)
    return AdaptiveSoftmax(dim, vocab_size, cutoffs)
