"""The ELMo data stored on each Doc, the named getters behind `doc._.elmo` and friends, and the vector hooks.

One `ElmoDocData` per Doc, in `doc._.elmo_data`. It holds either all biLM layers
`(n_layers + 1, n_tokens, 2 * projection_dim)` or only their fixed mix `(n_tokens, 2 * projection_dim)`,
as float32 or float16 (`doc._.elmo`, `token._.elmo` and `span._.elmo` give that dtype; `doc._.elmo_layers`
gives float32); whitespace tokens hold zero vectors. The data object is registered with
srsly's msgpack, so `Doc.to_bytes`, `DocBin(store_user_data=True)` and `nlp.pipe(n_process=2)`
carry it: the mix only, unless `save_layers` (the layers are `n_layers + 1` times its size).
The getters are module-level functions, so extensions pickle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import srsly
from spacy.tokens import Doc, Span, Token

MSGPACK_KEY = "__spacy_elmo_doc_data__"

@dataclass
class ElmoDocData:
    """`layers` `(n_layers + 1, n_tokens, width)` or None; `mixed` `(n_tokens, width)` or None (one is set);
    `mix_weights` `(n_layers + 1,)` float32: the weights of the fixed mix that `doc._.elmo` reports.
    `save_layers`: whether a stored Doc keeps `layers` (else only the mix is written)."""

    layers: Optional[np.ndarray]
    mixed: Optional[np.ndarray]
    mix_weights: np.ndarray
    save_layers: bool = field(default=False, compare=False)
    _mix_cache: Optional[np.ndarray] = field(default=None, repr=False, compare=False)

    @property
    def n_tokens(self) -> int:
        return (self.layers.shape[1] if self.layers is not None else self.mixed.shape[0])

    @property
    def width(self) -> int:
        return (self.layers.shape[2] if self.layers is not None else self.mixed.shape[1])

    def mix(self) -> np.ndarray:
        """The fixed mix `(n_tokens, width)` in the stored dtype (summed in float32, computed once per Doc)."""
        if self._mix_cache is None:
            if self.mixed is not None:
                out = self.mixed
            else:
                layers = self.layers.astype(np.float32, copy=False)
                out = np.tensordot(self.mix_weights, layers, axes=1).astype(self.layers.dtype, copy=False)
            out.setflags(write=False)
            self._mix_cache = out
        return self._mix_cache

    def to_dict(self) -> dict:
        """What a stored Doc keeps: the layers where `save_layers`, else the mix."""
        if self.save_layers or self.layers is None:
            return {"layers": self.layers, "mixed": self.mixed, "weights": self.mix_weights}  # key of stored Docs
        return {"layers": None, "mixed": self.mix(), "weights": self.mix_weights}

    @classmethod
    def from_dict(cls, msg: dict) -> "ElmoDocData":
        return cls(layers=msg["layers"], mixed=msg["mixed"], mix_weights=np.asarray(msg["weights"], dtype=np.float32))


@srsly.msgpack_encoders("spacy_elmo_doc_data")
def serialize_elmo_data(obj, chain=None):
    if isinstance(obj, ElmoDocData):
        return {MSGPACK_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


@srsly.msgpack_decoders("spacy_elmo_doc_data")
def deserialize_elmo_data(obj, chain=None):
    if isinstance(obj, dict) and MSGPACK_KEY in obj:
        return ElmoDocData.from_dict(obj[MSGPACK_KEY])
    return obj if chain is None else chain(obj)


# ---------------------------------------------------------------------- getters
def get_doc_elmo(doc: Doc) -> Optional[np.ndarray]:
    """`doc._.elmo`: `(n_tokens, width)`, the fixed mix, in the dtype `elmo` stored (`store`); None before
    `elmo` ran."""
    data = doc._.elmo_data
    return None if data is None else data.mix()


def get_doc_elmo_layers(doc: Doc) -> Optional[np.ndarray]:
    """`doc._.elmo_layers`: float32 `(n_layers + 1, n_tokens, width)`; None where only the mix is kept."""
    data = doc._.elmo_data
    if data is None or data.layers is None:
        return None
    return data.layers.astype(np.float32, copy=False)


def get_token_elmo(token: Token) -> Optional[np.ndarray]:
    """`token._.elmo`: `(width,)`, in the stored dtype."""
    mix = get_doc_elmo(token.doc)
    return None if mix is None else mix[token.i]


def get_span_elmo(span: Span) -> Optional[np.ndarray]:
    """`span._.elmo`: `(width,)` in the stored dtype, the mean over the span's tokens (zeros for an empty span)."""
    mix = get_doc_elmo(span.doc)
    if mix is None:
        return None
    if span.end == span.start:
        return np.zeros(mix.shape[1], dtype=mix.dtype)
    return mix[span.start : span.end].mean(axis=0)


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


# ---------------------------------------------------------------------- vector hooks
def _norm(v: np.ndarray) -> float:
    return float(np.sqrt((v * v).sum()))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)  # float16 sums overflow
    na, nb = _norm(a), _norm(b)
    return float((a * b).sum() / (na * nb)) if na and nb else 0.0


def doc_vector_hook(doc: Doc) -> np.ndarray:
    """`doc.vector` under the hooks: the mean ELMo vector of the non-whitespace tokens."""
    return _mean_vector(doc)


def span_vector_hook(span: Span) -> np.ndarray:
    return _mean_vector(span)


def token_vector_hook(token: Token) -> np.ndarray:
    return get_token_elmo(token)


def _mean_vector(doclike) -> np.ndarray:
    mix = get_doc_elmo(doclike.doc if isinstance(doclike, Span) else doclike)
    start, end = (doclike.start, doclike.end) if isinstance(doclike, Span) else (0, len(doclike))
    rows = [i for i in range(start, end) if not doclike.doc[i].is_space]
    return mix[rows].mean(axis=0) if rows else np.zeros(mix.shape[1], dtype=mix.dtype)


def has_vector_hook(obj) -> bool:
    return True


def similarity_hook(a, b) -> float:
    """Cosine similarity of the ELMo vectors of two Docs, Spans or Tokens."""
    return _cosine(a.vector, b.vector)


def set_vector_hooks(doc: Doc) -> None:
    """Back `token.vector`, `span.vector`, `doc.vector` and `.similarity()` with ELMo for this Doc."""
    doc.user_hooks["vector"] = doc_vector_hook
    doc.user_hooks["has_vector"] = has_vector_hook
    doc.user_hooks["similarity"] = similarity_hook
    doc.user_span_hooks["vector"] = span_vector_hook
    doc.user_span_hooks["has_vector"] = has_vector_hook
    doc.user_span_hooks["similarity"] = similarity_hook
    doc.user_token_hooks["vector"] = token_vector_hook
    doc.user_token_hooks["has_vector"] = has_vector_hook
    doc.user_token_hooks["similarity"] = similarity_hook
