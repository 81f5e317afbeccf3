"""A fixed mix of the biLM's layers, `sum_j w_j * h_j`: the one computation behind `doc._.elmo`
(the component's `mix`) and `embed --layer average`, so that both give the same bits."""

from __future__ import annotations

import numpy as np


def average_weights(n_layers: int) -> np.ndarray:
    """The weights of the average of `n_layers` layers: `(n_layers,)` float32, `1 / n_layers`."""
    return np.full(n_layers, 1.0 / n_layers, dtype=np.float32)


def mix_layers(weights: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """`weights` `(n_layers,)`, `layers` `(n_layers, n_tokens, dim)` -> `(n_tokens, dim)` float32:
    `w_0 h_0 + w_1 h_1 + ...`, each product and sum rounded to float32 in layer order (element by
    element, so a row's bits depend on nothing else: not on the rows beside it, the BLAS or the
    host). Sums beyond float32's range are infinities, for the caller's check."""
    weights = np.asarray(weights, dtype=np.float32)
    layers = np.asarray(layers, dtype=np.float32)
    if weights.shape != layers.shape[:1]:
        raise ValueError(f"{weights.shape[0]} weights for {layers.shape[0]} layers")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.multiply(layers[0], weights[0])
        part = np.empty_like(out)
        for weight, layer in zip(weights[1:], layers[1:]):
            out += np.multiply(layer, weight, out=part)
    return out


def average_layers(layers: np.ndarray) -> np.ndarray:
    """`(n_layers, n_tokens, dim)` -> their average `(n_tokens, dim)` float32, as `mix_layers`."""
    return mix_layers(average_weights(len(layers)), layers)
