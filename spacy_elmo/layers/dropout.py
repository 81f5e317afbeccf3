"""Dropout at the rate its config gives: spaCy sets every layer's `dropout_rate` attribute to the
`[training] dropout` of each update (`thinc.api.set_dropout_rate`), which replaced the rate an
`ElmoFeatures` was configured with; this layer keeps its own under another name."""

from __future__ import annotations

from typing import Callable, List, Tuple

from thinc.api import Model
from thinc.types import Floats2d

DROPOUT_NAME = "elmo_dropout"


def fixed_dropout(rate: float) -> Model[List[Floats2d], List[Floats2d]]:
    """Zero each value with probability `rate` in training (the rest scaled by `1 / (1 - rate)`);
    `(n_tokens, width)` per Doc in, the same shapes out; the identity in prediction."""
    return Model(DROPOUT_NAME, dropout_forward, attrs={"rate": float(rate)})


def dropout_forward(
    model: Model, Xs: List[Floats2d], is_train: bool
) -> Tuple[List[Floats2d], Callable]:
    """Each array `(n_tokens, width)` times a mask of its own shape (inverted dropout) in training;
    unchanged otherwise."""
    rate = model.attrs["rate"]
    if not is_train or rate == 0:
        return Xs, lambda dYs: dYs
    masks = [model.ops.get_dropout_mask(X.shape, rate) for X in Xs]

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        return [dY * mask for dY, mask in zip(dYs, masks)]

    return [X * mask for X, mask in zip(Xs, masks)], backprop
