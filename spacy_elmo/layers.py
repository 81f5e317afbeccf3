"""The thinc layers: the frozen biLM that `elmo` runs, and the task's mix of its layers that a tagger learns.

The frozen biLM (`bilm_layer`, registered as `spacy_elmo.ElmoModel.v1`) wraps the biLM with thinc's
PyTorch wrapper and maps token texts to layers:

    List[List[str]] (one list per biLM input sequence) -> List[np.ndarray (n_layers + 1, n_tokens, 2P)]

float32, on the CPU (ready to be stored on Docs). Regrouping by length and the token-layer
cache live in the biLM (`BiLM.embed`). The biLM is frozen: it stays in eval mode whatever
thinc asks, runs under inference mode and returns no gradient. The sizes come from the config
(`options`, the bilm-tf options layout) or, when `options` is null, from the weights when they are
loaded. Serialization goes through thinc (`to_bytes` / `from_bytes`) with a safe format: msgpack
holding the options JSON and a torch state dict that is read with `torch.load(..., weights_only=True)`.

The task's mix (`elmo_mix`, inside `spacy_elmo.ElmoFeatures`) reads the layers that `elmo` stored on each
Doc and learns `gamma * sum_j softmax(s)_j h_j` (Peters et al. 2018, sec. 3.3). Sizes left null are taken
from the biLM at initialize: from the Docs' layers, or, since `nlp.initialize` gives Docs that `elmo` has
not annotated yet, from the `elmo` component of the pipeline that holds the layer.
"""
from __future__ import annotations

import json
import weakref
from contextvars import ContextVar
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v3, get_torch_default_device
from thinc.types import Floats1d, Floats2d, Floats3d
from torch import nn

from .bilm import (
    BiLM,
    BiLMOptions,
    ElmoEmbedder,
    StatePolicy,
    bilm_from_state_dict,
    check_batch_size,
    check_state_policy,
    load_bilm,
    read_state_dict,
)
from .errors import ElmoFileError

SERIAL_FORMAT = "spacy_elmo.ElmoModel"
SERIAL_VERSION = 1
# What `deserialize_bilm` names in its errors: the file `ElmoThincModel.from_disk` reads, if any.
_SOURCE: ContextVar[str] = ContextVar("elmo_model_source", default="the serialized pipeline")


class FrozenBiLM(nn.Module):
    """The biLM as a frozen feature extractor: `forward(sentences)` -> one float32 numpy array
    `(n_layers + 1, n_tokens, 2P)` per sentence. `bilm` is None until sizes are known."""

    def __init__(self, options: Optional[BiLMOptions], state: StatePolicy, batch_size: int, token_cache_size: int):
        super().__init__()
        self.configured = options
        self.state, self.batch_size = check_state_policy(state), check_batch_size(batch_size)
        self.token_cache_size = token_cache_size
        self.bilm: Optional[BiLM] = None
        if options is not None:
            self.bilm = ElmoEmbedder(BiLM(options), state=state, cache_size=token_cache_size)
        self.has_weights = False

    def train(self, mode: bool = True) -> "FrozenBiLM":
        """Frozen: the biLM stays in eval mode (and keeps its token cache)."""
        return self

    def set_bilm(self, bilm: BiLM, source: str) -> None:
        """Adopt a loaded biLM, after checking its sizes against the configured ones."""
        check_sizes(self.configured, bilm.options, source)
        bilm.state_policy = self.state
        bilm.token_cache.capacity = int(self.token_cache_size)
        bilm.token_cache.clear()
        bilm.eval()
        self.bilm = bilm.to(get_torch_default_device())
        self.has_weights = True

    def forward(self, sentences: List[List[str]]) -> List[np.ndarray]:
        if self.bilm is None or not self.has_weights:
            raise RuntimeError(
                "the ELMo biLM has no weights yet: set the 'weights' of the elmo component and call "
                "nlp.initialize(), or load a saved pipeline"
            )
        return self.bilm.embed(sentences, batch_size=self.batch_size)


def check_sizes(configured: Optional[BiLMOptions], actual: BiLMOptions, source: str) -> None:
    """Raise a ElmoFileError naming every size where the config and the weights disagree."""
    if configured is None:
        return
    want, got = configured.sizes(), actual.sizes()
    diff = [f"{k}: config {want[k]!r}, weights {got[k]!r}" for k in want if want[k] != got.get(k)]
    if diff:
        raise ElmoFileError(
            f"the ELMo sizes in the config disagree with the weights from {source} ({'; '.join(diff)}). "
            "Set [components.elmo.model.options] to the weights' options, or to null to take them from the weights."
        )


def _texts_to_args(model: Model, X: List[List[str]], is_train: bool) -> Tuple[ArgsKwargs, Callable]:
    return ArgsKwargs(args=(X,), kwargs={}), lambda dX: []


def _layers_out(model: Model, X_Y: Tuple[Any, List[np.ndarray]], is_train: bool) -> Tuple[List[np.ndarray], Callable]:
    return X_Y[1], lambda dY: ArgsKwargs(args=(), kwargs={})


def serialize_bilm(module: FrozenBiLM) -> bytes:
    """msgpack `{format, version, options (JSON), state_dict (torch.save bytes)}`."""
    if module.bilm is None or not module.has_weights:
        raise ValueError("cannot serialize the ELMo model before its weights are loaded (call nlp.initialize())")
    buf = BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in module.bilm.bilm.state_dict().items()}, buf)
    return srsly.msgpack_dumps({"format": SERIAL_FORMAT, "version": SERIAL_VERSION,
                                "options": json.dumps(module.bilm.options.to_dict()), "state_dict": buf.getvalue()})


def deserialize_bilm(module: FrozenBiLM, data: bytes, device: torch.device) -> FrozenBiLM:
    """The inverse of `serialize_bilm`; what cannot be read raises ElmoFileError naming the source."""
    source = _SOURCE.get()
    msg = srsly.msgpack_loads(data)  # corrupt data: ElmoThincModel names the file
    if not isinstance(msg, dict) or msg.get("format") != SERIAL_FORMAT or msg.get("version") != SERIAL_VERSION:
        raise ElmoFileError(f"{source}: not a serialized {SERIAL_FORMAT} v{SERIAL_VERSION} model")
    if not isinstance(msg.get("options"), str) or not isinstance(msg.get("state_dict"), bytes):
        raise ElmoFileError(f"{source}: the serialized model lacks its options or its weights")
    try:
        options = json.loads(msg["options"])
    except json.JSONDecodeError as err:
        raise ElmoFileError(f"{source}: its options are not valid JSON ({err})") from None
    options = BiLMOptions.from_dict(options, source=source)
    state_dict = read_state_dict(BytesIO(msg["state_dict"]), source)
    bilm = bilm_from_state_dict(options, state_dict, source, module.state, module.token_cache_size)
    module.set_bilm(bilm, source)
    return module.to(device)


class ElmoThincModel(Model):
    """thinc's Model, whose `from_bytes` / `from_disk` turn data they cannot read into one ElmoFileError
    that names the file (thinc and msgpack raise many types for corrupt data)."""

    __slots__ = ()

    def from_bytes(self, bytes_data: bytes) -> "ElmoThincModel":
        return self._read(bytes_data, _SOURCE.get())

    def from_disk(self, path: Union[str, Path]) -> "ElmoThincModel":
        return self._read(Path(path).read_bytes(), str(path))

    def _read(self, data: bytes, source: str) -> "ElmoThincModel":
        token = _SOURCE.set(source)
        try:
            return super().from_bytes(data)
        except ElmoFileError:
            raise
        except Exception as err:
            raise ElmoFileError(f"{source}: not a serialized ELMo model, truncated or corrupt? "
                                f"({type(err).__name__}: {err})") from None
        finally:
            _SOURCE.reset(token)


def bilm_layer(
    options: Optional[BiLMOptions], state: StatePolicy, batch_size: int, token_cache_size: int
) -> Model[List[List[str]], List[np.ndarray]]:
    """The frozen biLM as a thinc layer: token texts -> float32 layers `(n_layers + 1, n_tokens, 2P)` per
    sequence. `options` None: sizes from the weights when they are loaded. See `ElmoModel.v1`."""
    module = FrozenBiLM(options, state, batch_size, token_cache_size)
    model = PyTorchWrapper_v3(module, convert_inputs=_texts_to_args, convert_outputs=_layers_out,
                              serialize_model=serialize_bilm, deserialize_model=deserialize_bilm)
    model.name = "elmo_bilm"
    model.__class__ = ElmoThincModel  # same slots; adds the error handling of its readers
    return model


def frozen_bilm(model: Model) -> FrozenBiLM:
    """The `FrozenBiLM` inside an `ElmoModel.v1`."""
    return model.shims[0]._model


def get_bilm(model: Model) -> Optional[BiLM]:
    """The loaded biLM of an `ElmoModel.v1`, or None before its weights are loaded."""
    module = frozen_bilm(model)
    return module.bilm if module.has_weights else None


def load_weights(model: Model, path: Union[str, Path, Tuple[str, str]]) -> BiLM:
    """Load weights (anything `load_bilm` accepts) into an `ElmoModel.v1`; sizes are checked."""
    module = frozen_bilm(model)
    bilm = load_bilm(tuple(path) if isinstance(path, (list, tuple)) else path, state=module.state,
                     cache_size=module.token_cache_size)
    module.set_bilm(bilm, str(path))
    return module.bilm


# ---------------------------------------------------------------------- the task's layer mix
# The pipelines that have an `elmo` component, by vocab, held weakly: `ElmoFeatures` looks up the biLM of
# its pipeline where `nlp.initialize` gives it Docs that `elmo` has not annotated. A Vocab takes no weak
# references, so the key is its id and `pipelines_of` checks that the vocab is the same object.
_PIPELINES: Dict[int, List[weakref.ref]] = {}


def register_pipeline(nlp) -> None:
    """Remember `nlp` (a `spacy.Language`) under its vocab, weakly; forget pipelines that are gone."""
    for key in list(_PIPELINES):
        _PIPELINES[key] = [ref for ref in _PIPELINES[key] if ref() is not None]
        if not _PIPELINES[key]:
            del _PIPELINES[key]
    refs = _PIPELINES.setdefault(id(nlp.vocab), [])
    if not any(ref() is nlp for ref in refs):
        refs.append(weakref.ref(nlp))


def pipelines_of(vocab) -> list:
    """The live pipelines registered under `vocab`."""
    pipelines = (ref() for ref in _PIPELINES.get(id(vocab), []))
    return [nlp for nlp in pipelines if nlp is not None and nlp.vocab is vocab]


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


def elmo_mix(
    n_layers: Optional[int], width: Optional[int], *, l2: float = 0.0, layer_norm: bool = False
) -> Model[List[Doc], List[Floats2d]]:
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
    """Set the null sizes of an `elmo_mix`; raise one line naming both sizes and the override where a set one
    differs."""
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


def mix_weights(model: Model) -> Floats1d:
    """The softmax-normalised mix `(n_layers,)` of the first `elmo_mix` inside `model`."""
    for node in model.walk():
        if node.name == "elmo_mix":
            return node.ops.softmax(node.get_param("s"))
    raise ValueError("no elmo_mix layer in this model")
