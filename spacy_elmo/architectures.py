"""Task-specific ELMo features (Peters et al. 2018, sec. 3.3) as spaCy architectures.

`spacy_elmo.ElmoFeatures.v1` reads the layers that the `elmo` component stored on each Doc and
learns its own mix, `ELMo_k = gamma * sum_j softmax(s)_j h_kj`; `spacy_elmo.ElmoMultiHashEmbed.v1`
concatenates it with `MultiHashEmbed`, `[x_k; ELMo_k]`, and reduces it to `width`, as the `embed`
of `spacy.Tok2Vec.v2`. No gradient flows into the frozen biLM.
"""
from __future__ import annotations

import weakref
from typing import Callable, List, Optional, Tuple, Union

import numpy as np
from spacy.ml.models.tok2vec import MultiHashEmbed
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats1d, Floats2d, Floats3d

from .data import install_extensions

# Docs seen by `init` that had no features: only these may get zeros, and only outside training
# (shape inference in `nlp.initialize` runs `predict` on them right after `init`).
_SHAPE_INFERENCE_DOCS: "weakref.WeakSet[Doc]" = weakref.WeakSet()

MISSING_FEATURES = (
    "Doc has no ELMo layers (doc._.elmo_data is None): the 'elmo' component must run before this "
    "component. In a pipeline, put 'elmo' before it; in training, list 'elmo' in [training] "
    "annotating_components so that it annotates every batch."
)


@registry.architectures("spacy_elmo.ElmoFeatures.v1")
def ElmoFeatures(
    n_layers: int,
    width: int,
    dropout: float = 0.0,
    l2: float = 0.0,
    layer_norm: bool = False,
    projection: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A task's own mix of the Doc's ELMo layers: Docs -> `(n_tokens, projection or width)` per Doc.

    n_layers: the biLM's output layers (`n_layers + 1` of the biLM, 3 for the published models).
    width: their width, `2 * projection_dim` (256 small, 1024 original). dropout: on the output.
    l2: the penalty `l2 * ||s||^2` on the mix logits. layer_norm: normalise each layer per token
    (zero mean, unit variance) before mixing. projection: a learned linear map down to this width.
    """
    install_extensions()
    layers: List[Model] = [elmo_mix(n_layers, width, l2=l2, layer_norm=layer_norm)]
    if projection:
        layers.append(with_array(Linear(projection, width)))
    if dropout:
        layers.append(Dropout(dropout))
    model = chain(*layers) if len(layers) > 1 else layers[0]
    model.set_dim("nO", projection or width)
    return model


def elmo_mix(n_layers: int, width: int, *, l2: float = 0.0, layer_norm: bool = False) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> `gamma * sum_j softmax(s)_j h_j`, `(n_tokens, width)` per Doc; params `s` `(n_layers,)`, `gamma` `(1,)`."""
    return Model("elmo_mix", mix_forward, init=mix_init, dims={"nL": n_layers, "nO": width},
                 params={"s": None, "gamma": None}, attrs={"l2": float(l2), "layer_norm": bool(layer_norm)})


def mix_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    model.set_param("s", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    for doc in X or []:
        if doc._.elmo_data is None:
            _SHAPE_INFERENCE_DOCS.add(doc)


def doc_layers(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Floats3d, List[int]]:
    """The Docs' stored layers, concatenated: float32 `(n_layers, sum(n_tokens), width)`, and the lengths."""
    nL, nO = model.get_dim("nL"), model.get_dim("nO")
    arrays = []
    for doc in docs:
        data = doc._.elmo_data
        if data is None:
            if is_train or doc not in _SHAPE_INFERENCE_DOCS:
                raise ValueError(MISSING_FEATURES)
            arrays.append(np.zeros((nL, len(doc), nO), dtype=np.float32))
            continue
        if data.layers is None:
            raise ValueError("the 'elmo' component kept only the mix (keep_layers = false); "
                             "set [components.elmo] keep_layers = true to train ElmoFeatures")
        if data.layers.shape != (nL, len(doc), nO):
            raise ValueError(f"ELMo layers of shape {data.layers.shape} for a Doc of {len(doc)} tokens, but "
                             f"ElmoFeatures is configured with n_layers={nL}, width={nO}: set them to the biLM's sizes")
        arrays.append(data.layers)
    X = np.concatenate(arrays, axis=1).astype(np.float32, copy=False) if arrays else np.zeros((nL, 0, nO), "f")
    if model.attrs["layer_norm"]:
        X = (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-6)
    return model.ops.asarray3f(X), [len(doc) for doc in docs]


def mix_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops, xp = model.ops, model.ops.xp
    X, lengths = doc_layers(model, docs, is_train)  # (nL, N, nO)
    s, gamma = model.get_param("s"), model.get_param("gamma")
    w = ops.softmax(s)  # (nL,)
    mixed = xp.tensordot(w, X, axes=1)  # (N, nO)
    Y = mixed * gamma[0]

    def backprop(dYs: List[Floats2d]) -> List:
        dY = ops.flatten(dYs)  # (N, nO)
        d_gamma = (dY * mixed).sum()
        d_w = gamma[0] * (X.reshape(X.shape[0], -1) @ dY.reshape(-1))  # (nL,)
        d_s = w * (d_w - (w * d_w).sum()) + 2.0 * model.attrs["l2"] * s
        model.inc_grad("s", d_s.astype("f"))
        model.inc_grad("gamma", ops.asarray1f([float(d_gamma)]))
        return []

    return ops.unflatten(Y, lengths), backprop


@registry.architectures("spacy_elmo.ElmoMultiHashEmbed.v1")
def ElmoMultiHashEmbed(
    width: int,
    attrs: List[Union[str, int]],
    rows: List[int],
    include_static_vectors: bool,
    elmo: Model[List[Doc], List[Floats2d]],
) -> Model[List[Doc], List[Floats2d]]:
    """`[x_k; ELMo_k]` reduced to `width` by a Maxout: x_k from `spacy.MultiHashEmbed.v2` (same arguments),
    ELMo_k from `elmo` (an `ElmoFeatures.v1`). Docs -> `(n_tokens, width)` per Doc, for `spacy.Tok2Vec.v2`."""
    hash_embed = MultiHashEmbed(width=width, attrs=attrs, rows=rows, include_static_vectors=include_static_vectors)
    n_in = width + elmo.get_dim("nO")
    model = chain(concatenate(hash_embed, elmo), with_array(Maxout(width, n_in, nP=3, normalize=True)))
    model.set_dim("nO", width)
    return model


def mix_weights(model: Model) -> Floats1d:
    """The softmax-normalised mix `(n_layers,)` of the first `elmo_mix` inside `model`."""
    for node in model.walk():
        if node.name == "elmo_mix":
            return node.ops.softmax(node.get_param("s"))
    raise ValueError("no elmo_mix layer in this model")
