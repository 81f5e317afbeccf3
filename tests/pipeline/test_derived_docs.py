"""Docs derived from other Docs (`Span.as_doc`, `Doc.from_docs`): `elmo` and its vector hooks on a
derived Doc leave the Doc it came from as it was."""

from __future__ import annotations

import numpy as np
import spacy


def test_elmo_on_a_span_as_doc_leaves_the_vectors_of_the_doc_it_came_from(fixture_dir):
    """spaCy's `Span.as_doc()` gives the new Doc the very hook dicts of its Doc: `elmo` with
    `vector_hooks` on the new Doc put ELMo's hooks on the other Doc too, whose `token.vector` (its
    static vectors, no ELMo data) became an ElmoError."""
    plain = spacy.blank("en")
    plain.add_pipe("sentencizer")
    plain.vocab.reset_vectors(width=4)
    for word in ("The", "cat", "sat", "dog", "ran", "."):
        plain.vocab.set_vector(word, np.arange(4, dtype="f") + len(word))
    doc = plain("The cat sat. The dog ran.")
    static = doc[1].vector.copy()
    nlp = spacy.blank("en", vocab=plain.vocab)
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "vector_hooks": True})
    sent = nlp(list(doc.sents)[1].as_doc())
    assert sent[0].vector.shape == (32,) and sent[0:2].vector.shape == (32,)
    assert not doc.user_hooks and not doc.user_span_hooks and not doc.user_token_hooks
    np.testing.assert_array_equal(doc[1].vector, static)
    assert doc[0:2].similarity(doc[3:5]) > 0
