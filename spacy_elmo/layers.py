"""Thinc glue for the frozen biLM: `spacy_elmo.ElmoModel.v1`.

The biLM is wrapped with thinc's PyTorch wrapper. The model maps token texts to layers:

    List[List[str]] (one list per biLM input sequence) -> List[np.ndarray (n_layers + 1, n_tokens, 2P)]

float32, on the CPU (ready to be stored on Docs). Regrouping by length and the token-layer
cache live in the biLM (`BiLM.embed`). The biLM is frozen: it stays in eval mode whatever
thinc asks, runs under inference mode and returns no gradient.

The sizes come from the config (`options`, the bilm-tf options layout) or, when `options` is
null, from the weights when they are loaded. Serialization goes through thinc (`to_bytes` /
`from_bytes`) with a safe format: msgpack holding the options JSON and a torch state dict
that is read with `torch.load(..., weights_only=True)`.
"""
from __future__ import annotations

import json
from contextvars import ContextVar
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import srsly
import torch
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v3, get_torch_default_device
from torch import nn

from .bilm import BiLM, BiLMOptions, load_bilm
from .bilm.model import STATE_POLICIES
from .bilm.errors import ElmoFileError
from .bilm.weights import WeightFileError, bilm_from_state_dict, read_state_dict

SERIAL_FORMAT = "spacy_elmo.ElmoModel"
SERIAL_VERSION = 1
# What `deserialize_bilm` names in its errors: the file `ElmoThincModel.from_disk` reads, if any.
_SOURCE: ContextVar[str] = ContextVar("elmo_model_source", default="the serialized pipeline")


class FrozenBiLM(nn.Module):
    """The biLM as a frozen feature extractor: `forward(sentences)` -> one float32 numpy array
    `(n_layers + 1, n_tokens, 2P)` per sentence. `bilm` is None until sizes are known."""

    def __init__(self, options: Optional[BiLMOptions], state: str, batch_size: int, token_cache_size: int):
        super().__init__()
        if state not in STATE_POLICIES:
            raise ValueError(f"unknown state policy {state!r}; choose one of {', '.join(STATE_POLICIES)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.configured = options
        self.state, self.batch_size, self.token_cache_size = state, batch_size, token_cache_size
        self.bilm: Optional[BiLM] = None
        if options is not None:
            self.bilm = BiLM(options, state=state, cache_size=token_cache_size)
        self.has_weights = False

    def train(self, mode: bool = True) -> "FrozenBiLM":
        """Frozen: the biLM stays in eval mode (and keeps its token cache)."""
        return self

    def _apply(self, fn, *args, **kwargs):
        if self.bilm is not None:
            self.bilm.invalidate()  # the token cache lives on the old device
        return super()._apply(fn, *args, **kwargs)

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
    """Raise a WeightFileError naming every size where the config and the weights disagree."""
    if configured is None:
        return
    want, got = configured.sizes(), actual.sizes()
    diff = [f"{k}: config {want[k]!r}, weights {got[k]!r}" for k in want if want[k] != got.get(k)]
    if diff:
        raise WeightFileError(
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
    torch.save({k: v.detach().cpu().contiguous() for k, v in module.bilm.state_dict().items()}, buf)
    return srsly.msgpack_dumps({"format": SERIAL_FORMAT, "version": SERIAL_VERSION,
                                "options": json.dumps(module.bilm.options.to_dict()), "state_dict": buf.getvalue()})


def deserialize_bilm(module: FrozenBiLM, data: bytes, device: torch.device) -> FrozenBiLM:
    """The inverse of `serialize_bilm`; what cannot be read raises ElmoFileError naming the source."""
    source = _SOURCE.get()
    msg = srsly.msgpack_loads(data)  # corrupt data: ElmoThincModel names the file
    if not isinstance(msg, dict) or msg.get("format") != SERIAL_FORMAT or msg.get("version") != SERIAL_VERSION:
        raise WeightFileError(f"{source}: not a serialized {SERIAL_FORMAT} v{SERIAL_VERSION} model")
    if not isinstance(msg.get("options"), str) or not isinstance(msg.get("state_dict"), bytes):
        raise WeightFileError(f"{source}: the serialized model lacks its options or its weights")
    try:
        options = json.loads(msg["options"])
    except json.JSONDecodeError as err:
        raise WeightFileError(f"{source}: its options are not valid JSON ({err})") from None
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


@registry.architectures("spacy_elmo.ElmoModel.v1")
def ElmoModel(
    options: Optional[Dict[str, Any]] = None,
    state: str = "warm",
    batch_size: int = 64,
    token_cache_size: int = 50_000,
) -> Model[List[List[str]], List[np.ndarray]]:
    """The frozen biLM: token texts -> float32 layers `(n_layers + 1, n_tokens, 2P)` per sequence.

    options: the biLM sizes in the bilm-tf options layout (`{"lstm": {...}, "char_cnn": {...}}`), or
        null to take them from the weights. state: the state policy ("warm", "zero", "carry").
    batch_size: rows per compute batch (padded positions are capped at 32x this), longest first.
    token_cache_size: entries of the token-layer cache.
    """
    opts = BiLMOptions.from_dict(dict(options), source="[components.elmo.model.options]") if options else None
    module = FrozenBiLM(opts, state, batch_size, token_cache_size)
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
