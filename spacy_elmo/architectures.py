"""Task-specific ELMo features (Peters et al. 2018, sec. 3.3) as spaCy architectures.

`spacy_elmo.ElmoFeatures.v2` (and `.v1`, the same with dropout and l2 0 by default) reads the layers
that the `elmo` component stored on each Doc and learns its own mix, `ELMo_k = gamma * sum_j softmax(s)_j h_kj`;
`spacy_elmo.ElmoMultiHashEmbed.v1` concatenates it with `MultiHashEmbed`, `[x_k; ELMo_k]`, and reduces it
to `width`, as the `embed` of `spacy.Tok2Vec.v2`. No gradient flows into the frozen biLM.

Sizes left null are taken from the biLM at initialize: from the Docs' layers, or, since `nlp.initialize`
gives Docs that `elmo` has not annotated yet, from the `elmo` component of the pipeline that holds the layer.
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

from .data import install_extensions, pipelines_of

# Docs seen by `init` that had no features: only these may get zeros, and only outside training
# (shape inference in `nlp.initialize` runs `predict` on them right after `init`).
_SHAPE_INFERENCE_DOCS: "weakref.WeakSet[Doc]" = weakref.WeakSet()

MISSING_FEATURES = (
    "Doc has no ELMo layers (doc._.elmo_data is None): the 'elmo' component must run before this "
    "component. In a pipeline, put 'elmo' before it; in training, list 'elmo' in [training] "
    "annotating_components so that it annotates every batch."
)
NO_SIZES = (
    "ElmoFeatures has n_layers or width null and nothing to take them from: initialize it in a pipeline "
    "with an 'elmo' component (nlp.initialize), or on Docs that 'elmo' annotated, or set them"
)


@registry.architectures("spacy_elmo.ElmoFeatures.v1")
def ElmoFeatures(
    n_layers: Optional[int],
    width: Optional[int],
    dropout: float = 0.0,
    l2: float = 0.0,
    layer_norm: bool = False,
    projection: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A task's own mix of the Doc's ELMo layers: Docs -> `(n_tokens, projection or width)` per Doc.

    n_layers: the biLM's output layers (`n_layers + 1` of the biLM, 3 for the published models).
    width: their width, `2 * projection_dim` (256 small, 1024 original). Null (either): taken from the
    biLM at initialize; where set, initialize checks them against it. dropout: on the output.
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


@registry.architectures("spacy_elmo.ElmoFeatures.v2")
def ElmoFeatures_v2(
    n_layers: Optional[int] = None,
    width: Optional[int] = None,
    dropout: float = 0.2,
    l2: float = 0.001,
    layer_norm: bool = False,
    projection: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """`ElmoFeatures.v1` with the recommended defaults, which `spacy init fill-config` writes: sizes
    from the biLM, dropout 0.2, l2 0.001. Docs -> `(n_tokens, projection or width)` per Doc."""
    return ElmoFeatures(n_layers, width, dropout=dropout, l2=l2, layer_norm=layer_norm, projection=projection)


def elmo_mix(n_layers: Optional[int], width: Optional[int], *, l2: float = 0.0, layer_norm: bool = False) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> `gamma * sum_j softmax(s)_j h_j`, `(n_tokens, width)` per Doc; params `s` `(n_layers,)`, `gamma` `(1,)`.
    Null sizes are set by `mix_init`."""
    return Model("elmo_mix", mix_forward, init=mix_init, dims={"nL": n_layers, "nO": width},
                 params={"s": None, "gamma": None}, attrs={"l2": float(l2), "layer_norm": bool(layer_norm)})


def mix_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    """Take null sizes from the biLM (and check set ones against it), then allocate `s` and `gamma`."""
    docs = list(X or [])
    found = bilm_sizes(model, docs)
    if found is not None:
        set_sizes(model, *found)
    if model.maybe_get_dim("nL") is None or model.maybe_get_dim("nO") is None:
        raise ValueError(NO_SIZES)
    model.set_param("s", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    for doc in docs:
        if doc._.elmo_data is None:
            _SHAPE_INFERENCE_DOCS.add(doc)


def bilm_sizes(model: Model, docs: List[Doc]) -> Optional[Tuple[int, int, str, List[str]]]:
    """`(n_layers, width, source, config paths)` of the biLM that feeds `model`: from the Docs' stored
    layers, else from the `elmo` component of the pipeline that holds `model` (`nlp.initialize` gives
    Docs that `elmo` has not annotated); None where neither is at hand. The config paths are those of
    the ElmoFeatures blocks of the component that holds `model`, for the error message."""
    for doc in docs:
        data = doc._.elmo_data
        if data is not None and data.layers is not None:
            return data.layers.shape[0], data.layers.shape[2], "the Docs' ELMo layers", []
    for nlp in pipelines_of(docs[0].vocab) if docs else []:
        holder = next((name for name, proc in nlp.components if isinstance(getattr(proc, "model", None), Model)
                       and any(node is model for node in proc.model.walk())), None)
        if holder is None:
            continue
        names = nlp.component_names
        elmos = [name for name in names if nlp.get_pipe_meta(name).factory == "elmo"]
        if not elmos:
            return None
        before = [name for name in elmos if names.index(name) < names.index(holder)]
        name = (before or elmos)[-1]
        component = nlp.get_pipe(name)
        bilm = component.bilm  # loads the weights where `elmo` was not initialized (frozen)
        source = f"the biLM of '{name}' ({component.weights or 'loaded with the pipeline'})"
        return bilm.num_output_layers, bilm.output_dim, source, feature_paths(nlp.config["components"][holder],
                                                                                f"components.{holder}")
    return None


def feature_paths(section: dict, prefix: str) -> List[str]:
    """Dotted config paths of the ElmoFeatures blocks under `section`."""
    out = []
    for key, value in section.items():
        if isinstance(value, dict):
            if str(value.get("@architectures", "")).startswith("spacy_elmo.ElmoFeatures."):
                out.append(f"{prefix}.{key}")
            out.extend(feature_paths(value, f"{prefix}.{key}"))
    return out


def set_sizes(model: Model, n_layers: int, width: int, source: str, paths: List[str]) -> None:
    """Set the null sizes of an `elmo_mix`; raise one line naming both sizes and the override where a set one differs."""
    wrong = []
    for dim, setting, value in (("nL", "n_layers", n_layers), ("nO", "width", width)):
        configured = model.maybe_get_dim(dim)
        if configured is None:
            model.set_dim(dim, value)
        elif configured != value:
            wrong.append((setting, configured, value))
    if wrong:
        fixes = [f"--{path}.{s} {v}" for s, _, v in wrong for path in paths] or [f"{s} = {v}" for s, _, v in wrong]
        raise ValueError(
            f"ElmoFeatures is configured with {', '.join(f'{s} = {c}' for s, c, _ in wrong)}, but "
            f"{source} has {', '.join(f'{s} {v}' for s, _, v in wrong)}: set {' and '.join(fixes)} "
            "(or null: taken from the biLM)"
        )


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
    ELMo_k from `elmo` (an `ElmoFeatures.v1` or `.v2`). Docs -> `(n_tokens, width)` per Doc, for `spacy.Tok2Vec.v2`."""
    hash_embed = MultiHashEmbed(width=width, attrs=attrs, rows=rows, include_static_vectors=include_static_vectors)
    elmo_width = elmo.maybe_get_dim("nO")
    n_in = None if elmo_width is None else width + elmo_width  # else inferred at initialize
    model = chain(concatenate(hash_embed, elmo), with_array(Maxout(width, n_in, nP=3, normalize=True)))
    model.set_dim("nO", width)
    return model


def mix_weights(model: Model) -> Floats1d:
    """The softmax-normalised mix `(n_layers,)` of the first `elmo_mix` inside `model`."""
    for node in model.walk():
        if node.name == "elmo_mix":
            return node.ops.softmax(node.get_param("s"))
    raise ValueError("no elmo_mix layer in this model")
