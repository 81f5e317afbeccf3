"""Token texts -> ELMo layers: a `BiLM` network run under a state policy, with its caches.

`ElmoEmbedder` is what `load_bilm` returns: a facade over the network (`.network`), its
`StatePolicy`, the packed runner with its caches and precision copies (`runner.py`) and the state
carried between calls. What is derived is dropped when `BiLM.state_key()` changes (new weights, a
warm state recomputed, another device or dtype).
"""

from __future__ import annotations

import warnings
from itertools import islice
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ElmoConfigError
from .cache import TokenLayerCache
from .lstm import LSTMState
from .model import BiLM, BiLMOutput
from .options import BiLMOptions
from .policy import StatePolicy, carry_on
from .precision import Precision
from .runner import (
    WINDOW_BATCHES,
    PackedRunner,
    check_batch_size,
    check_sentence,
    long_sentence,
    split_by_sentence,
)


class ElmoEmbedder(nn.Module):
    """Token texts -> layers `(n_layers + 1, n_tokens, 2P)` per sentence, under `state_policy`:
    "warm" (the network's warm state) or "zero" start each sentence alone, so sentences are
    regrouped, packed and their token layers cached; "carry" is bilm-tf's stateful mode: row i of a
    call starts where row i of the previous call ended (rows and batches as given, no cache)."""

    def __init__(
        self,
        network: BiLM,
        state: Union[StatePolicy, str] = "warm",
        cache_size: int = 50_000,
        precision: Precision = "float32",
        source: str = "the biLM's weights",
    ):
        super().__init__()
        self.network = network
        self.source = source  # what errors about the weights name (their file, if read from one)
        self._policy = StatePolicy.parse(state)
        self.runner = PackedRunner(network, cache_size, source)
        self._carried: Optional[LSTMState] = None
        self._fingerprint: Optional[str] = None
        self._derived_from = network.state_key()
        self.precision = precision

    @property
    def bilm(self) -> BiLM:
        """Deprecated name of `network`."""
        warnings.warn(
            "ElmoEmbedder.bilm is deprecated; use ElmoEmbedder.network",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.network

    @property
    def options(self) -> BiLMOptions:
        return self.network.options

    @property
    def num_output_layers(self) -> int:
        """`n_layers + 1`: the token layer and each LSTM layer."""
        return self.network.num_output_layers

    @property
    def output_dim(self) -> int:
        """`2 * projection_dim`, the width of every output layer."""
        return self.network.output_dim

    @property
    def device(self) -> torch.device:
        return self.network.device

    @property
    def token_cache(self) -> TokenLayerCache:
        """The token layers of the words seen (not used under "carry")."""
        return self.runner.token_cache

    @property
    def state_policy(self) -> StatePolicy:
        """The `StatePolicy` (equal to its name, "warm", "zero" or "carry"); set it to either."""
        return self._policy

    @state_policy.setter
    def state_policy(self, state: Union[StatePolicy, str]) -> None:
        """Setting "carry" starts the carried state afresh (an `embed_iter` keeps its policy)."""
        self._policy = StatePolicy.parse(state)
        if self._policy.carries:
            self._carried = None

    @property
    def precision(self) -> str:
        """The precision the matrix products run in ("float32", "bfloat16" or "int8"): the one set,
        resolved, except under the "carry" policy, which runs float32. Set it to one of those or
        "auto" (`precision.choose_auto`); the warm and zero policies run it."""
        return self.runner.runs_in(self._policy)[0]

    @precision.setter
    def precision(self, precision: Precision) -> None:
        self._follow_weights()  # first: the copies made now are then those of these weights
        self.runner.set_precision(precision)  # weights that overflow in it are refused here

    @property
    def precision_reason(self) -> str:
        """Why `precision` is what it is, in one line ("auto: ..." names the kind of host)."""
        return self.runner.runs_in(self._policy)[1]

    def reset_state(self) -> None:
        """Forget the carried state ("carry" policy): the next call starts from zeros."""
        self._carried = None

    def _follow_weights(self) -> None:
        """Drop what was derived from other weights, another warm state, device or dtype."""
        key = self.network.state_key()
        if key != self._derived_from:
            self.runner.clear()
            self._carried = None
            self._fingerprint = None
            self._derived_from = key

    def fingerprint(self) -> str:
        """`BiLM.fingerprint()` of the weights as they are (kept until they change)."""
        self._follow_weights()
        if self._fingerprint is None:
            self._fingerprint = self.network.fingerprint()
        return self._fingerprint

    def initial_state(self, batch: int, policy: Union[StatePolicy, str, None] = None) -> LSTMState:
        """The start state of `batch` rows under `policy` (default: this one's):
        `h (n_layers, 2, batch, P)`, `c (n_layers, 2, batch, D)`."""
        policy = StatePolicy.parse(policy or self._policy)
        if not policy.warm_start:
            self._follow_weights()
        return policy.start_state(self.network, batch, self._carried)

    def forward(self, char_ids: Tensor, mask: Optional[Tensor] = None, policy=None) -> BiLMOutput:
        """`BiLM.forward` (char_ids `(B, T, max_chars)`, mask `(B, T)`) from the start state of
        `policy` (default: this one's); under "carry" the final state is kept for the next call
        (rows beyond a smaller batch keep theirs, AllenNLP's semantics)."""
        policy = StatePolicy.parse(policy or self._policy)
        start = self.initial_state(char_ids.shape[0], policy)
        out = self.network(char_ids, mask, start, return_state=policy.carries)
        if policy.carries:
            self._carried = carry_on(self._carried, out.lstm_state)
        return out

    def _embed_carry(self, sentences: List[List[str]], as_tensor: bool, first: int) -> list:
        """ "carry": rows as given, boundaries included, the real tokens' layers checked (`first`:
        the first sentence's index in the caller's input)."""
        ids, mask, real = self.runner.padded(sentences)
        layers = self.forward(ids, mask, StatePolicy.CARRY).layers[:, real]  # (L + 1, N, 2P)
        lengths = [len(s) for s in sentences]
        self.runner.check_output(layers, lengths, range(first, first + len(sentences)))
        return split_by_sentence(layers, lengths, as_tensor)

    def _ready(self) -> None:
        if self.network.training:
            raise RuntimeError("embed needs eval mode: call .eval() first")
        self._follow_weights()

    def embed_long(self, sentence: Sequence[str], batch_size: int = 64) -> Iterator[np.ndarray]:
        """One sentence, however long, in consecutive pieces of at most `256 * batch_size` tokens:
        float32 `(n_layers + 1, w, 2P)` each, together what `embed([sentence])` gives (the
        recurrence is carried across pieces), in memory bounded by `batch_size`. Not under "carry"
        (ElmoConfigError)."""
        if not self._policy.allows_pieces:
            raise ElmoConfigError(
                f"embed_long needs a deterministic state policy (warm or zero), not {self._policy}"
            )
        sentence = check_sentence(sentence, 0)
        limit = long_sentence(check_batch_size(batch_size))
        self._ready()
        pieces = self.runner.in_windows(sentence, limit, self._policy)
        while True:
            with torch.inference_mode():  # not across the yields
                layers = next(pieces, None)
                if layers is None:
                    return
                (array,) = split_by_sentence(layers, [layers.shape[1]], as_tensor=False)
            yield array

    def embed_iter(
        self, sentences: Iterable[Sequence[str]], batch_size: int = 64, as_tensor: bool = False
    ) -> Iterator[Union[np.ndarray, Tensor]]:
        """Lazily embed a stream of token lists, in input order: one array per sentence,
        `(n_layers + 1, n_tokens, 2 * projection_dim)` float32 (numpy, or torch on the model's
        device with `as_tensor=True`). `batch_size`: see `check_batch_size`. Raises TypeError for a
        sentence that is not a list of str."""
        check_batch_size(batch_size)
        policy = self._policy  # the policy when the iteration began, whatever is set meanwhile
        regroup = policy.allows_regrouping
        size = batch_size * WINDOW_BATCHES if regroup else batch_size
        it = iter(sentences)
        count = 0
        while True:
            window = [check_sentence(s, count + k) for k, s in enumerate(islice(it, size))]
            if not window:
                return
            count += len(window)
            self._ready()
            # not across the yields: the caller's code runs in its own mode
            with torch.inference_mode():
                if regroup:
                    arrays = self.runner.embed(
                        window, policy, batch_size, as_tensor, count - len(window)
                    )
                else:
                    arrays = self._embed_carry(window, as_tensor, count - len(window))
            # tensors copied out of inference mode: the caller may train on them or edit them
            yield from (a.clone() for a in arrays) if as_tensor else arrays

    def embed(self, sentences: Iterable[Sequence[str]], batch_size: int = 64) -> List[np.ndarray]:
        """Embed token lists: one float32 array `(n_layers + 1, n_tokens, 2 * projection_dim)` each;
        sentence boundaries removed, layer 0 the token layer written twice, `[x; x]`."""
        sentences = [check_sentence(s, i) for i, s in enumerate(sentences)]
        if not self._policy.allows_regrouping or not sentences:
            return list(self.embed_iter(sentences, batch_size))
        check_batch_size(batch_size)
        self._ready()
        with torch.inference_mode():
            return self.runner.embed(sentences, self._policy, batch_size, as_tensor=False)
