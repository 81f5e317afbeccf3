"""The ELMo biLM: token encoder + bidirectional projected LSTM stack, with state policies."""
from __future__ import annotations

import hashlib
import threading
from itertools import islice
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from .cache import TokenLayerCache
from .chars import BOS_TOKEN, EOS_TOKEN, batch_char_ids, words_char_ids
from .encoder import TokenEncoder
from .lstm import BiLSTMStack, LSTMState, direction_trees
from .options import BiLMOptions
from .warmup import WARMUP_SENTENCES

STATE_POLICIES = ("warm", "zero", "carry")
_WARMING = threading.Lock()
# Compute batches (packed, so without padding) hold up to `batch_size * ROWS_PER_BATCH` sentences
# and `batch_size * TOKENS_PER_BATCH` tokens: large matrix products, memory bounded by batch_size.
ROWS_PER_BATCH = 8
TOKENS_PER_BATCH = 256
# `embed_iter` regroups sentences by length within windows of `batch_size * WINDOW_BATCHES`.
WINDOW_BATCHES = 8
# Words per token-encoder call (bounds memory; words of similar length go together).
ENCODER_CHUNK = 1024


class BiLMOutput(NamedTuple):
    """`layers` `(n_layers + 1, B, T, 2P)` (layer 0 = `[x; x]`), `mask` `(B, T)`, final `state` or None."""

    layers: Tensor
    mask: Tensor
    state: Optional[LSTMState]


def _check_policy(state: str) -> str:
    if state not in STATE_POLICIES:
        raise ValueError(f"unknown state policy {state!r}; choose one of {', '.join(STATE_POLICIES)}")
    return state


def _check_sentence(sent, i: int) -> List[str]:
    if isinstance(sent, str):
        raise TypeError(f"sentence {i} is a str; pass a list of token texts (e.g. text.split())")
    sent = list(sent)
    for tok in sent:
        if not isinstance(tok, str):
            raise TypeError(f"sentence {i} holds a {type(tok).__name__} ({tok!r}); token texts must be str")
    return sent


class BiLM(nn.Module):
    """ELMo's bidirectional language model (without its softmax).

    `forward` works on character-id tensors (training, thinc layers); `embed` / `embed_iter`
    take token texts and return numpy arrays `(n_layers + 1, n_tokens, 2 * projection_dim)`.

    State policies (`state_policy`): "warm" starts every sentence from one fixed state,
    computed once by reading warm-up text; "zero" from zeros; "carry" is bilm-tf's stateful
    mode, where row i of a call starts where row i of the previous call ended (exact-parity
    mode: no regrouping by length, no token cache).
    """

    def __init__(self, options: BiLMOptions, state: str = "warm", cache_size: int = 50_000):
        super().__init__()
        self.options = options
        self.token_encoder = TokenEncoder(options)
        self.lstm = BiLSTMStack(options.projection_dim, options.lstm_dim, options.n_layers, options.cell_clip,
                                options.proj_clip, options.use_skip_connections)
        n, P, D = options.n_layers, options.projection_dim, options.lstm_dim
        self.register_buffer("warm_h", torch.zeros(n, 2, P))
        self.register_buffer("warm_c", torch.zeros(n, 2, D))
        self.warm_ready = False
        self._state_policy = _check_policy(state)
        self._carried: Optional[LSTMState] = None
        self._after_boundary: dict = {}
        self.token_cache = TokenLayerCache(cache_size, P)
        self._fingerprint: Optional[str] = None
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

    # ------------------------------------------------------------------ state
    @property
    def state_policy(self) -> str:
        return self._state_policy

    @state_policy.setter
    def state_policy(self, state: str) -> None:
        self._state_policy = _check_policy(state)
        self._carried = None

    def reset_state(self) -> None:
        """Forget the carried state ("carry" policy): the next call starts from zeros."""
        self._carried = None

    def invalidate(self) -> None:
        """Drop everything derived from the weights (token cache, warm state, fingerprint, carried
        state). Happens on `train()`/`eval()` switches, `load_state_dict` and moves between devices
        or dtypes; call it yourself after changing weights in place."""
        self.token_cache.clear()
        self._fingerprint = None
        self._carried = None
        self._after_boundary = {}
        self.warm_ready = False

    def train(self, mode: bool = True):
        if mode != self.training:
            self.invalidate()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.invalidate()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self.invalidate()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def fingerprint(self) -> str:
        """sha256 over the options and every parameter and buffer: identifies the model's outputs."""
        if self._fingerprint is None:
            h = hashlib.sha256(repr(sorted(self.options.sizes().items())).encode())
            for name, t in self.state_dict().items():
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def initial_state(self, batch: int, policy: Optional[str] = None) -> LSTMState:
        """The start state of a batch of `batch` rows under `policy` (default: the model's)."""
        policy = _check_policy(policy or self._state_policy)
        if policy == "warm":
            if not self.warm_ready:
                with _WARMING:  # computed once, whichever thread asks first
                    if not self.warm_ready:
                        self.compute_warm_state()
            return LSTMState(self.warm_h.unsqueeze(2).expand(-1, -1, batch, -1),
                             self.warm_c.unsqueeze(2).expand(-1, -1, batch, -1))
        if policy == "carry" and self._carried is not None:
            h, c = self._carried
            zero = self.lstm.zero_state(batch, self.device, h.dtype)
            n = min(batch, h.shape[2])
            zero.h[:, :, :n] = h[:, :, :n]
            zero.c[:, :, :n] = c[:, :, :n]
            return zero
        return self.lstm.zero_state(batch, self.device, self.warm_h.dtype)

    @torch.no_grad()
    def compute_warm_state(self, sentences: Sequence[Sequence[str]] = WARMUP_SENTENCES) -> None:
        """Read `sentences` in one row with carried state from zeros; keep the final state.

        The result is the state between two sentences of running text: deterministic, and
        in distribution for models trained on packed streams with carried state.
        """
        was_training = self.training
        self.eval()
        state = self.lstm.zero_state(1, self.device, self.warm_h.dtype)
        for sent in sentences:
            ids = torch.from_numpy(batch_char_ids([list(sent)], self.options.max_characters_per_token))
            out = self.forward(ids.to(self.device), initial_state=state, return_state=True)
            state = out.state
        self.warm_h.copy_(state.h[:, :, 0])
        self.warm_c.copy_(state.c[:, :, 0])
        self.warm_ready = True
        self._fingerprint = None
        self._after_boundary = {}
        if was_training:
            super().train(True)

    # ------------------------------------------------------------------ tensors
    def forward(self, char_ids: Tensor, mask: Optional[Tensor] = None, initial_state: Optional[LSTMState] = None,
                return_state: bool = False) -> BiLMOutput:
        """char_ids `(B, T, max_chars)` int64, `<S>`/`</S>` included; mask `(B, T)` bool, True on
        each row's first `length` positions (default: positions whose ids are not all 0).

        Returns `BiLMOutput` with layers `(n_layers + 1, B, T, 2P)`. `initial_state` defaults to
        zeros (the caller applies a policy); `return_state` adds the state at each row's last position.
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
        layers, state = self.lstm(x, lengths, initial_state, return_state)
        all_layers = torch.stack([torch.cat([x, x], dim=-1), *layers])
        return BiLMOutput(all_layers, mask, state)

    # ------------------------------------------------------------------ token texts
    def _encode_words(self, words: List[str]) -> Tensor:
        """Token texts -> token layer `(n, P)`; words grouped by length so short words convolve less."""
        if not words:
            return self.token_encoder.w_proj.new_zeros(0, self.options.projection_dim)
        order = sorted(range(len(words)), key=lambda i: len(words[i]))
        out = self.token_encoder.w_proj.new_empty(len(words), self.options.projection_dim)
        for start in range(0, len(words), ENCODER_CHUNK):
            chunk = order[start : start + ENCODER_CHUNK]
            ids = torch.from_numpy(words_char_ids([words[i] for i in chunk], self.options.max_characters_per_token))
            out[torch.tensor(chunk, device=self.device)] = self.token_encoder(ids.to(self.device))
        return out

    def _token_layer_of(self, words: List[str]) -> Tensor:
        """Distinct token texts -> `(n, P)`, through the token cache."""
        return self.token_cache.lookup(words, self._encode_words)

    def _word_index(self, sentences: Sequence[Sequence[str]]) -> Tuple[List[str], np.ndarray]:
        """Non-empty sentences -> their distinct words and a `(B, T)` index into them (0-padded)."""
        vocab: dict = {}
        index = np.zeros((len(sentences), max(len(s) for s in sentences)), dtype=np.int64)
        for row, sent in enumerate(sentences):
            index[row, : len(sent)] = [vocab.setdefault(w, len(vocab)) for w in sent]
        return list(vocab), index

    def _boundary_step(self, policy: str) -> LSTMState:
        """The state after the first step of each direction (over `<S>` forward, over `</S>`
        backward): under a fixed start state it is the same for every sentence, so it is computed
        once per policy. Batch size 1."""
        if policy not in self._after_boundary:
            x = self._token_layer_of([BOS_TOKEN, EOS_TOKEN])  # (2, P)
            first = torch.zeros(1, dtype=torch.long, device=self.device)
            _, state = self.lstm.run_directions(x.view(2, 1, 1, -1), self.initial_state(1, policy), first)
            self._after_boundary[policy] = state
        return self._after_boundary[policy]

    def _run_carry(self, sentences: Sequence[Sequence[str]]) -> Tensor:
        """"carry": rows as given, boundaries included -> layers `(n_layers + 1, B, T + 2, 2P)`;
        updates the carried state."""
        lengths = torch.tensor([len(s) + 2 for s in sentences], device=self.device)
        mask = torch.arange(int(lengths.max()), device=self.device).unsqueeze(0) < lengths.unsqueeze(1)
        ids = torch.from_numpy(batch_char_ids(sentences, self.options.max_characters_per_token))
        out = self.forward(ids.to(self.device), mask, self.initial_state(len(sentences), "carry"), return_state=True)
        self._carried = self._merge_carried(out.state)
        return out.layers

    def _run_packed(self, sentences: Sequence[Sequence[str]], policy: str) -> List[Tensor]:
        """Non-empty sentences -> per sentence, layers `(n_layers + 1, n, 2P)` of its real tokens,
        through the packed recurrence from the state after the boundary steps. That state is the
        same for every sentence, so each direction steps each distinct prefix (in its reading order)
        once: shared first words forward, shared last words backward, repeated sentences."""
        lengths = np.array([len(s) for s in sentences])
        words, index = self._word_index(sentences)  # index (B, T)
        trees, nodes = direction_trees(index, lengths, self.device)
        real = nodes[0] >= 0  # (B, T)
        # sentence-major (sentences one after another, tokens in order) -> node of each direction
        to_forward, to_backward = (torch.from_numpy(n[real]).to(self.device) for n in nodes)
        vectors = self._token_layer_of(words)  # (U, P)
        state = self._boundary_step(policy)
        B = len(sentences)
        init = LSTMState(state.h.expand(-1, -1, B, -1), state.c.expand(-1, -1, B, -1))
        outputs = self.lstm.run_packed(vectors, trees, init)
        token = vectors[torch.from_numpy(index[real]).to(self.device)]  # (N, P) sentence-major
        layers = torch.stack([torch.cat([token, token], dim=-1)]
                             + [torch.cat([out[0][to_forward], out[1][to_backward]], dim=-1) for out in outputs])
        return list(layers.split(lengths.tolist(), dim=1))

    def _merge_carried(self, state: LSTMState) -> LSTMState:
        """Rows beyond this batch keep their older carried state (AllenNLP's semantics)."""
        old = self._carried
        if old is None or old.h.shape[2] <= state.h.shape[2]:
            return LSTMState(state.h.clone(), state.c.clone())
        h, c = old.h.clone(), old.c.clone()
        n = state.h.shape[2]
        h[:, :, :n] = state.h
        c[:, :, :n] = state.c
        return LSTMState(h, c)

    def _batches_by_length(self, sentences: List[List[str]], batch_size: int) -> Iterator[List[int]]:
        """Indices of non-empty sentences, longest first, in groups of at most
        `batch_size * ROWS_PER_BATCH` sentences and `batch_size * TOKENS_PER_BATCH` tokens."""
        order = sorted((i for i, s in enumerate(sentences) if s), key=lambda i: -len(sentences[i]))
        max_rows, max_tokens = batch_size * ROWS_PER_BATCH, batch_size * TOKENS_PER_BATCH
        batch: List[int] = []
        tokens = 0
        for i in order:
            if batch and (len(batch) == max_rows or tokens + len(sentences[i]) > max_tokens):
                yield batch
                batch, tokens = [], 0
            batch.append(i)
            tokens += len(sentences[i])
        if batch:
            yield batch

    def _empty(self, as_tensor: bool):
        shape = (self.num_output_layers, 0, self.output_dim)
        return torch.zeros(shape, device=self.device) if as_tensor else np.zeros(shape, dtype=np.float32)

    @staticmethod
    def _convert(layers: Tensor, as_tensor: bool):
        return layers.clone() if as_tensor else layers.float().cpu().numpy().copy()

    def _embed_window(self, sentences: List[List[str]], batch_size: int, as_tensor: bool) -> list:
        results: list = [None] * len(sentences)
        for batch in self._batches_by_length(sentences, batch_size):
            outputs = self._run_packed([sentences[i] for i in batch], self._state_policy)
            for i, layers in zip(batch, outputs):
                results[i] = self._convert(layers, as_tensor)
        return [self._empty(as_tensor) if r is None else r for r in results]

    def _embed_carry(self, sentences: List[List[str]], as_tensor: bool) -> list:
        layers = self._run_carry(sentences)
        return [self._convert(layers[:, row, 1 : len(s) + 1], as_tensor) for row, s in enumerate(sentences)]

    def embed_iter(self, sentences: Iterable[Sequence[str]], batch_size: int = 64,
                   as_tensor: bool = False) -> Iterator[Union[np.ndarray, Tensor]]:
        """Lazily embed a stream of token lists, in input order.

        Yields one array per sentence, `(n_layers + 1, n_tokens, 2 * projection_dim)` float32
        (numpy, or torch on the model's device with `as_tensor=True`). Memory is bounded by
        `batch_size`; within a window of `8 * batch_size` sentences, compute batches are regrouped
        by length (not under the "carry" policy, which keeps rows and batches exactly as given).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        carry = self._state_policy == "carry"
        size = batch_size if carry else batch_size * WINDOW_BATCHES
        it = iter(sentences)
        count = 0
        with torch.inference_mode():
            while True:
                window = [_check_sentence(s, count + k) for k, s in enumerate(islice(it, size))]
                if not window:
                    return
                count += len(window)
                if self.training:
                    raise RuntimeError("embed needs eval mode: call bilm.eval() first")
                out = self._embed_carry(window, as_tensor) if carry else self._embed_window(window, batch_size, as_tensor)
                yield from out

    def embed(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> List[np.ndarray]:
        """Embed token lists: one float32 array `(n_layers + 1, n_tokens, 2 * projection_dim)` each.

        Sentence boundaries are removed; layer 0 is the token layer written twice, `[x; x]`.
        """
        sentences = [_check_sentence(s, i) for i, s in enumerate(sentences)]
        if self._state_policy == "carry" or not sentences:
            return list(self.embed_iter(sentences, batch_size))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if self.training:
            raise RuntimeError("embed needs eval mode: call bilm.eval() first")
        with torch.inference_mode():
            return self._embed_window(sentences, batch_size, as_tensor=False)
