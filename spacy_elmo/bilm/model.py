"""The ELMo biLM module: token encoder + bidirectional projected LSTM stack, and its warm state.

Inference on token texts (state policies, token cache, regrouping, the packed path) is
`inference.BiLMInference`; the module's `embed`, `embed_iter`, `state_policy`, `token_cache`,
`fingerprint` and `reset_state` delegate to the one it owns.
"""
from __future__ import annotations

import threading
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor, nn

from .cache import TokenLayerCache
from .chars import batch_char_ids
from .encoder import TokenEncoder
from .inference import BiLMInference, StatePolicy
from .lstm import BiLSTMStack, LSTMState
from .options import BiLMOptions
from .threads import torch_threads
from .warmup import WARMUP_SENTENCES

_WARMING = threading.Lock()


class BiLMOutput(NamedTuple):
    """`layers` `(n_layers + 1, B, T, 2P)` (layer 0 = `[x; x]`), `mask` `(B, T)`, and the final
    `lstm_state` (`h (n_layers, 2, B, P)`, `c (n_layers, 2, B, D)`) or None."""

    layers: Tensor
    mask: Tensor
    lstm_state: Optional[LSTMState]


def _weights_loaded(module: "BiLM", incompatible_keys) -> None:
    """`load_state_dict` post-hook (also when a parent module loads): new weights."""
    module.invalidate()


class BiLM(nn.Module):
    """ELMo's bidirectional language model (without its softmax).

    `forward` works on character-id tensors (training, thinc layers) from a given start state;
    `embed` / `embed_iter` take token texts and return numpy arrays
    `(n_layers + 1, n_tokens, 2 * projection_dim)` under the state policy `state_policy`:
    "warm" starts every sentence from one fixed state, computed once by reading warm-up text
    (`warm_h`, `warm_c`, saved with the weights); "zero" from zeros; "carry" is bilm-tf's stateful
    mode, where row i of a call starts where row i of the previous call ended (exact-parity mode:
    no regrouping by length, no token cache).
    """

    def __init__(self, options: BiLMOptions, state: StatePolicy = "warm", cache_size: int = 50_000):
        super().__init__()
        self.options = options
        self.token_encoder = TokenEncoder(options)
        self.lstm = BiLSTMStack(options.projection_dim, options.lstm_dim, options.n_layers, options.cell_clip,
                                options.proj_clip, options.use_skip_connections)
        n, P, D = options.n_layers, options.projection_dim, options.lstm_dim
        self.register_buffer("warm_h", torch.zeros(n, 2, P))
        self.register_buffer("warm_c", torch.zeros(n, 2, D))
        self.register_load_state_dict_post_hook(_weights_loaded)
        self._weights_version = 0
        self._warm_count = 0
        self.warm_key: Optional[tuple] = None  # (weights_key(), n) the warm buffers were last filled for
        self.inference = BiLMInference(self, state, cache_size)
        self.eval()

    # ------------------------------------------------------------------ sizes
    @property
    def num_output_layers(self) -> int:
        """`n_layers + 1`: the token layer and each LSTM layer."""
        return self.options.n_layers + 1

    @property
    def output_dim(self) -> int:
        """`2 * projection_dim`, the width of every output layer."""
        return self.options.output_dim

    @property
    def device(self) -> torch.device:
        return self.token_encoder.w_proj.device

    # ------------------------------------------------------------------ weights and warm state
    def weights_key(self) -> tuple:
        """Changes whenever the weights may have changed (`invalidate`, `load_state_dict`, a switch
        between train and eval mode) or moved to another device or dtype: what is derived from
        them (the warm state, inference's caches) is then recomputed."""
        return self._weights_version, self.device, self.token_encoder.w_proj.dtype

    def invalidate(self) -> None:
        """Drop everything derived from the weights (token cache, warm state, fingerprint, carried
        state). Happens on `train()`/`eval()` switches and `load_state_dict`, and moves between
        devices or dtypes are noticed; call it yourself after changing weights in place."""
        self._weights_version += 1
        self.inference.clear()

    def train(self, mode: bool = True):
        if mode != self.training:
            self.invalidate()
        return super().train(mode)

    @property
    def warm_ready(self) -> bool:
        """Whether `warm_h` / `warm_c` hold the warm state of the weights as they are."""
        return self.warm_key is not None and self.warm_key[0] == self.weights_key()

    @warm_ready.setter
    def warm_ready(self, ready: bool) -> None:
        self._warm_count += 1
        self.warm_key = (self.weights_key(), self._warm_count) if ready else None

    def warm_state(self, batch: int) -> LSTMState:
        """The warm start state of `batch` rows (expanded views of `warm_h` `(n_layers, 2, P)` and
        `warm_c` `(n_layers, 2, D)`), computed first if the weights changed since."""
        if not self.warm_ready:
            with _WARMING:  # computed once, whichever thread asks first
                if not self.warm_ready:
                    self.compute_warm_state()
        return LSTMState(self.warm_h.unsqueeze(2).expand(-1, -1, batch, -1),
                         self.warm_c.unsqueeze(2).expand(-1, -1, batch, -1))

    @torch.no_grad()
    def compute_warm_state(self, sentences: Sequence[Sequence[str]] = WARMUP_SENTENCES) -> None:
        """Read `sentences` in one row with carried state from zeros; keep the final state.

        The result is the state between two sentences of running text: deterministic, and
        in distribution for models trained on packed streams with carried state. Computed on one
        torch thread: the rounding of a product can depend on the thread count, and the warm state
        is part of the model (its fingerprint), the same bits wherever it is computed.
        """
        was_training = self.training
        self.eval()
        lstm_state = self.lstm.zero_state(1, self.device, self.warm_h.dtype)
        with torch_threads(1):
            for sent in sentences:
                ids = torch.from_numpy(batch_char_ids([list(sent)], self.options.max_characters_per_token))
                lstm_state = self.forward(ids.to(self.device), initial_state=lstm_state, return_state=True).lstm_state
        self.warm_h.copy_(lstm_state.h[:, :, 0])
        self.warm_c.copy_(lstm_state.c[:, :, 0])
        self.warm_ready = True
        if was_training:
            super().train(True)

    # ------------------------------------------------------------------ tensors
    def forward(self, char_ids: Tensor, mask: Optional[Tensor] = None, initial_state: Optional[LSTMState] = None,
                return_state: bool = False) -> BiLMOutput:
        """char_ids `(B, T, max_chars)` int64, `<S>`/`</S>` included; mask `(B, T)` bool, True on
        each row's first `length` positions (default: positions whose ids are not all 0).

        Returns `BiLMOutput` with layers `(n_layers + 1, B, T, 2P)`. `initial_state` defaults to
        zeros (`initial_state(B)` applies the policy); `return_state` adds the LSTM state at each
        row's last position.
        """
        if char_ids.dim() != 3 or char_ids.shape[-1] != self.options.max_characters_per_token:
            raise ValueError(
                f"char_ids must be (batch, time, {self.options.max_characters_per_token}), got {tuple(char_ids.shape)}"
            )
        if mask is None:
            mask = (char_ids > 0).any(-1)
        x = self.token_encoder(char_ids)
        return self.forward_token_layer(x, mask, initial_state, return_state)

    def forward_token_layer(self, x: Tensor, mask: Tensor, initial_state: Optional[LSTMState] = None,
                            return_state: bool = False) -> BiLMOutput:
        """x `(B, T, P)` token layer, mask `(B, T)` -> `BiLMOutput` (see `forward`)."""
        lengths = mask.long().sum(1)
        T = x.shape[1]
        if not torch.equal(mask.bool(), torch.arange(T, device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)):
            raise ValueError("mask must be True on a prefix of each row (padding only at the end)")
        layers, lstm_state = self.lstm(x, lengths, initial_state, return_state)
        all_layers = torch.stack([torch.cat([x, x], dim=-1), *layers])
        return BiLMOutput(all_layers, mask, lstm_state)

    # ------------------------------------------------------------------ inference (see `BiLMInference`)
    @property
    def state_policy(self) -> StatePolicy:
        return self.inference.state_policy

    @state_policy.setter
    def state_policy(self, state: StatePolicy) -> None:
        self.inference.state_policy = state

    @property
    def token_cache(self) -> TokenLayerCache:
        return self.inference.token_cache

    def reset_state(self) -> None:
        """Forget the carried state ("carry" policy): the next call starts from zeros."""
        self.inference.reset_state()

    def fingerprint(self) -> str:
        """sha256 over the options and every parameter and buffer: identifies the model's outputs."""
        return self.inference.fingerprint()

    def initial_state(self, batch: int, policy: Optional[StatePolicy] = None) -> LSTMState:
        """The start state of a batch of `batch` rows under `policy` (default: `state_policy`)."""
        return self.inference.initial_state(batch, policy)

    def embed_iter(self, sentences: Iterable[Sequence[str]], batch_size: int = 64,
                   as_tensor: bool = False) -> Iterator[Union[np.ndarray, Tensor]]:
        """Lazily embed a stream of token lists, in input order.

        Yields one array per sentence, `(n_layers + 1, n_tokens, 2 * projection_dim)` float32
        (numpy, or torch on the model's device with `as_tensor=True`). `batch_size` bounds memory
        (see `inference.check_batch_size`); within a window of `8 * batch_size` sentences, compute
        batches are regrouped by length (not under the "carry" policy, which keeps rows and
        batches exactly as given).
        """
        return self.inference.embed_iter(sentences, batch_size, as_tensor)

    def embed(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> List[np.ndarray]:
        """Embed token lists: one float32 array `(n_layers + 1, n_tokens, 2 * projection_dim)` each.

        Sentence boundaries are removed; layer 0 is the token layer written twice, `[x; x]`.
        """
        return self.inference.embed(sentences, batch_size)
