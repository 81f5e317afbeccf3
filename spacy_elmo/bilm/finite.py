"""Non-finite values are errors: the one check of weights (after their cast to the dtype that
computes) and of what the biLM returns."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, Union

import numpy as np
import torch

from ..errors import ElmoFileError


class NonFiniteError(ElmoFileError):
    """NaN or infinite values in weights or in the vectors computed from them. `sentence`: the index
    (in the input of `embed` / `embed_iter`) of the first sentence whose vectors hold them; None for
    weights."""

    def __init__(self, message: str, sentence: Optional[int] = None):
        super().__init__(message)
        self.sentence = sentence


def check_finite(
    values: Union[np.ndarray, torch.Tensor],
    source: str,
    name: str,
    lengths: Optional[Sequence[int]] = None,
    ids: Optional[Sequence[int]] = None,
) -> None:
    """NonFiniteError `{source}: {name} ... NaN or infinite values` where `values` (an array or a
    tensor) hold any. With `lengths` (and `ids`, default 0, 1, ...): `values` `(layers,
    sum(lengths), width)` are sentences one after another, and the error names the sentence of the
    smallest id that holds them."""
    values = torch.as_tensor(values)
    # a NaN or an infinity makes the sum non-finite; so may finite values that overflow it: only
    # then look closer
    if bool(torch.isfinite(values.sum())) or bool(torch.isfinite(values).all()):
        return
    sentence = None
    if lengths is not None:
        tokens = (~torch.isfinite(values)).any(dim=2).any(dim=0).nonzero()[:, 0].cpu().numpy()
        rows = np.unique(np.searchsorted(np.cumsum(lengths), tokens, side="right"))
        sentence = int(rows[0]) if ids is None else min(ids[row] for row in rows)
        name = f"{name} for sentence {sentence} (counted from 0)"
    raise NonFiniteError(f"{source}: {name} holds NaN or infinite values", sentence)


def cast_finite(values: np.ndarray, dtype, what: str, sentence: Optional[int] = None) -> np.ndarray:
    """Finite `values` as `dtype`; NonFiniteError `{what}: ...` (about `sentence`, where given)
    where some lie beyond its range (float16's ends at 65504), or were summed beyond float32's."""
    with np.errstate(over="ignore"):
        out = values.astype(dtype, copy=False)
    if not np.isfinite(out).all():
        raise NonFiniteError(
            f"{what}: values beyond {out.dtype}'s range (largest "
            f"{float(np.finfo(out.dtype).max):g}) would be stored as infinities"
            + ("; use float32" if out.dtype.itemsize < 4 else ""),
            sentence,
        )
    return out


@contextmanager
def naming_weights(source: str) -> Iterator[None]:
    """A NonFiniteError raised inside (about weights, from a product of some precision) names
    `source`."""
    try:
        yield
    except NonFiniteError as err:
        raise NonFiniteError(f"{source}: {err}", err.sentence) from None
