"""ELMo behind spaCy's vector hooks (the component's `vector_hooks` setting): `token.vector`,
`span.vector`, `doc.vector` and `.similarity()` read `doc._.elmo` and friends (see `extensions`).
The vectors are float32, as spaCy's are (a `store: float16` Doc's widened: spaCy sums their squares
for `vector_norm` in their own type, past float16's range from a norm of 256)."""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
from spacy.errors import Warnings
from spacy.tokens import Doc, Span, Token

from .errors import ElmoError
from .extensions import get_doc_elmo, get_span_elmo, get_token_elmo, mean_vector


def _norm(v: np.ndarray) -> float:
    return float(np.sqrt((v * v).sum()))


def similarity_hook(a, b) -> float:
    """Cosine similarity of the ELMo vectors of two Docs, Spans or Tokens (summed in float64):
    0.0 with spaCy's warning W008 where the other has no vector; an ElmoError where its vectors
    are of another width, or where either has the hooks but no ELMo data."""
    va, vb = a.vector.astype(np.float64), np.asarray(b.vector, dtype=np.float64)
    if not b.has_vector:
        warnings.warn(Warnings.W008.format(obj=type(a).__name__), stacklevel=3)
        return 0.0
    if va.shape != vb.shape:
        raise ElmoError(
            f"similarity of {va.shape[-1]}-wide ELMo vectors with {vb.shape[-1]}-wide vectors "
            "(another pipeline's, or static vectors): compare vectors of one kind"
        )
    na, nb = _norm(va), _norm(vb)
    return float((va * vb).sum() / (na * nb)) if na and nb else 0.0


def _hooked(vector: Optional[np.ndarray], doc: Doc) -> np.ndarray:
    """`vector` as float32; an ElmoError where the Doc has the hooks but no ELMo data."""
    if vector is None:
        raise ElmoError(
            f"this Doc ({len(doc)} tokens) has ELMo's vector hooks but no ELMo data: spaCy's "
            "Span.as_doc() copies a Doc's hooks, not its extensions. Read span._.elmo on the "
            "original Doc, or run the pipeline on the new Doc's text"
        )
    return vector.astype(np.float32, copy=False)


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


HOOKS_STAY = (
    "elmo's vector_hooks stay in this worker of nlp.pipe(n_process=N): spaCy sends Docs back "
    "without hooks. Call spacy_elmo.set_vector_hooks(doc) on the Docs you receive."
)


def set_vector_hooks(doc: Doc) -> None:
    """Back `token.vector`, `span.vector`, `doc.vector` and `.similarity()` with ELMo for this
    Doc (`doc._.elmo_data` set). spaCy does not serialize hooks: a Doc read back (`Doc.from_bytes`,
    a DocBin, `nlp.pipe(n_process=N)`) needs this call again. The Doc gets hook dicts of its own:
    `Span.as_doc()` shares its Doc's, which keeps its hooks as they were. Where the vocab has static
    vectors, spaCy's retokenizer stores a merged span's `span.vector` as the merged token's static
    vector (under these hooks ELMo's; at another width, numpy's error midway through the merge):
    retokenize first, then call this."""
    shared = {"has_vector": has_vector_hook, "similarity": similarity_hook}
    doc.user_hooks = {**doc.user_hooks, "vector": doc_vector_hook, **shared}
    doc.user_span_hooks = {**doc.user_span_hooks, "vector": span_vector_hook, **shared}
    doc.user_token_hooks = {**doc.user_token_hooks, "vector": token_vector_hook, **shared}
