"""ELMo behind spaCy's vector hooks (the component's `vector_hooks` setting): `token.vector`,
`span.vector`, `doc.vector` and `.similarity()` read `doc._.elmo` (see `doc_data`)."""

from __future__ import annotations

from typing import Optional

import numpy as np
from spacy.tokens import Doc, Span, Token

from .doc_data import get_doc_elmo, get_span_elmo, get_token_elmo, mean_vector
from .errors import ElmoError


def _norm(v: np.ndarray) -> float:
    return float(np.sqrt((v * v).sum()))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    # float16 sums overflow
    a, b = (
        a.astype(np.float32, copy=False),
        b.astype(np.float32, copy=False),
    )
    na, nb = _norm(a), _norm(b)
    return float((a * b).sum() / (na * nb)) if na and nb else 0.0


def _hooked(vector: Optional[np.ndarray], doc: Doc) -> np.ndarray:
    """`vector`; an ElmoError where the Doc has the hooks but no ELMo data."""
    if vector is None:
        raise ElmoError(
            f"this Doc ({len(doc)} tokens) has ELMo's vector hooks but no ELMo data: spaCy's "
            "Span.as_doc() copies a Doc's hooks, not its extensions. Read span._.elmo on the "
            "original Doc, or run the pipeline on the new Doc's text"
        )
    return vector


def doc_vector_hook(doc: Doc) -> np.ndarray:
    """`doc.vector` under the hooks: the mean ELMo vector of the non-whitespace tokens."""
    return mean_vector(_hooked(get_doc_elmo(doc), doc), doc, 0, len(doc))


def span_vector_hook(span: Span) -> np.ndarray:
    return _hooked(get_span_elmo(span), span.doc)


def token_vector_hook(token: Token) -> np.ndarray:
    return _hooked(get_token_elmo(token), token.doc)


def has_vector_hook(obj) -> bool:
    """Whether the Doc of `obj` (a Doc, Span or Token) holds ELMo data."""
    return (obj if isinstance(obj, Doc) else obj.doc)._.elmo_data is not None


def similarity_hook(a, b) -> float:
    """Cosine similarity of the ELMo vectors of two Docs, Spans or Tokens."""
    return _cosine(a.vector, b.vector)


HOOKS_STAY = (
    "elmo's vector_hooks stay in this worker of nlp.pipe(n_process=N): spaCy sends Docs back "
    "without hooks. Call spacy_elmo.set_vector_hooks(doc) on the Docs you receive."
)


def set_vector_hooks(doc: Doc) -> None:
    """Back `token.vector`, `span.vector`, `doc.vector` and `.similarity()` with ELMo for this
    Doc (`doc._.elmo_data` set). spaCy does not serialize hooks: a Doc read back (`Doc.from_bytes`,
    a DocBin, `nlp.pipe(n_process=N)`) needs this call again."""
    doc.user_hooks["vector"] = doc_vector_hook
    doc.user_hooks["has_vector"] = has_vector_hook
    doc.user_hooks["similarity"] = similarity_hook
    doc.user_span_hooks["vector"] = span_vector_hook
    doc.user_span_hooks["has_vector"] = has_vector_hook
    doc.user_span_hooks["similarity"] = similarity_hook
    doc.user_token_hooks["vector"] = token_vector_hook
    doc.user_token_hooks["has_vector"] = has_vector_hook
    doc.user_token_hooks["similarity"] = similarity_hook
