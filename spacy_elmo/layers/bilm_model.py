"""The frozen biLM as a thinc layer (`spacy_elmo.ElmoModel.v1`), token texts -> layers:

    List[List[str]] (one list per biLM input sequence; a Doc stands for its non-whitespace tokens'
    texts) -> List[np.ndarray (n_layers + 1, n_tokens, 2P)]

float32, on the CPU (ready to be stored on Docs). Regrouping by length and the token-layer cache
live in the embedder (`ElmoEmbedder.embed`). Frozen: the network stays in eval mode whatever thinc
asks, runs under inference mode and returns no gradient. The biLM is built when its weights are
loaded, at their sizes, which must match the config's `options` (the bilm-tf options layout) where
it sets them.
Serialized through thinc with a safe format: msgpack holding the options JSON and a torch state dict
read with `torch.load(..., weights_only=True)`, which the weight files read (`weights.pipeline`:
the file's framing, then the message, built into the network as every format's is).
"""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from thinc.api import Model, PyTorchShim, get_torch_default_device
from torch import nn

from ..bilm import (
    BiLMOptions,
    CharTable,
    ElmoEmbedder,
    Precision,
    StatePolicy,
    check_batch_size,
    check_precision,
)
from ..bilm.runner import check_cache_size
from ..errors import ElmoConfigError, ElmoFileError
from ..weights import build, load_bilm
from ..weights.pipeline import SERIAL_FORMAT, SERIAL_VERSION, naming_file, read_message
from ..weights.pipeline_file import read_model_file


class FrozenBiLM(nn.Module):
    """The embedder as a frozen feature extractor: `forward(sentences)` -> one float32 numpy array
    `(n_layers + 1, n_tokens, 2P)` per sentence. `embedder` is None until the weights are loaded:
    the biLM is built from them (never from the configured sizes, `configured`, which they must
    match)."""

    def __init__(
        self,
        options: Optional[BiLMOptions],
        state: Optional[StatePolicy],
        batch_size: int,
        token_cache_size: int,
        precision: Precision = "float32",
    ):
        super().__init__()
        self.configured = options
        # None: the weights' own policy
        self.state = None if state is None else StatePolicy.parse(state)
        self.batch_size = check_batch_size(batch_size)
        self.token_cache_size = check_cache_size(token_cache_size)
        self.precision = check_precision(precision)
        self.embedder: Optional[ElmoEmbedder] = None

    def train(self, mode: bool = True) -> "FrozenBiLM":
        """Frozen: the network stays in eval mode (and the embedder keeps its token cache)."""
        return self

    def set_embedder(self, embedder: ElmoEmbedder, source: str) -> None:
        """Adopt a loaded embedder, after checking its sizes against the configured ones."""
        check_sizes(self.configured, embedder.options, source)
        if self.state is not None:
            embedder.state_policy = self.state
        if embedder.state_policy.warm_start:
            # ElmoConfigError now where there is no warm-up text (see load_bilm)
            embedder.network.warm_state(1)
        embedder.token_cache.capacity = int(self.token_cache_size)
        embedder.token_cache.clear()
        embedder.eval()
        self.embedder = embedder.to(get_torch_default_device())
        self.embedder.precision = self.precision  # resolved for the device it now runs on

    def forward(self, sentences: List[List[str]]) -> List[np.ndarray]:
        if self.embedder is None:
            raise ElmoConfigError(
                "the ELMo biLM has no weights yet: set the 'weights' of the elmo component and "
                "call nlp.initialize(), or load a saved pipeline"
            )
        return self.embedder.embed(sentences, batch_size=self.batch_size)


def check_sizes(configured: Optional[BiLMOptions], actual: BiLMOptions, source: str) -> None:
    """Raise an ElmoFileError naming every size where the config and the weights disagree."""
    if configured is None:
        return
    want, got = configured.sizes(), actual.sizes()
    diff = [f"{k}: config {want[k]!r}, weights {got[k]!r}" for k in want if want[k] != got.get(k)]
    if diff:
        raise ElmoFileError(
            f"the ELMo sizes in the config disagree with the weights from {source} "
            f"({'; '.join(diff)}). Set the options of the component's model "
            "(spacy_elmo.ElmoModel.v1) to the weights' options, or to null to take them from the "
            "weights."
        )


def serialize_bilm(module: FrozenBiLM) -> bytes:
    """msgpack `{format, version, options (JSON), state_dict (torch.save bytes of the network),
    state (the policy), warm_state (whether the state dict holds one)}`, and `char_table` (JSON)
    where the model has one."""
    if module.embedder is None:
        raise ElmoConfigError(
            "cannot serialize the ELMo model before its weights are loaded (call nlp.initialize())"
        )
    network = module.embedder.network
    buf = BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in network.state_dict().items()}, buf)
    msg = {
        "format": SERIAL_FORMAT,
        "version": SERIAL_VERSION,
        "options": json.dumps(network.options.to_dict()),
        "state_dict": buf.getvalue(),
        "state": module.embedder.state_policy.value,
        "warm_state": network.has_warm_state,
    }
    if isinstance(network.token_encoder.token_ids, CharTable):
        msg["char_table"] = network.token_encoder.token_ids.to_json()
    return srsly.msgpack_dumps(msg)


def deserialize_bilm(module: FrozenBiLM, data: bytes, device: torch.device) -> FrozenBiLM:
    """The inverse of `serialize_bilm`: the message read by the weight files (`read_message`, its
    sizes checked against the configured ones first), the network built from it (`build`); what
    cannot be read raises ElmoFileError (`ElmoBiLMModel` names the source)."""
    model = read_message(
        data,
        "weights",
        lambda options: check_sizes(module.configured, options, "the serialized pipeline"),
    )
    embedder = build(model, module.state, module.token_cache_size)
    module.set_embedder(embedder, "the serialized pipeline")
    return module.to(device)


def bilm_forward(
    model: Model, sentences: Sequence[Union[List[str], Doc]], is_train: bool
) -> Tuple[List[np.ndarray], Callable]:
    """Token texts per sequence -> float32 layers `(n_layers + 1, n_tokens, 2P)`; no gradient
    (frozen). A Doc is one sequence of its non-whitespace tokens' texts (`spacy debug model`
    passes Docs; the `elmo` component passes the token texts of its windows over them)."""
    texts = [doc_texts(s) if isinstance(s, Doc) else s for s in sentences]
    return frozen_bilm(model)(texts), lambda d_layers: []


def doc_texts(doc: Doc) -> List[str]:
    """The texts of `doc`'s non-whitespace tokens, the sequence the biLM reads for it."""
    return [token.text for token in doc if not token.is_space]


class ElmoBiLMModel(Model):
    """The thinc Model of the frozen biLM, whose `from_bytes` / `from_disk` turn data they cannot
    read into one ElmoFileError naming the source (thinc and msgpack raise many types for corrupt
    data)."""

    __slots__ = ()

    def __init__(self, module: FrozenBiLM):
        shim = PyTorchShim(
            module, serialize_model=serialize_bilm, deserialize_model=deserialize_bilm
        )
        super().__init__("elmo_bilm", bilm_forward, shims=[shim])

    def from_bytes(self, bytes_data: bytes) -> "ElmoBiLMModel":
        return self._read(bytes_data, "the serialized pipeline")

    def from_disk(self, path: Union[str, Path], inside: Optional[Path] = None) -> "ElmoBiLMModel":
        """Read `path` once its framing, the sizes it declares (checked against the config's) and
        the memory it needs allow (see `read_model_file`); `inside`: the pipeline's directory, which
        the file must be inside once open."""
        configured = frozen_bilm(self).configured
        data = read_model_file(
            str(path),
            "ELMo model of the pipeline",
            lambda options: check_sizes(configured, options, str(path)),
            inside,
        )
        return self._read(data, str(path))

    def _read(self, data: bytes, source: str) -> "ElmoBiLMModel":
        with naming_file(source):
            super().from_bytes(data)
        return self


def bilm_layer(
    options: Optional[BiLMOptions],
    state: Optional[StatePolicy],
    batch_size: int,
    token_cache_size: int,
    precision: Precision = "float32",
) -> ElmoBiLMModel:
    """The frozen biLM as a thinc layer (see the module docstring); `options` None: sizes from the
    weights; `state` None: the weights' own policy."""
    return ElmoBiLMModel(FrozenBiLM(options, state, batch_size, token_cache_size, precision))


def frozen_bilm(model: Model) -> FrozenBiLM:
    """The `FrozenBiLM` inside an `ElmoModel.v1`."""
    return model.shims[0]._model


def get_embedder(model: Model) -> Optional[ElmoEmbedder]:
    """The loaded embedder of an `ElmoModel.v1`, or None before its weights are loaded."""
    module = frozen_bilm(model)
    return module.embedder


def load_weights(model: Model, path: Union[str, Path, Tuple[str, str]]) -> ElmoEmbedder:
    """Load weights (anything `load_bilm` accepts) into an `ElmoModel.v1`; sizes are checked."""
    module = frozen_bilm(model)
    embedder = load_bilm(
        tuple(path) if isinstance(path, (list, tuple)) else path,
        state=module.state,
        cache_size=module.token_cache_size,
    )
    module.set_embedder(embedder, str(path))
    return module.embedder
