"""The state policy: where each sentence's LSTM state starts, and what inference may do because of
it.

Parsed once where it enters (`StatePolicy.parse`: a config, a command line, a model file);
everything else asks the object. A `str` Enum: `StatePolicy.WARM == "warm"`, it hashes, formats and
serializes as its name.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Literal, Optional, Tuple, Union

from ..errors import ElmoConfigError
from .lstm import LSTMState

if TYPE_CHECKING:
    from .model import BiLM


class StatePolicy(str, Enum):
    """WARM starts every sentence from the network's warm state, ZERO from zeros: a sentence's
    outputs then depend on it alone. CARRY is bilm-tf's stateful mode: row i of a call starts where
    row i of the previous call ended."""

    WARM = "warm"
    ZERO = "zero"
    CARRY = "carry"

    __hash__ = str.__hash__  # a dict keyed by the name finds the member

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, name: Union["StatePolicy", str]) -> "StatePolicy":
        """`name` ("warm", "zero", "carry", or a StatePolicy) as a StatePolicy, else
        ElmoConfigError."""
        try:
            return cls(name)
        except (ValueError, TypeError):
            raise ElmoConfigError(
                f"unknown state policy {name!r}; choose one of {', '.join(STATE_POLICIES)}"
            ) from None

    @property
    def carries(self) -> bool:
        """Whether a call starts where the previous one ended (outputs depend on the rows and calls
        before)."""
        return self is StatePolicy.CARRY

    @property
    def independent(self) -> bool:
        """Whether a sentence's outputs depend on it alone. The one rule: only then may inference
        reuse cached token layers and outputs, regroup sentences (length bucketing, packing,
        processes), resume a run, or compute a long sentence in pieces. CARRY: none of these (exact
        parity with bilm-tf: rows and calls as given)."""
        return not self.carries

    allows_reuse = allows_regrouping = allows_resume = allows_pieces = independent

    @property
    def warm_start(self) -> bool:
        """Whether sentences start from the network's warm state (which must be computed, or loaded,
        first)."""
        return self is StatePolicy.WARM

    def start_state(
        self, network: "BiLM", batch: int, carried: Optional[LSTMState] = None
    ) -> LSTMState:
        """The start state of `batch` rows, `h (n_layers, 2, batch, P)`, `c (n_layers, 2, batch,
        D)`: the warm state (WARM), zeros (ZERO), or under CARRY the `carried` state's rows (zeros
        beyond them, and with none)."""
        if self.warm_start:
            return network.warm_state(batch)
        if self.carries and carried is not None:
            h, c = carried
            zero = network.zero_state(batch, h.dtype)
            n = min(batch, h.shape[2])
            zero.h[:, :, :n] = h[:, :, :n]
            zero.c[:, :, :n] = c[:, :, :n]
            return zero
        return network.zero_state(batch)


def carry_on(carried: Optional[LSTMState], final: LSTMState) -> LSTMState:
    """The state carried after a call whose rows ended in `final`: those rows' states; rows beyond a
    smaller batch keep theirs from `carried` (AllenNLP's semantics)."""
    if carried is None or carried.h.shape[2] <= final.h.shape[2]:
        return LSTMState(final.h.clone(), final.c.clone())
    h, c = carried.h.clone(), carried.c.clone()
    n = final.h.shape[2]
    h[:, :, :n] = final.h
    c[:, :, :n] = final.c
    return LSTMState(h, c)


# The names, for annotations of what accepts a name (a spaCy config: validated against these) and
# for messages.
StatePolicyName = Literal["warm", "zero", "carry"]
STATE_POLICIES: Tuple[str, ...] = tuple(p.value for p in StatePolicy)


def check_state_policy(state: Union[StatePolicy, str]) -> StatePolicy:
    """`StatePolicy.parse(state)` (the name it has had since the policy was a string)."""
    return StatePolicy.parse(state)
