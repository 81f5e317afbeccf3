"""The ELMo biLM network: token encoder + bidirectional projected LSTM stack, and its warm state.

Math only: tensors in, tensors out. Inference on token texts (state policies, carried state,
caches, batching) is `embedder.ElmoEmbedder`, which holds one of these (`.network`) and
calls the methods below, never its parts.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ElmoConfigError
from ..own_locks import OwnLocks
from .chars import CharTable
from .encoder import TokenEncoder
from .lstm import BiLSTMStack, LSTMState
from .options import BiLMOptions
from .precision import LayerProducts
from .schedule import PrefixTree
from .threads import torch_threads
from .warmup import WARMUP_SENTENCES


class BiLMOutput(NamedTuple):
    """`layers` `(n_layers + 1, B, T, 2P)` (layer 0 = `[x; x]`), `mask` `(B, T)`, and the final
    `lstm_state` (`h (n_layers, 2, B, P)`, `c (n_layers, 2, B, D)`) or None."""

    layers: Tensor
    mask: Tensor
    lstm_state: Optional[LSTMState]


def _weights_loaded(module: "BiLM", incompatible_keys) -> None:
    """`load_state_dict` post-hook (also when a parent module loads)."""
    module.invalidate()


class BiLM(OwnLocks, nn.Module):
    """ELMo's bidirectional language model, without its softmax.

    `forward` maps character ids to all layers from a given start state. `warm_h` / `warm_c` hold
    the "warm" start state (saved with the weights): the state between two sentences of running
    text. `version` changes whenever the weights may have changed; `state_key()` adds device and
    dtype, and whatever is derived from the weights (the warm state here, an embedder's caches)
    follows it. Copies and pickles get a lock of their own.
    """

    _lock_names = ("_warming",)

    def __init__(self, options: BiLMOptions, char_table: Optional[CharTable] = None):
        super().__init__()
        self.options = options
        self.token_encoder = TokenEncoder(options, char_table)
        # the text `compute_warm_state` reads: the built-in one is English, so a model with a
        # character table (another language) has none until one is given
        self.warmup: Optional[Sequence[Sequence[str]]] = (
            None if options.char_table else WARMUP_SENTENCES
        )
        self.lstm = BiLSTMStack(
            options.projection_dim,
            options.lstm_dim,
            options.n_layers,
            options.cell_clip,
            options.proj_clip,
            options.use_skip_connections,
            options.forget_bias,
        )
        n, P, D = options.n_layers, options.projection_dim, options.lstm_dim
        self.register_buffer("warm_h", torch.zeros(n, 2, P))
        self.register_buffer("warm_c", torch.zeros(n, 2, D))
        self.register_load_state_dict_post_hook(_weights_loaded)
        self.version = 0
        # state_key() the warm buffers were computed (or loaded) for
        self._warm_key: Optional[tuple] = None
        self._warming = threading.Lock()
        self.eval()

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

    @property
    def dtype(self) -> torch.dtype:
        return self.token_encoder.w_proj.dtype

    def state_key(self) -> tuple:
        """`(version, device, dtype)`: what is derived from the weights is valid while this is
        unchanged."""
        return self.version, self.device, self.token_encoder.w_proj.dtype

    def invalidate(self) -> None:
        """Mark the weights as changed (done by `load_state_dict` and train/eval switches; call it
        after changing weights in place): the warm state and every embedder's caches are
        recomputed."""
        self.version += 1

    def train(self, mode: bool = True):
        if mode != self.training:
            self.invalidate()
        return super().train(mode)

    @property
    def has_warm_state(self) -> bool:
        """Whether `warm_h` / `warm_c` hold the warm state of the weights as they are."""
        return self._warm_key == self.state_key()

    def mark_warm_state_current(self) -> None:
        """Declare `warm_h` / `warm_c` to be the warm state of the weights as they are (after
        loading both)."""
        self._warm_key = self.state_key()

    def warm_state(self, batch: int) -> LSTMState:
        """The warm start state of `batch` rows (expanded views of `warm_h` `(n_layers, 2, P)` and
        `warm_c` `(n_layers, 2, D)`), computed first if the weights changed since."""
        if self._warm_key != self.state_key():
            with self._warming:  # computed once, whichever thread asks first
                if self._warm_key != self.state_key():
                    self.compute_warm_state()
        return LSTMState(
            self.warm_h.unsqueeze(2).expand(-1, -1, batch, -1),
            self.warm_c.unsqueeze(2).expand(-1, -1, batch, -1),
        )

    def zero_state(self, batch: int, dtype: Optional[torch.dtype] = None) -> LSTMState:
        """Zeros of `batch` rows on the network's device (`dtype` default: the warm state's)."""
        return self.lstm.zero_state(
            batch, self.device, self.warm_h.dtype if dtype is None else dtype
        )

    @property
    def boundary_tokens(self) -> Tuple[str, str]:
        """The texts of the tokens around every sentence (`<S>`, `</S>`, or the model's own)."""
        return tuple(self.token_encoder.token_ids.boundary)

    def token_keys(self, sentences: Sequence[Sequence[str]]) -> List[List[Union[str, bytes]]]:
        """Token lists -> what each token's ids depend on (its text, lowercased where the options
        say `lowercase`, cut where the ids cut it): one short key per token layer, for caches;
        `key_ids` gives the ids."""
        return [self.token_encoder.token_ids.keys(sent) for sent in sentences]

    def key_ids(self, keys: Sequence[Union[str, bytes]]) -> np.ndarray:
        """Keys (of `token_keys`) -> ids `(n, width)` for the token encoder."""
        return self.token_encoder.token_ids.key_ids(keys)

    def char_ids(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        """Token lists -> ids `(B, T + 2, width)` for `forward`, boundaries added."""
        return self.token_encoder.token_ids.batch_ids(sentences)

    def word_ids(self, words: Sequence[str]) -> np.ndarray:
        """Token texts -> ids `(n, width)` for the token encoder."""
        return self.token_encoder.token_ids.words_ids(words)

    def lstm_products(self, precision: str = "float32") -> List[List[LayerProducts]]:
        """The LSTM's matrix products in `precision`, per layer and direction
        (`BiLSTMStack.products`)."""
        return self.lstm.products(precision)

    def step_boundaries(self, x: Tensor, initial_state: LSTMState) -> LSTMState:
        """The state after each direction's first step from `initial_state` (batch 1): forward over
        `x[0]`, backward over `x[1]` (the boundary tokens' layers, `(2, P)`)."""
        first = torch.zeros(1, dtype=torch.long, device=self.device)
        _, lstm_state = self.lstm.run_directions(x.view(2, 1, 1, -1), initial_state, first)
        return lstm_state

    def run_packed(
        self,
        words: Tensor,
        trees: Sequence[PrefixTree],
        initial_state: LSTMState,
        directions: Sequence[int],
        products: List[List[LayerProducts]],
    ) -> Tuple[List[List[Tensor]], LSTMState]:
        """The LSTM over the prefix trees of a batch (`BiLSTMStack.run_packed`): words `(U, P)`
        token layers."""
        return self.lstm.run_packed(words, trees, initial_state, directions, products)

    def fingerprint(self) -> str:
        """sha256 over the options, every parameter and buffer and the character table, if any:
        identifies the outputs. The warm state is computed first where it is the warm-up text's and
        not yet current, so the fingerprint does not depend on whether it was."""
        if self.warmup is not None:
            self.warm_state(1)
        h = hashlib.sha256(repr(sorted(self.options.sizes().items())).encode())
        token_ids = self.token_encoder.token_ids
        if isinstance(token_ids, CharTable):
            h.update(token_ids.digest().encode())
        for name, t in self.state_dict().items():
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def parameter_counts(self) -> Dict[str, int]:
        """Parameters per part: char embedding, char CNN, each highway, projection, each LSTM layer
        per direction (`{part: count}`, the LSTM layers last)."""
        counts: Dict[str, int] = {}
        for name, p in self.named_parameters():
            parts = name.split(".")
            if parts[0] == "lstm":  # (2, ...): forward and backward stacked
                for d, direction in enumerate(("forward", "backward")):
                    key = f"LSTM layer {parts[2]} {direction}"
                    counts[key] = counts.get(key, 0) + p[d].numel()
                continue
            if parts[1] == "highways":
                key = f"highway {parts[2]}"
            else:
                key = {
                    "char_embedding": "char embedding",
                    "word_embedding": "word embedding",
                    "convs": "char CNN",
                }.get(parts[1], "projection")
            counts[key] = counts.get(key, 0) + p.numel()
        return dict(
            sorted(counts.items(), key=lambda kv: (kv[0].startswith("LSTM"), kv[0] == "projection"))
        )

    @torch.no_grad()
    def compute_warm_state(self, sentences: Optional[Sequence[Sequence[str]]] = None) -> None:
        """Read `sentences` (token lists; default: `warmup`, which they replace) in one row with
        carried state from zeros (eval mode, one torch thread, so the bits do not depend on the
        thread count); keep the final state in `warm_h` / `warm_c`. ElmoConfigError where there are
        none (a model with a character table has no built-in text in its language)."""
        if sentences is None and self.warmup is None:
            raise ElmoConfigError(
                "the 'warm' state policy needs a warm-up text in this model's language (the "
                "built-in one is English): call bilm.network.compute_warm_state(sentences) with "
                "token lists first, or use state='zero' (the default for ELMoForManyLangs models)"
            )
        self.warmup = sentences = self.warmup if sentences is None else [list(s) for s in sentences]
        was_training = self.training
        super().train(False)
        lstm_state = self.lstm.zero_state(1, self.device, self.warm_h.dtype)
        with torch_threads(1):
            for sent in sentences:
                ids = torch.from_numpy(self.token_encoder.token_ids.batch_ids([list(sent)]))
                lstm_state = self.forward(
                    ids.to(self.device), initial_state=lstm_state, return_state=True
                ).lstm_state
        super().train(was_training)
        self.warm_h.copy_(lstm_state.h[:, :, 0])
        self.warm_c.copy_(lstm_state.c[:, :, 0])
        self.invalidate()  # outputs under the warm state changed
        self.mark_warm_state_current()

    def forward(
        self,
        char_ids: Tensor,
        mask: Optional[Tensor] = None,
        initial_state: Optional[LSTMState] = None,
        return_state: bool = False,
    ) -> BiLMOutput:
        """char_ids `(B, T, width)` int64 (`token_encoder.token_ids`: `width` = max_chars, + 1 with
        a word embedding), boundaries included; mask `(B, T)` bool, True on each row's
        first `length` positions (default: positions whose ids are not all 0); `initial_state`
        defaults to zeros. Returns layers `(n_layers + 1, B, T, 2P)` and, with `return_state`, the
        LSTM state at each row's last position. Raises ValueError on other shapes."""
        width = self.token_encoder.token_ids.width
        if char_ids.dim() != 3 or char_ids.shape[-1] != width:
            raise ValueError(
                f"char_ids must be (batch, time, {width}), got {tuple(char_ids.shape)}"
            )
        if mask is None:
            mask = (char_ids > 0).any(-1)
        return self.forward_token_layer(
            self.token_encoder(char_ids), mask, initial_state, return_state
        )

    def forward_token_layer(
        self,
        x: Tensor,
        mask: Tensor,
        initial_state: Optional[LSTMState] = None,
        return_state: bool = False,
    ) -> BiLMOutput:
        """x `(B, T, P)` token layer, mask `(B, T)` -> `BiLMOutput` (see `forward`)."""
        lengths = mask.long().sum(1)
        T = x.shape[1]
        if not torch.equal(
            mask.bool(), torch.arange(T, device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)
        ):
            raise ValueError("mask must be True on a prefix of each row (padding only at the end)")
        layers, lstm_state = self.lstm(x, lengths, initial_state, return_state)
        return BiLMOutput(torch.stack([torch.cat([x, x], dim=-1), *layers]), mask, lstm_state)
