"""Token texts -> ELMo layers: a `BiLM` network run under a state policy, with its caches.

`ElmoEmbedder` is what `load_bilm` returns. It owns the network (`.bilm`) and everything inference
derives from it: the token-layer cache, the state after the boundary steps, the fingerprint and the
state carried between calls. What is derived is dropped when `BiLM.state_key()` changes (new weights,
a warm state recomputed, another device or dtype).
"""
from __future__ import annotations

import copy
import hashlib
from contextlib import contextmanager
from itertools import islice
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ElmoConfigError
from .cache import TokenLayerCache
from .chars import CharTable
from .encoder import TokenEncoder
from .finite import NonFiniteError, check_finite
from .lstm import LSTMState
from .model import BiLM, BiLMOutput
from .options import BiLMOptions, StatePolicy, check_state_policy
from .precision import Precision, resolve_precision
from .schedule import TOKENS_PER_BATCH, batches_by_length, direction_trees, word_index

# `embed_iter` regroups sentences by length within windows of `batch_size * WINDOW_BATCHES`.
WINDOW_BATCHES = 8
# Words per token-encoder call (bounds memory; words of similar length go together).
ENCODER_CHUNK = 1024
# Rows of the token-layer cache: far more distinct words than a corpus has (the 1B Word Benchmark: 0.8M), and at
# most 8 GiB at the largest published width (512).
MAX_CACHE_SIZE = 1 << 22


def check_batch_size(batch_size: int) -> int:
    """`batch_size` if it is a positive int, else ElmoConfigError.

    A memory bound, not a setting of the result: a compute batch holds at most `8 * batch_size`
    sentences and `256 * batch_size` tokens (packed, no padding), and `embed_iter` regroups sentences
    by length within windows of `8 * batch_size`. Under "carry" it is the number of rows (bilm-tf's batch).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ElmoConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def check_cache_size(cache_size: int) -> int:
    """`cache_size` (rows of the token-layer cache) if it is an int from 0 (no cache) to MAX_CACHE_SIZE, else
    ElmoConfigError."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or not 0 <= cache_size <= MAX_CACHE_SIZE:
        raise ElmoConfigError(f"token_cache_size must be an integer from 0 (no cache) to {MAX_CACHE_SIZE:,}, "
                              f"got {cache_size!r}")
    return cache_size


def long_sentence(batch_size: int) -> int:
    """Sentences longer than this many tokens are computed in windows of this size (`embed_long`)."""
    return batch_size * TOKENS_PER_BATCH


def _check_sentence(sent, i: int) -> List[str]:
    if isinstance(sent, str):
        raise TypeError(f"sentence {i} is a str; pass a list of token texts (e.g. text.split())")
    sent = list(sent)
    for tok in sent:
        if not isinstance(tok, str):
            raise TypeError(f"sentence {i} holds a {type(tok).__name__} ({tok!r}); token texts must be str")
    return sent


class ElmoEmbedder(nn.Module):
    """Token texts -> layers `(n_layers + 1, n_tokens, 2P)` per sentence through `bilm`, under `state_policy`.

    "warm" starts every sentence from the network's warm state, "zero" from zeros: outputs then do not
    depend on neighbours, so sentences are regrouped by length, packed, their token layers cached and
    shared prefixes stepped once. "carry" is bilm-tf's stateful mode: row i of a call starts where row i
    of the previous call ended (exact parity: rows and batches as given, no cache).
    """

    def __init__(self, bilm: BiLM, state: StatePolicy = "warm", cache_size: int = 50_000,
                 precision: Precision = "float32", source: str = "the biLM's weights"):
        super().__init__()
        self.bilm = bilm
        self.source = source  # what errors about the weights name (their file, where loaded from one)
        self._state_policy = check_state_policy(state)
        self._precision = "float32"
        self._products: Optional[list] = None  # the LSTM's products in a precision other than float32
        self._bf16_encoder: Optional[TokenEncoder] = None  # the token encoder's bfloat16 copy
        self.token_cache = TokenLayerCache(check_cache_size(cache_size), bilm.options.projection_dim)
        self._carried: Optional[LSTMState] = None
        self._after_boundary: dict = {}
        self.precision = precision
        self._fingerprint: Optional[str] = None
        self._derived_from = bilm.state_key()

    @property
    def options(self) -> BiLMOptions:
        return self.bilm.options

    @property
    def num_output_layers(self) -> int:
        """`n_layers + 1`: the token layer and each LSTM layer."""
        return self.bilm.num_output_layers

    @property
    def output_dim(self) -> int:
        """`2 * projection_dim`, the width of every output layer."""
        return self.bilm.output_dim

    @property
    def device(self) -> torch.device:
        return self.bilm.device

    @property
    def state_policy(self) -> StatePolicy:
        return self._state_policy

    @state_policy.setter
    def state_policy(self, state: str) -> None:
        self._state_policy = check_state_policy(state)
        self._carried = None

    @property
    def precision(self) -> str:
        """The precision of the matrix products (resolved: "float32", "bfloat16" or "int8"); set it to one of those
        or "auto" (see `precision.resolve_precision`). The LSTM's products run in it; the token encoder runs
        bfloat16 under "bfloat16" and float32 otherwise (int8 has no bounded input there). The "carry" policy
        runs float32."""
        return self._precision

    @precision.setter
    def precision(self, precision: Precision) -> None:
        self._precision = resolve_precision(precision, self.device)
        self._drop_derived()
        if self._precision != "float32":  # made now: weights that overflow in this precision are refused here
            self._lstm_products()
            self._token_encoder()

    def _drop_derived(self) -> None:
        """Forget what depends on the weights and the precision: token layers, boundary states, products."""
        self.token_cache.clear()
        self._after_boundary = {}
        self._products = None
        self._bf16_encoder = None

    def _lstm_products(self) -> list:
        """The LSTM's products in this precision (per layer, per direction), made once per weights."""
        if self._precision == "float32":
            return self.bilm.lstm.products()
        if self._products is None:
            with self._naming_weights():
                self._products = self.bilm.lstm.products(self._precision)
        return self._products

    def _token_encoder(self) -> TokenEncoder:
        """The token encoder in this precision: under bfloat16 a bfloat16 copy, made once per weights."""
        if self._precision != "bfloat16":
            return self.bilm.token_encoder
        if self._bf16_encoder is None:
            encoder = copy.deepcopy(self.bilm.token_encoder).to(torch.bfloat16)
            for name, values in encoder.state_dict().items():
                check_finite(values, self.source, f"'token_encoder.{name}' as bfloat16")
            self._bf16_encoder = encoder
        return self._bf16_encoder

    @contextmanager
    def _naming_weights(self) -> Iterator[None]:
        """A NonFiniteError about weights (from a product of this precision) names `source`."""
        try:
            yield
        except NonFiniteError as err:
            raise NonFiniteError(f"{self.source}: {err}", err.sentence) from None

    def __getstate__(self) -> dict:  # derived: made again after unpickling
        return {**super().__getstate__(), "_products": None, "_bf16_encoder": None}

    def reset_state(self) -> None:
        """Forget the carried state ("carry" policy): the next call starts from zeros."""
        self._carried = None

    def _follow_weights(self) -> None:
        """Drop what was derived from other weights, another warm state, device or dtype."""
        key = self.bilm.state_key()
        if key != self._derived_from:
            self._drop_derived()
            self._carried = None
            self._fingerprint = None
            self._derived_from = key

    def fingerprint(self) -> str:
        """sha256 over the options, every parameter and buffer of the network and its character table, if
        any: identifies its outputs."""
        self._follow_weights()
        if self._fingerprint is None:
            h = hashlib.sha256(repr(sorted(self.options.sizes().items())).encode())
            token_ids = self.bilm.token_encoder.token_ids
            if isinstance(token_ids, CharTable):
                h.update(token_ids.digest().encode())
            for name, t in self.bilm.state_dict().items():
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def initial_state(self, batch: int, policy: Optional[str] = None) -> LSTMState:
        """The start state of `batch` rows under `policy` (default: this one's):
        `h (n_layers, 2, batch, P)`, `c (n_layers, 2, batch, D)`."""
        policy = check_state_policy(policy or self._state_policy)
        bilm = self.bilm
        if policy == "warm":
            return bilm.warm_state(batch)
        self._follow_weights()
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
        out = self.bilm(char_ids, mask, self.initial_state(char_ids.shape[0]), return_state=carry)
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

    def _encode_words(self, words: List[str]) -> Tensor:
        """Token texts -> token layer `(n, P)`; words grouped by length so short words convolve less."""
        encoder, options, device = self._token_encoder(), self.options, self.device
        out = self.bilm.token_encoder.w_proj.new_empty(len(words), options.projection_dim)
        if not words:
            return out
        order = sorted(range(len(words)), key=lambda i: len(words[i]))
        for start in range(0, len(words), ENCODER_CHUNK):
            chunk = order[start : start + ENCODER_CHUNK]
            ids = torch.from_numpy(encoder.token_ids.words_ids([words[i] for i in chunk]))
            out[torch.tensor(chunk, device=device)] = encoder(ids.to(device)).to(out.dtype)
        return out

    def _token_layer_of(self, words: List[str]) -> Tensor:
        """Distinct token texts -> `(n, P)`, through the token cache."""
        return self.token_cache.lookup(words, self._encode_words)

    def _boundary_step(self, policy: str) -> LSTMState:
        """The state after the first step of each direction (over `<S>` forward, over `</S>` backward, or the
        boundary tokens of the model's `token_ids`):
        under a fixed start state the same for every sentence, so computed once per policy. Batch 1."""
        if policy not in self._after_boundary:
            x = self._token_layer_of(list(self.bilm.token_encoder.token_ids.boundary))  # (2, P)
            first = torch.zeros(1, dtype=torch.long, device=self.device)
            _, lstm_state = self.bilm.lstm.run_directions(x.view(2, 1, 1, -1), self.initial_state(1, policy), first)
            self._after_boundary[policy] = lstm_state
        return self._after_boundary[policy]

    def _run_packed(self, sentences: Sequence[Sequence[str]], init: Optional[LSTMState] = None,
                    directions: Sequence[int] = (0, 1),
                    ids: Optional[Sequence[int]] = None) -> Tuple[List[Tensor], LSTMState]:
        """Non-empty sentences -> per sentence, layers `(n_layers + 1, n, 2P)` of its real tokens, through
        the packed recurrence from the state after the boundary steps. That state is the same for every
        sentence, so each direction steps each distinct prefix (in its reading order) once. `init`
        `(n_layers, 2, 1, ·)`: another start state (one sentence: a window of a long one, see
        `_embed_in_windows`), whose final state is returned too (`BiLSTMStack.run_packed`). `ids`: the
        sentences' indices in the caller's input; with them, the layers are checked (`_check_output`)."""
        device = self.device
        lengths = np.array([len(s) for s in sentences])
        words, index = word_index(sentences)  # index (B, T)
        trees, nodes = direction_trees(index, lengths, device)
        real = nodes[0] >= 0  # (B, T)
        # sentence-major (sentences one after another, tokens in order) -> node of each direction
        to_forward, to_backward = (torch.from_numpy(n[real]).to(device) for n in nodes)
        vectors = self._token_layer_of(words)  # (U, P)
        start = self._boundary_step(self._state_policy) if init is None else init
        B = len(sentences)
        init = LSTMState(start.h.expand(-1, -1, B, -1), start.c.expand(-1, -1, B, -1))
        try:
            with self._naming_weights():
                outputs, final = self.bilm.lstm.run_packed(vectors, trees, init, directions, self._lstm_products())
        except NonFiniteError as err:  # the first layer's gate inputs (int8): of which sentence?
            if ids is None:
                raise
            gates = torch.cat([self._lstm_products()[0][d].input.weight for d in (0, 1)], dim=1)
            bad = np.flatnonzero(~torch.isfinite(torch.mm(vectors, gates)).all(dim=1).cpu().numpy())
            row = int(np.isin(index, bad).any(axis=1).argmax())
            raise NonFiniteError(f"{err}, for sentence {ids[row]} (counted from 0)", ids[row]) from None
        token = vectors[torch.from_numpy(index[real]).to(device)]  # (N, P) sentence-major
        layers = torch.stack([torch.cat([token, token], dim=-1)]
                             + [torch.cat([out[0][to_forward], out[1][to_backward]], dim=-1) for out in outputs])
        if ids is not None:
            self._check_output(layers, lengths.tolist(), ids)
        return list(layers.split(lengths.tolist(), dim=1)), final

    def _check_output(self, layers: Tensor, lengths: Sequence[int], ids: Sequence[int]) -> None:
        """NonFiniteError naming the weights and the first sentence (of `ids`) whose vectors hold NaN or infinite
        values; `layers` `(n_layers + 1, sum(lengths), 2P)`, sentences one after another. Once per batch."""
        check_finite(layers, self.source, f"the vectors computed in {self._precision}", lengths, ids)

    def _embed_in_windows(self, sentence: List[str], window: int, index: int = 0) -> Iterator[Tensor]:
        """One sentence in consecutive windows of `window` tokens -> layers `(n_layers + 1, w, 2P)` per window,
        the recurrence carried across windows (each direction reads the whole sentence): memory bounded by
        `window`, not by the sentence. The backward states entering each window are found first (a
        backward pass from the right end), then each window is computed from both carried states. `index`:
        the sentence's in the caller's input (what an error names)."""
        bounds = [(s, min(s + window, len(sentence))) for s in range(0, len(sentence), window)]
        start = self._boundary_step(self._state_policy)
        entering = [start] * len(bounds)  # the backward direction's state entering each window
        for k in range(len(bounds) - 1, 0, -1):
            a, b = bounds[k]
            _, final = self._run_packed([sentence[a:b]], entering[k], directions=(1,))
            entering[k - 1] = final
        carried = start
        for (a, b), back in zip(bounds, entering):
            init = LSTMState(torch.stack([carried.h[:, 0], back.h[:, 1]], dim=1),
                             torch.stack([carried.c[:, 0], back.c[:, 1]], dim=1))
            (layers,), carried = self._run_packed([sentence[a:b]], init, ids=[index])
            yield layers

    def _run_carry(self, sentences: Sequence[Sequence[str]], first: int) -> Tensor:
        """"carry": rows as given, boundaries included -> layers `(n_layers + 1, B, T + 2, 2P)`, the real tokens'
        checked (`first`: the first sentence's index in the caller's input)."""
        device = self.device
        lengths = torch.tensor([len(s) + 2 for s in sentences], device=device)
        positions = torch.arange(int(lengths.max()), device=device).unsqueeze(0)
        mask = positions < lengths.unsqueeze(1)
        ids = torch.from_numpy(self.bilm.token_encoder.token_ids.batch_ids(sentences))
        layers = self.forward(ids.to(device), mask).layers
        real = (positions > 0) & (positions < lengths.unsqueeze(1) - 1)  # (B, T + 2), row-major: sentence after sentence
        self._check_output(layers[:, real], [len(s) for s in sentences], range(first, first + len(sentences)))
        return layers

    def _empty(self, as_tensor: bool):
        shape = (self.num_output_layers, 0, self.output_dim)
        return torch.zeros(shape, device=self.device) if as_tensor else np.zeros(shape, dtype=np.float32)

    @staticmethod
    def _convert(layers: Tensor, as_tensor: bool):
        return layers.clone() if as_tensor else layers.float().cpu().numpy().copy()

    def _embed_window(self, sentences: List[List[str]], batch_size: int, as_tensor: bool, first: int = 0) -> list:
        """`first`: the index of `sentences[0]` in the caller's input (what an error names)."""
        results: list = [None] * len(sentences)
        limit = long_sentence(batch_size)
        short = [s if len(s) <= limit else [] for s in sentences]
        for batch in batches_by_length(short, batch_size):
            outputs, _ = self._run_packed([sentences[i] for i in batch], ids=[first + i for i in batch])
            for i, layers in zip(batch, outputs):
                results[i] = self._convert(layers, as_tensor)
        for i, sentence in enumerate(sentences):
            if len(sentence) > limit:
                pieces = self._embed_in_windows(sentence, limit, first + i)
                results[i] = self._convert(torch.cat(list(pieces), dim=1), as_tensor)
        return [self._empty(as_tensor) if r is None else r for r in results]

    def embed_long(self, sentence: Sequence[str], batch_size: int = 64) -> Iterator[np.ndarray]:
        """One sentence, however long, in consecutive pieces of at most `256 * batch_size` tokens: float32
        `(n_layers + 1, w, 2P)` each, together what `embed([sentence])` gives (the recurrence is carried
        across pieces), in memory bounded by `batch_size`. Not under "carry" (ElmoConfigError)."""
        if self._state_policy == "carry":
            raise ElmoConfigError("embed_long needs a deterministic state policy (warm or zero), not carry")
        sentence = _check_sentence(sentence, 0)
        limit = long_sentence(check_batch_size(batch_size))
        self._check_eval()
        self._follow_weights()
        pieces = self._embed_in_windows(sentence, limit)
        while True:
            with torch.inference_mode():  # not across the yields
                layers = next(pieces, None)
                if layers is None:
                    return
                array = self._convert(layers, as_tensor=False)
            yield array

    def _embed_carry(self, sentences: List[List[str]], as_tensor: bool, first: int) -> list:
        layers = self._run_carry(sentences, first)
        return [self._convert(layers[:, row, 1 : len(s) + 1], as_tensor) for row, s in enumerate(sentences)]

    def _check_eval(self) -> None:
        if self.bilm.training:
            raise RuntimeError("embed needs eval mode: call .eval() first")

    def embed_iter(self, sentences: Iterable[Sequence[str]], batch_size: int = 64,
                   as_tensor: bool = False) -> Iterator[Union[np.ndarray, Tensor]]:
        """Lazily embed a stream of token lists, in input order: one array per sentence,
        `(n_layers + 1, n_tokens, 2 * projection_dim)` float32 (numpy, or torch on the model's device
        with `as_tensor=True`). `batch_size`: see `check_batch_size`. Raises TypeError for a sentence
        that is not a list of str."""
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
                    arrays = self._embed_carry(window, as_tensor, count - len(window))
                else:
                    arrays = self._embed_window(window, batch_size, as_tensor, count - len(window))
            yield from arrays

    def embed(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> List[np.ndarray]:
        """Embed token lists: one float32 array `(n_layers + 1, n_tokens, 2 * projection_dim)` each;
        sentence boundaries removed, layer 0 the token layer written twice, `[x; x]`."""
        sentences = [_check_sentence(s, i) for i, s in enumerate(sentences)]
        if self._state_policy == "carry" or not sentences:
            return list(self.embed_iter(sentences, batch_size))
        check_batch_size(batch_size)
        self._check_eval()
        self._follow_weights()
        with torch.inference_mode():
            return self._embed_window(sentences, batch_size, as_tensor=False)
