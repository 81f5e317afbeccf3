"""A task's own mix of the biLM's layers (`spacy_elmo.ElmoFeatures`): Docs -> `gamma * sum_j
softmax(s)_j h_j` (Peters et al. 2018, sec. 3.3), read from the layers that `elmo` stored on each
Doc.

Sizes left null are set at initialize: by the `elmo` component that the mix listens to
(`Elmo.find_listeners` links them, as spaCy links a tok2vec to its listeners), or from the layers of
the Docs it is initialized on.
"""

from __future__ import annotations

import weakref
from typing import Callable, List, Optional, Tuple

import numpy as np
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

from ..doc_data import elmo_data
from ..errors import ElmoConfigError

MIX_NAME = "elmo_mix"
MISSING_FEATURES = (
    "Doc has no ELMo layers (doc._.elmo_data is None): the 'elmo' component must run before this "
    "component. In a pipeline, put 'elmo' before it; in training, list 'elmo' in [training] "
    "annotating_components so that it annotates every batch. `spacy pretrain` and `spacy debug "
    "model` run no other component, so they cannot feed a model that reads ELMo."
)
NO_SIZES = (
    "ElmoFeatures has n_layers or width null and nothing to take them from: initialize it in a "
    "pipeline "
    "after an 'elmo' component (nlp.initialize), or on Docs that 'elmo' annotated, or set them"
)


class ShapeInferenceDocs:
    """The Docs `mix_init` saw without features, held weakly: only these may get zeros, and only
    outside training (shape inference in `nlp.initialize` runs `predict` on them right after
    `init`). Copies and pickles start empty; thinc does not serialize it."""

    def __init__(self) -> None:
        self.docs: "weakref.WeakSet[Doc]" = weakref.WeakSet()

    def __deepcopy__(self, memo) -> "ShapeInferenceDocs":
        return ShapeInferenceDocs()

    def __reduce__(self):
        return ShapeInferenceDocs, ()


class Upstream:
    """The `elmo` component a mix listens to (set by its `add_listener`), held weakly; copies share
    it, pickles and thinc's serialization drop it (spaCy links the components again when it loads
    them)."""

    def __init__(self, component=None) -> None:
        self._ref = weakref.ref(component) if component is not None else None

    def component(self):
        """The `elmo` component, or None (never set, dropped, or gone)."""
        return self._ref() if self._ref is not None else None

    def sizes(self) -> Optional[Tuple[int, int, str]]:
        """`(n_layers, width, source)` of the component's biLM (its weights loaded if they are not
        yet), or None."""
        component = self.component()
        if component is None:
            return None
        bilm = component.bilm
        return bilm.num_output_layers, bilm.output_dim, component.sizes_source()

    def read_in_training(self) -> None:
        """Tell the component that a mix reads its layers in training (`Elmo.read_in_training`)."""
        component = self.component()
        if component is not None:
            component.read_in_training()

    def __deepcopy__(self, memo) -> "Upstream":
        return self

    def __reduce__(self):
        return Upstream, ()


def elmo_mix(
    n_layers: Optional[int],
    width: Optional[int],
    *,
    l2: float = 0.0,
    layer_norm: bool = False,
    layers: Optional[List[int]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> `gamma * sum_j softmax(s)_j h_j` over the biLM's layers j in `layers` (None: all),
    `(n_tokens, width)` per Doc; params `s` `(len(layers) or n_layers,)`, `gamma` `(1,)`. Null sizes
    are set by `mix_init`."""
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not 0 <= l2 < float("inf"):
        raise ElmoConfigError(f"ElmoFeatures: l2 must be a penalty of 0 or more, got {l2!r}")
    if layers is not None:
        if (
            not isinstance(layers, (list, tuple))
            or not layers
            or len(set(layers)) != len(layers)
            or any(isinstance(j, bool) or not isinstance(j, int) for j in layers)
        ):
            raise ElmoConfigError(
                f"ElmoFeatures: layers must be a non-empty list of distinct layer indices (or "
                f"null for all), got {layers!r}"
            )
        layers = sorted(layers)
    return Model(
        MIX_NAME,
        mix_forward,
        init=mix_init,
        dims={"nL": n_layers, "nO": width},
        params={"s": None, "gamma": None},
        attrs={
            "l2": float(l2),
            "layer_norm": bool(layer_norm),
            "shape_inference_docs": ShapeInferenceDocs(),
            "upstream": Upstream(),
            "layers": layers,
        },
    )


def mix_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    """Take null sizes from the Docs' layers (checking set ones against them), else from the `elmo`
    component the mix listens to; then allocate `s` and `gamma`. Raises ElmoConfigError where a size
    is still null."""
    docs = list(X or [])
    found = docs_sizes(docs)
    if found is not None:
        set_sizes(model, *found, "the Docs' ELMo layers", [])
    elif model.maybe_get_dim("nL") is None or model.maybe_get_dim("nO") is None:
        upstream = model.attrs["upstream"].sizes()
        if upstream is not None:
            set_sizes(model, *upstream, [])
    if model.maybe_get_dim("nL") is None or model.maybe_get_dim("nO") is None:
        raise ElmoConfigError(NO_SIZES)
    check_layers(model, [])
    model.set_param("s", model.ops.alloc1f(len(mixed_layers(model))))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    for doc in docs:
        if doc._.elmo_data is None:
            model.attrs["shape_inference_docs"].docs.add(doc)


def docs_sizes(docs: List[Doc]) -> Optional[Tuple[int, int]]:
    """`(n_layers, width)` of the first Doc's stored layers, or None where no Doc has them."""
    for doc in docs:
        data = elmo_data(doc)
        if data is not None and data.layers is not None:
            return data.layers.shape[0], data.layers.shape[2]
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
    """Set the null sizes of an `elmo_mix`; raise one line naming both sizes and the override where
    a set one differs."""
    wrong = []
    for dim, setting, value in (("nL", "n_layers", n_layers), ("nO", "width", width)):
        configured = model.maybe_get_dim(dim)
        if configured is None:
            model.set_dim(dim, value)
        elif configured != value:
            wrong.append((setting, configured, value))
    if wrong and model.has_param("s") is True:  # trained (sourced or loaded): sizes of its weights
        raise ElmoConfigError(
            f"a trained ElmoFeatures mix reads {', '.join(f'{s} {c}' for s, c, _ in wrong)}, but "
            f"{source} has {', '.join(f'{s} {v}' for s, _, v in wrong)}: a trained component "
            "reads the layers of the biLM it was trained with; give it that biLM, or train the "
            "component again with this one"
        )
    if wrong:
        fixes = [f"--{path}.{s} {v}" for s, _, v in wrong for path in paths] or [
            f"{s} = {v}" for s, _, v in wrong
        ]
        raise ElmoConfigError(
            f"ElmoFeatures is configured with {', '.join(f'{s} = {c}' for s, c, _ in wrong)}, but "
            f"{source} has {', '.join(f'{s} {v}' for s, _, v in wrong)}: set {' and '.join(fixes)} "
            "(or null: taken from the biLM)"
        )
    check_layers(model, paths)


def check_encoder_width(model: Model, mixes: List[Model], component: str, paths: List[str]) -> None:
    """Raise one line where, in `model` (the component `component`'s), a spaCy Tok2Vec (refs `embed`
    and `encode`) embeds with an ElmoFeatures alone (one of `mixes`, at `paths`) whose output is not
    as wide as its encoder, which reads `width` wide input."""
    for node in model.walk():
        if not (node.has_ref("embed") and node.has_ref("encode")):
            continue
        embed, encode = node.get_ref("embed"), node.get_ref("encode")
        mix = embed if embed in mixes else (embed.layers or [None])[0]
        width, wanted = embed.maybe_get_dim("nO"), encode.maybe_get_dim("nO")
        if mix not in mixes or wanted is None:
            continue
        what = "its projection" if width else "the biLM's"
        width = width or mix.get_dim("nO")  # no projection: the mix's width
        if width != wanted:
            fixes = " or ".join(f"--{path}.projection {wanted}" for path in paths)
            raise ElmoConfigError(
                f"'{component}' embeds with ElmoFeatures alone: its output width ({width}, {what}) "
                f"is not the width its encoder reads ({wanted}): set projection = {wanted} in it"
                + (f" ({fixes})" if fixes else "")
                + ", or embed with spacy_elmo.ElmoMultiHashEmbed.v1"
            )


def check_layers(model: Model, paths: List[str]) -> None:
    """Raise one line naming `layers` (and its overrides in `paths`) where an index is not a layer
    of the biLM."""
    n_layers, chosen = model.get_dim("nL"), model.attrs["layers"]
    if chosen is not None and not all(0 <= j < n_layers for j in chosen):
        overrides = " or ".join(f"--{path}.layers" for path in paths)
        fix = (
            f": set {overrides} to indices below {n_layers} (or null: all layers)" if paths else ""
        )
        raise ElmoConfigError(
            f"ElmoFeatures: layers = {chosen}, but the biLM has layers 0 to {n_layers - 1} "
            f"(0: the token layer){fix}"
        )


def mixed_layers(model: Model) -> List[int]:
    """The indices of the biLM layers an `elmo_mix` reads: its `layers`, or all `nL`."""
    chosen = model.attrs["layers"]
    return list(range(model.get_dim("nL"))) if chosen is None else chosen


def doc_layers(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Floats3d, List[int]]:
    """The Docs' stored layers, concatenated: float32 `(n_layers, sum(n_tokens), width)`, and the
    lengths."""
    nL, nO = model.get_dim("nL"), model.get_dim("nO")
    arrays = []
    for doc in docs:
        data = elmo_data(doc)
        if data is None:
            if is_train or doc not in model.attrs["shape_inference_docs"].docs:
                raise ElmoConfigError(MISSING_FEATURES)
            arrays.append(np.zeros((nL, len(doc), nO), dtype=np.float32))
            continue
        if data.layers is None:
            raise ElmoConfigError(
                "the 'elmo' component kept only the mix (keep_layers = false); "
                "set [components.elmo] keep_layers = true to train ElmoFeatures"
            )
        if data.layers.shape != (nL, len(doc), nO):
            raise ElmoConfigError(
                f"ElmoFeatures reads the layers of a biLM of n_layers {nL}, width {nO}, but this "
                f"Doc's are n_layers {data.layers.shape[0]}, width {data.layers.shape[2]}: another "
                "biLM's (the last 'elmo' component before it, or whichever annotated the Doc); "
                "give the component the biLM it was initialized and trained with, or set its sizes "
                "to this one's (null: taken from the biLM) and train it again"
            )
        arrays.append(data.layers)
    X = (
        np.concatenate(arrays, axis=1).astype(np.float32, copy=False)
        if arrays
        else np.zeros((nL, 0, nO), "f")
    )
    if model.attrs["layer_norm"]:
        X = (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-6)
    return model.ops.asarray3f(X), [len(doc) for doc in docs]


def mix_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    """The paper's mix of each Doc's layers `(n_layers, n_tokens, width)` -> `(n_tokens, width)`:
    `gamma * sum_j softmax(s)_j h_j`; its backprop adds the gradients of `s` (with its L2) and
    `gamma` and passes none on (the layers are the frozen biLM's)."""
    ops, xp = model.ops, model.ops.xp
    if is_train:
        model.attrs["upstream"].read_in_training()
    X, lengths = doc_layers(model, docs, is_train)  # (nL, N, nO)
    if model.attrs["layers"] is not None:
        X = X[model.attrs["layers"]]  # (len(layers), N, nO)
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


def learned_mix(model: Model) -> Floats1d:
    """The softmax-normalised mix `(n_layers,)` of the first `elmo_mix` inside `model`: 0 for a
    layer outside its `layers`."""
    for node in model.walk():
        if node.name == MIX_NAME:
            weights = node.ops.alloc1f(node.get_dim("nL"))
            weights[mixed_layers(node)] = node.ops.softmax(node.get_param("s"))
            return weights
    raise ElmoConfigError(f"no {MIX_NAME} layer in this model")
