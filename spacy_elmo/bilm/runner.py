"""The packed runner: token texts -> layers through a `BiLM` from a fixed start state (the "warm"
and "zero" policies), the way `ElmoEmbedder` computes them.

Sentences are regrouped by length into compute batches; each batch's distinct words go through the
token encoder once (and the token-layer cache), the boundary steps are computed once per start
state, and each direction steps each distinct prefix once (`BiLM.run_packed`). A sentence longer
than `long_sentence(batch_size)` tokens is computed in consecutive windows, the recurrence carried
across them. Also here: the checks of what `embed` is given.
"""

from __future__ import annotations

import logging
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..errors import ElmoConfigError
from .cache import TokenLayerCache
from .finite import NonFiniteError, check_finite
from .lstm import LSTMState
from .model import BiLM
from .policy import StatePolicy
from .precision import PrecisionCopies, choose_auto, resolve_precision
from .schedule import TOKENS_PER_BATCH, batches_by_length, direction_trees, word_index

logger = logging.getLogger("spacy_elmo")

# `embed_iter` regroups sentences by length within windows of `batch_size * WINDOW_BATCHES`.
WINDOW_BATCHES = 8
# The largest batch_size: a memory bound far beyond any memory, kept within what slicing takes
MAX_BATCH_SIZE = 1 << 24
# Words per token-encoder call (bounds memory; words of similar length go together).
ENCODER_CHUNK = 1024
# Rows of the token-layer cache: far more distinct words than a corpus has (the 1B Word Benchmark:
# 0.8M), and at most 8 GiB at the largest published width (512).
MAX_CACHE_SIZE = 1 << 22


def check_batch_size(batch_size: int) -> int:
    """`batch_size` if it is a positive int, else ElmoConfigError.

    A memory bound, not a setting of the result: a compute batch holds at most `8 * batch_size`
    sentences and `256 * batch_size` tokens (packed, no padding), and `embed_iter` regroups
    sentences by length within windows of `8 * batch_size`. Under "carry" it is the number of rows
    (bilm-tf's batch).
    """
    if isinstance(batch_size, np.integer):
        batch_size = int(batch_size)
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= MAX_BATCH_SIZE
    ):
        raise ElmoConfigError(
            f"batch_size must be an integer from 1 to {MAX_BATCH_SIZE:,}, got {batch_size!r}"
        )
    return batch_size


def check_cache_size(cache_size: int) -> int:
    """`cache_size` (rows of the token-layer cache) if it is an int from 0 (no cache) to
    MAX_CACHE_SIZE, else ElmoConfigError."""
    if (
        isinstance(cache_size, bool)
        or not isinstance(cache_size, int)
        or not 0 <= cache_size <= MAX_CACHE_SIZE
    ):
        raise ElmoConfigError(
            f"the token cache size (cache_size, or the component's token_cache_size) must be an "
            f"integer from 0 (no cache) to {MAX_CACHE_SIZE:,}, "
            f"got {cache_size!r}"
        )
    return cache_size


def check_sentence(sent, i: int) -> List[str]:
    """Sentence `i` of the input as a list of token texts, else TypeError."""
    if isinstance(sent, str):
        raise TypeError(f"sentence {i} is a str; pass a list of token texts (e.g. text.split())")
    try:
        sent = list(sent)
    except TypeError:
        raise TypeError(
            f"sentence {i} is a {type(sent).__name__} ({sent!r}); pass a list of token texts"
        ) from None
    for tok in sent:
        if not isinstance(tok, str):
            raise TypeError(
                f"sentence {i} holds a {type(tok).__name__} ({tok!r}); token texts must be str"
            )
    return sent


def long_sentence(batch_size: int) -> int:
    """Sentences longer than this many tokens are computed in windows of this size
    (`embed_long`)."""
    return batch_size * TOKENS_PER_BATCH


def split_by_sentence(layers: Tensor, lengths: Sequence[int], as_tensor: bool) -> list:
    """Layers `(n_layers + 1, sum(lengths), 2P)` of sentences one after another -> what
    `embed_iter` yields for each: a torch view, or a float32 numpy copy. The numpy copies leave
    the device together (one wait for a GPU per batch, not one per sentence)."""
    if as_tensor:  # views, which the caller copies (`ElmoEmbedder.embed_iter`)
        return list(layers.split(list(lengths), dim=1))
    host = layers.float().cpu().numpy()
    return [part.copy() for part in np.split(host, np.cumsum(lengths)[:-1], axis=1)]


class PackedRunner:
    """Runs `network` on token texts from a fixed start state, with the token-layer cache
    (`token_cache`), the state after the boundary steps (per policy) and the weights in the chosen
    precision (`copies`), all derived from the weights: `clear()` drops them."""

    def __init__(self, network: BiLM, cache_size: int, source: str):
        self.network = network
        self.source = source  # what errors about the weights name
        self.token_cache = TokenLayerCache(
            check_cache_size(cache_size), network.options.projection_dim
        )
        self.copies = PrecisionCopies(network, source)
        self.precision_reason = "as asked"
        self._after_boundary: dict = {}

    def clear(self) -> None:
        """Forget what depends on the weights and the precision: token layers, boundary states,
        precision copies."""
        self.token_cache.clear()
        self._after_boundary = {}
        self.copies.clear()

    def set_precision(self, precision: str) -> None:
        """Resolve `precision` ("auto" included) for the network's device, forget what was derived,
        make the copies."""
        if precision == "auto":
            resolved, reason = choose_auto(self.network.device)
            logger.info("precision auto: %s (%s)", resolved, reason)
            reason = f"auto: {reason}"
        else:  # warns where it was set
            resolved = resolve_precision(precision, self.network.device, stacklevel=4)
            reason = "as asked" if resolved == precision else "bfloat16 not native"
        self.clear()
        self.copies.make(resolved)  # refused: the precision before it stays
        self.precision_reason = reason

    def runs_in(self, policy: StatePolicy) -> Tuple[str, str]:
        """The precision the products run in under `policy`, and why: "carry" runs float32."""
        chosen = self.copies.precision
        if policy is StatePolicy.CARRY and chosen != "float32":
            return (
                "float32",
                f"the carry policy runs float32 ({chosen} is for the warm and zero ones)",
            )
        return chosen, self.precision_reason

    def encode_words(self, words: List[Union[str, bytes]]) -> Tensor:
        """Token keys (`network.token_keys`) -> token layer `(n, P)`; words grouped by length so
        short words convolve less."""
        network, encoder = self.network, self.copies.token_encoder()
        device = network.device
        out = torch.empty(
            len(words), network.options.projection_dim, dtype=network.dtype, device=device
        )
        if not words:
            return out
        order = sorted(range(len(words)), key=lambda i: len(words[i]))
        for start in range(0, len(words), ENCODER_CHUNK):
            chunk = order[start : start + ENCODER_CHUNK]
            ids = network.key_ids([words[i] for i in chunk])
            vectors = encoder(torch.from_numpy(ids).to(device))
            out[torch.tensor(chunk, device=device)] = vectors.to(out.dtype)
        return out

    def token_layers(self, words: List[Union[str, bytes]]) -> Tensor:
        """Distinct token keys (as `network.token_keys` gives them) -> `(n, P)`, through the token
        cache."""
        return self.token_cache.lookup(words, self.encode_words)

    def boundary_state(self, policy: StatePolicy) -> LSTMState:
        """The state after the first step of each direction (over `<S>` forward, over `</S>`
        backward, or the model's own boundary tokens): under a fixed start state the same for every
        sentence, so computed once per policy. Batch 1. Kept where `clear()` came meanwhile (from
        another thread) in the states it dropped only. NonFiniteError where the start state or this
        one holds NaN or infinities, which no output shows and int8's grid would make finite."""
        states = self._after_boundary
        if policy not in states:
            x = self.token_layers(list(self.network.boundary_tokens))  # (2, P)
            start = policy.start_state(self.network, 1)
            self.check_state(start, f"the {policy} start state")
            after = self.network.step_boundaries(x, start)
            self.check_state(after, "the LSTM state after the sentence boundaries")
            states[policy] = after
        return states[policy]

    def check_state(self, state: LSTMState, name: str) -> None:
        """NonFiniteError naming the weights and `name` where `state` holds NaN or infinities."""
        for part in state:
            check_finite(part, self.source, name)

    def run(
        self,
        sentences: Sequence[Sequence[str]],
        policy: StatePolicy,
        init: Optional[LSTMState] = None,
        directions: Sequence[int] = (0, 1),
        ids: Optional[Sequence[int]] = None,
    ) -> Tuple[Tensor, LSTMState]:
        """Non-empty sentences -> layers `(n_layers + 1, sum(lengths), 2P)` of their real tokens,
        sentences one after another,
        through the packed recurrence from the state after the boundary steps under `policy`. That
        state is the same for every sentence, so each direction steps each distinct prefix (in its
        reading order) once. `init` `(n_layers, 2, 1, ·)`: another start state (one sentence: a
        window of a long one, see `in_windows`), whose final state is returned too
        (`BiLM.run_packed`). `ids`: the sentences' indices in the caller's input; with them, the
        layers are checked (`check_output`)."""
        device = self.network.device
        lengths = np.array([len(s) for s in sentences])
        # keyed by what the ids are made from: "The" and "the" of a lowercasing model are one word
        # (one cache row, one prefix), never two that could differ; a long token by its cut
        words, index = word_index(self.network.token_keys(sentences))  # index (B, T)
        trees, nodes = direction_trees(index, lengths, device)
        real = nodes[0] >= 0  # (B, T)
        # sentence-major (sentences one after another, tokens in order) -> node of each direction
        to_forward, to_backward = (torch.from_numpy(n[real]).to(device) for n in nodes)
        vectors = self.token_layers(words)  # (U, P)
        start = self.boundary_state(policy) if init is None else init
        B = len(sentences)
        init = LSTMState(start.h.expand(-1, -1, B, -1), start.c.expand(-1, -1, B, -1))
        products = self.copies.lstm_products()
        outputs, final = self.network.run_packed(vectors, trees, init, directions, products)
        token = vectors[torch.from_numpy(index[real]).to(device)]  # (N, P) sentence-major
        layers = torch.stack(
            [torch.cat([token, token], dim=-1)]
            + [torch.cat([out[0][to_forward], out[1][to_backward]], dim=-1) for out in outputs]
        )
        if ids is not None:
            self.check_output(layers, lengths.tolist(), ids)
        return layers, final

    def check_output(self, layers: Tensor, lengths: Sequence[int], ids: Sequence[int]) -> None:
        """NonFiniteError naming the weights and the first sentence (of `ids`) whose vectors hold
        NaN or infinite values; `layers` `(n_layers + 1, sum(lengths), 2P)`, sentences one after
        another. Once per batch."""
        check_finite(
            layers, self.source, f"the vectors computed in {self.copies.precision}", lengths, ids
        )

    def padded(self, sentences: Sequence[Sequence[str]]) -> Tuple[Tensor, Tensor, Tensor]:
        """Sentences as one padded batch, boundaries included, for `forward` (the "carry" path): ids
        `(B, T + 2, width)`, mask `(B, T + 2)`, and `real` `(B, T + 2)`, True at the real tokens."""
        device = self.network.device
        lengths = torch.tensor([len(s) + 2 for s in sentences], device=device)
        positions = torch.arange(int(lengths.max()), device=device).unsqueeze(0)
        real = (positions > 0) & (positions < lengths.unsqueeze(1) - 1)
        ids = torch.from_numpy(self.network.char_ids(sentences)).to(device)
        return ids, positions < lengths.unsqueeze(1), real

    def in_windows(
        self, sentence: List[str], window: int, policy: StatePolicy, index: int = 0
    ) -> Iterator[Tensor]:
        """One sentence in consecutive windows of `window` tokens -> layers `(n_layers + 1, w, 2P)`
        per window, the recurrence carried across windows (each direction reads the whole sentence):
        memory bounded by `window`, not by the sentence. The backward states entering each window
        are found first (a backward pass from the right end), then each window is computed from both
        carried states. `index`: the sentence's in the caller's input (what an error names)."""
        bounds = [(s, min(s + window, len(sentence))) for s in range(0, len(sentence), window)]
        start = self.boundary_state(policy)
        entering = [start] * len(bounds)  # the backward direction's state entering each window
        for k in range(len(bounds) - 1, 0, -1):
            a, b = bounds[k]
            _, final = self.run([sentence[a:b]], policy, entering[k], directions=(1,))
            entering[k - 1] = final
        carried = start
        for (a, b), back in zip(bounds, entering):
            init = LSTMState(
                torch.stack([carried.h[:, 0], back.h[:, 1]], dim=1),
                torch.stack([carried.c[:, 0], back.c[:, 1]], dim=1),
            )
            layers, carried = self.run([sentence[a:b]], policy, init, ids=[index])
            yield layers

    def embed(
        self,
        sentences: List[List[str]],
        policy: StatePolicy,
        batch_size: int,
        as_tensor: bool,
        first: int = 0,
    ) -> list:
        """Sentences -> their layers (see `split_by_sentence`), regrouped by length into batches;
        long ones in windows. `first`: the index of `sentences[0]` in the caller's input (what an
        error names)."""
        results: list = [None] * len(sentences)
        limit = long_sentence(batch_size)
        short = [s if len(s) <= limit else [] for s in sentences]
        # a batch's error names its first bad sentence; batches go longest first, so after one,
        # the batches holding earlier sentences are computed too, for the first of all
        failed: Optional[NonFiniteError] = None
        for batch in batches_by_length(short, batch_size):
            if failed is not None and first + min(batch) > failed.sentence:
                continue
            try:
                layers, _ = self.run(
                    [sentences[i] for i in batch], policy, ids=[first + i for i in batch]
                )
            except NonFiniteError as err:
                if err.sentence is None:
                    raise
                failed = err if failed is None or err.sentence < failed.sentence else failed
                continue
            for i, one in zip(
                batch, split_by_sentence(layers, [len(sentences[i]) for i in batch], as_tensor)
            ):
                results[i] = one
        for i, sentence in enumerate(sentences):
            if len(sentence) > limit and (failed is None or first + i < failed.sentence):
                try:
                    pieces = list(self.in_windows(sentence, limit, policy, first + i))
                except NonFiniteError as err:
                    failed = err
                    break
                (results[i],) = split_by_sentence(
                    torch.cat(pieces, dim=1), [len(sentence)], as_tensor
                )
        if failed is not None:
            raise failed
        return [self.empty(as_tensor) if r is None else r for r in results]

    def empty(self, as_tensor: bool):
        """The layers of an empty sentence, `(n_layers + 1, 0, 2P)`, in the network's dtype as a
        tensor (as a non-empty one's), float32 as an array."""
        shape = (self.network.num_output_layers, 0, self.network.output_dim)
        return (
            torch.zeros(shape, device=self.network.device, dtype=self.network.dtype)
            if as_tensor
            else np.zeros(shape, dtype=np.float32)
        )
