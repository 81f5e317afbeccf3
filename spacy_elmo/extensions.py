"""The Doc, Token and Span extensions of ELMo (`doc._.elmo`, `doc._.elmo_layers`, `token._.elmo`,
`span._.elmo`, `doc._.elmo_data`): module-level getters (so extensions pickle) over the data of
`doc_data`."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

from .doc_data import elmo_data, row_means, stored_data


def get_doc_elmo(doc: Doc) -> Optional[np.ndarray]:
    """`doc._.elmo`: `(n_tokens, width)`, the fixed mix, in the dtype `elmo` stored (`store`); None
    before `elmo` ran."""
    data = elmo_data(doc)
    return None if data is None else data.mix()


def get_doc_elmo_layers(doc: Doc) -> Optional[np.ndarray]:
    """`doc._.elmo_layers`: float32 `(n_layers + 1, n_tokens, width)`; None where only the mix is
    kept."""
    data = elmo_data(doc)
    if data is None or data.layers is None:
        return None
    return data.layers.astype(np.float32, copy=False)


def fitted_mix(part: Union[Token, Span]) -> Optional[np.ndarray]:
    """The fixed mix `(n_tokens, width)` of the Doc of `part` (a Token or a Span), its rows checked
    for `part`'s tokens only (the whole Doc is realigned where they do not fit); None before `elmo`
    ran."""
    data = stored_data(part.doc)
    if data is None:
        return None
    return (data.fitted(part) or elmo_data(part.doc)).mix()


def get_token_elmo(token: Token) -> Optional[np.ndarray]:
    """`token._.elmo`: `(width,)`, in the stored dtype."""
    mix = fitted_mix(token)
    return None if mix is None else mix[token.i]


def get_span_elmo(span: Span) -> Optional[np.ndarray]:
    """`span._.elmo`: `(width,)` in the stored dtype, the mean over the span's non-whitespace
    tokens (the rule of a merged token; zeros where it has none)."""
    mix = fitted_mix(span)
    return None if mix is None else mean_vector(mix, span.doc, span.start, span.end)


def mean_vector(mix: np.ndarray, doc: Doc, start: int, end: int) -> np.ndarray:
    """The mean `(width,)` of `mix`'s rows of the non-whitespace tokens in `doc[start:end]`, in its
    dtype (summed in float64)."""
    rows = [i for i in range(start, end) if not doc[i].is_space]
    return row_means(mix, [rows])[0]


def install_extensions() -> None:
    """Register the extensions (idempotent; keeps what is already registered)."""
    if not Doc.has_extension("elmo_data"):
        Doc.set_extension("elmo_data", default=None)
    for cls, name, getter in (
        (Doc, "elmo", get_doc_elmo),
        (Doc, "elmo_layers", get_doc_elmo_layers),
        (Token, "elmo", get_token_elmo),
        (Span, "elmo", get_span_elmo),
    ):
        if not cls.has_extension(name):
            cls.set_extension(name, getter=getter)
