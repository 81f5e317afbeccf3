"""Inference on a `BiLM`: the state policy, the carried state, the token cache, regrouping by length
and the packed path.

`BiLMInference` takes the module and holds everything derived from its weights (token cache, the
state after the boundary steps, the fingerprint) and the state carried between calls. What is
derived is dropped when `BiLM.weights_key()` or `BiLM.warm_key` changes, so it follows loads,
`invalidate()` and moves between devices and dtypes without hooking into torch.
"""
from __future__ import annotations

import hashlib
from itertools import islice
from typing import TYPE_CHECKING, Iterable, Iterator, List, Literal, Optional, Sequence, Tuple, Union, get_args

import numpy as np
import torch
from torch import Tensor

from .cache import TokenLayerCache
from .chars import BOS_TOKEN, EOS_TOKEN, batch_char_ids, words_char_ids
from .lstm import LSTMState
from .schedule import batches_by_length, direction_trees, word_index

if TYPE_CHECKING:
    from .model import BiLM, BiLMOutput

StatePolicy = Literal["warm", "zero", "carry"]
STATE_POLICIES: Tuple[str, ...] = get_args(StatePolicy)
# `embed_iter` regroups sentences by length within windows of `batch_size * WINDOW_BATCHES`.
WINDOW_BATCHES = 8
# Words per token-encoder call (bounds memory; words of similar length go together).
ENCODER_CHUNK = 1024


def check_state_policy(state: str) -> StatePolicy:
    """`state` if it names a state policy ("warm", "zero", "carry"), else a ValueError."""
    if state not in STATE_POLICIES:
        raise ValueError(f"unknown state policy {state!r}; choose one of {', '.join(STATE_POLICIES)}")
    return state  # type: ignore[return-value]


def check_batch_size(batch_size: int) -> int:
    """`batch_size` if it is a positive int, else a ValueError.

    It bounds memory, not the result: a compute batch holds at most `8 * batch_size` sentences and
    `256 * batch_size` tokens (packed, no padding), and `embed_iter` regroups sentences by length
    within windows of `8 * batch_size`. Under "carry" it is the number of rows (bilm-tf's batch).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def _check_sentence(sent, i: int) -> List[str]:
    if isinstance(sent, str):
        raise TypeError(f"sentence {i} is a str; pass a list of token texts (e.g. text.split())")
    sent = list(sent)
    for tok in sent:
        if not isinstance(tok, str):
            raise TypeError(f"sentence {i} holds a {type(tok).__name__} ({tok!r}); token texts must be str")
    return sent


class BiLMInference:
    """Token texts -> layers `(n_layers + 1, n_tokens, 2P)` per sentence through `bilm`, under a state policy.

    "warm" starts every sentence from the module's warm state, "zero" from zeros: outputs then do
    not depend on neighbours, so sentences are regrouped by length, packed, their token layers
    cached and shared prefixes stepped once. "carry" is bilm-tf's stateful mode: row i of a call
    starts where row i of the previous call ended (exact parity: rows as given, no cache).
    """

    def __init__(self, bilm: BiLM, state: str = "warm", cache_size: int = 50_000):
        self.bilm = bilm
        self._state_policy = check_state_policy(state)
        self.token_cache = TokenLayerCache(cache_size, bilm.options.projection_dim)
        self._carried: Optional[LSTMState] = None
        self._after_boundary: dict = {}
        self._fingerprint: Optional[str] = None
        self._derived_from = (bilm.weights_key(), bilm.warm_key)

    # ------------------------------------------------------------------ state
    @property
    def state_policy(self) -> StatePolicy:
        return self._state_policy

    @state_policy.setter
    def state_policy(self, state: str) -> None:
        self._state_policy = check_state_policy(state)
        self._carried = None

    def reset_state(self) -> None:
        """Forget the carried state ("carry" policy): the next call starts from zeros."""
        self._carried = None

    def clear(self) -> None:
        """Drop everything derived from the weights, and the carried state."""
        self.token_cache.clear()
        self._carried = None
        self._after_boundary = {}
        self._fingerprint = None

    def _follow_weights(self) -> None:
        """Drop what was derived from other weights (or another device or dtype), or another warm state."""
        weights, warm = self.bilm.weights_key(), self.bilm.warm_key
        if weights != self._derived_from[0]:
            self.clear()
        elif warm != self._derived_from[1]:
            self._after_boundary = {}
            self._fingerprint = None
        self._derived_from = (weights, warm)

    def fingerprint(self) -> str:
        """sha256 over the options and every parameter and buffer: identifies the model's outputs."""
        self._follow_weights()
        if self._fingerprint is None:
            h = hashlib.sha256(repr(sorted(self.bilm.options.sizes().items())).encode())
            for name, t in self.bilm.state_dict().items():
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def initial_state(self, batch: int, policy: Optional[str] = None) -> LSTMState:
        """The start state of a batch of `batch` rows under `policy` (default: this one's):
        `h (n_layers, 2, batch, P)`, `c (n_layers, 2, batch, D)`."""
        self._follow_weights()
        policy = check_state_policy(policy or self._state_policy)
        bilm = self.bilm
        if policy == "warm":
            return bilm.warm_state(batch)
        if policy == "carry" and self._carried is not None:
            h, c = self._carried
            zero = bilm.lstm.zero_state(batch, bilm.device, h.dtype)
            n = min(batch, h.shape[2])
            zero.h[:, :, :n] = h[:, :, :n]
            zero.c[:, :, :n] = c[:, :, :n]
            return zero
        return bilm.lstm.zero_state(batch, bilm.device, bilm.warm_h.dtype)

    def forward(self, char_ids: Tensor, mask: Optional[Tensor] = None) -> BiLMOutput:
        """`BiLM.forward` (char_ids `(B, T, max_chars)`, mask `(B, T)`) from the policy's start state;
        under "carry" the final state is kept for the next call (rows beyond a smaller batch keep
        theirs, AllenNLP's semantics)."""
        carry = self._state_policy == "carry"
        out = self.bilm.forward(char_ids, mask, self.initial_state(char_ids.shape[0]), return_state=carry)
        if carry:
            self._carried = self._merge_carried(out.lstm_state)
        return out

    def _merge_carried(self, lstm_state: LSTMState) -> LSTMState:
        old = self._carried
        if old is None or old.h.shape[2] <= lstm_state.h.shape[2]:
            return LSTMState(lstm_state.h.clone(), lstm_state.c.clone())
        h, c = old.h.clone(), old.c.clone()
        n = lstm_state.h.shape[2]
        h[:, :, :n] = lstm_state.h
        c[:, :, :n] = lstm_state.c
        return LSTMState(h, c)

    # ------------------------------------------------------------------ token texts
    def _encode_words(self, words: List[str]) -> Tensor:
        """Token texts -> token layer `(n, P)`; words grouped by length so short words convolve less."""
        encoder, options, device = self.bilm.token_encoder, self.bilm.options, self.bilm.device
        if not words:
            return encoder.w_proj.new_zeros(0, options.projection_dim)
        order = sorted(range(len(words)), key=lambda i: len(words[i]))
        out = encoder.w_proj.new_empty(len(words), options.projection_dim)
        for start in range(0, len(words), ENCODER_CHUNK):
            chunk = order[start : start + ENCODER_CHUNK]
            ids = torch.from_numpy(words_char_ids([words[i] for i in chunk], options.max_characters_per_token))
            out[torch.tensor(chunk, device=device)] = encoder(ids.to(device))
        return out

    def _token_layer_of(self, words: List[str]) -> Tensor:
        """Distinct token texts -> `(n, P)`, through the token cache."""
        return self.token_cache.lookup(words, self._encode_words)

    def _boundary_step(self, policy: str) -> LSTMState:
        """The state after the first step of each direction (over `<S>` forward, over `</S>`
        backward): under a fixed start state it is the same for every sentence, so it is computed
        once per policy. Batch size 1."""
        if policy not in self._after_boundary:
            x = self._token_layer_of([BOS_TOKEN, EOS_TOKEN])  # (2, P)
            first = torch.zeros(1, dtype=torch.long, device=self.bilm.device)
            _, lstm_state = self.bilm.lstm.run_directions(x.view(2, 1, 1, -1), self.initial_state(1, policy), first)
            self._after_boundary[policy] = lstm_state
        return self._after_boundary[policy]

    def _run_packed(self, sentences: Sequence[Sequence[str]]) -> List[Tensor]:
        """Non-empty sentences -> per sentence, layers `(n_layers + 1, n, 2P)` of its real tokens,
        through the packed recurrence from the state after the boundary steps. That state is the
        same for every sentence, so each direction steps each distinct prefix (in its reading order)
        once: shared first words forward, shared last words backward, repeated sentences."""
        device = self.bilm.device
        lengths = np.array([len(s) for s in sentences])
        words, index = word_index(sentences)  # index (B, T)
        trees, nodes = direction_trees(index, lengths, device)
        real = nodes[0] >= 0  # (B, T)
        # sentence-major (sentences one after another, tokens in order) -> node of each direction
        to_forward, to_backward = (torch.from_numpy(n[real]).to(device) for n in nodes)
        vectors = self._token_layer_of(words)  # (U, P)
        start = self._boundary_step(self._state_policy)
        B = len(sentences)
        init = LSTMState(start.h.expand(-1, -1, B, -1), start.c.expand(-1, -1, B, -1))
        outputs = self.bilm.lstm.run_packed(vectors, trees, init)
        token = vectors[torch.from_numpy(index[real]).to(device)]  # (N, P) sentence-major
        layers = torch.stack([torch.cat([token, token], dim=-1)]
                             + [torch.cat([out[0][to_forward], out[1][to_backward]], dim=-1) for out in outputs])
        return list(layers.split(lengths.tolist(), dim=1))

    def _run_carry(self, sentences: Sequence[Sequence[str]]) -> Tensor:
        """"carry": rows as given, boundaries included -> layers `(n_layers + 1, B, T + 2, 2P)`."""
        device = self.bilm.device
        lengths = torch.tensor([len(s) + 2 for s in sentences], device=device)
        mask = torch.arange(int(lengths.max()), device=device).unsqueeze(0) < lengths.unsqueeze(1)
        ids = torch.from_numpy(batch_char_ids(sentences, self.bilm.options.max_characters_per_token))
        return self.forward(ids.to(device), mask).layers

    def _empty(self, as_tensor: bool):
        shape = (self.bilm.num_output_layers, 0, self.bilm.output_dim)
        return torch.zeros(shape, device=self.bilm.device) if as_tensor else np.zeros(shape, dtype=np.float32)

    @staticmethod
    def _convert(layers: Tensor, as_tensor: bool):
        return layers.clone() if as_tensor else layers.float().cpu().numpy().copy()

    def _embed_window(self, sentences: List[List[str]], batch_size: int, as_tensor: bool) -> list:
        results: list = [None] * len(sentences)
        for batch in batches_by_length(sentences, batch_size):
            outputs = self._run_packed([sentences[i] for i in batch])
            for i, layers in zip(batch, outputs):
                results[i] = self._convert(layers, as_tensor)
        return [self._empty(as_tensor) if r is None else r for r in results]

    def _embed_carry(self, sentences: List[List[str]], as_tensor: bool) -> list:
        layers = self._run_carry(sentences)
        return [self._convert(layers[:, row, 1 : len(s) + 1], as_tensor) for row, s in enumerate(sentences)]

    def _check_eval(self) -> None:
        if self.bilm.training:
            raise RuntimeError("embed needs eval mode: call bilm.eval() first")

    def embed_iter(self, sentences: Iterable[Sequence[str]], batch_size: int = 64,
                   as_tensor: bool = False) -> Iterator[Union[np.ndarray, Tensor]]:
        """See `BiLM.embed_iter`."""
        check_batch_size(batch_size)
        carry = self._state_policy == "carry"
        size = batch_size if carry else batch_size * WINDOW_BATCHES
        it = iter(sentences)
        count = 0
        while True:
            window = [_check_sentence(s, count + k) for k, s in enumerate(islice(it, size))]
            if not window:
                return
            count += len(window)
            self._check_eval()
            self._follow_weights()
            with torch.inference_mode():  # not across the yields: the caller's code runs in its own mode
                if carry:
                    arrays = self._embed_carry(window, as_tensor)
                else:
                    arrays = self._embed_window(window, batch_size, as_tensor)
            yield from arrays

    def embed(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> List[np.ndarray]:
        """See `BiLM.embed`."""
        sentences = [_check_sentence(s, i) for i, s in enumerate(sentences)]
        if self._state_policy == "carry" or not sentences:
            return list(self.embed_iter(sentences, batch_size))
        check_batch_size(batch_size)
        self._check_eval()
        self._follow_weights()
        with torch.inference_mode():
            return self._embed_window(sentences, batch_size, as_tensor=False)
