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


def test_a_merge_under_vector_hooks_stores_elmo_in_the_static_vectors_and_merging_first_does_not(
    fixture_dir,
):
    """What the README's `vector_hooks` row says: spaCy's merge stores `span.vector` as the merged
    token's static vector, which under the hooks is ELMo's; merging before setting the hooks
    stores the static vectors' own mean."""
    from spacy_elmo import set_vector_hooks

    def merged_static_vector(hooks_first: bool) -> np.ndarray:
        nlp = spacy.blank("en")
        nlp.vocab.reset_vectors(width=32)
        nlp.vocab.set_vector("cat", np.ones(32, dtype="f"))
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "vector_hooks": hooks_first})
        doc = nlp("The cat sat .")
        with doc.retokenize() as retokenizer:
            retokenizer.merge(doc[0:2])
        if not hooks_first:
            set_vector_hooks(doc)
            assert doc[0].vector.shape == (32,)  # ELMo's, realigned
        return nlp.vocab.get_vector("The cat").copy()

    static_mean = np.full(32, 0.5, dtype="f")  # of "The" (zeros) and "cat" (ones)
    np.testing.assert_array_equal(merged_static_vector(hooks_first=False), static_mean)
    assert not np.array_equal(merged_static_vector(hooks_first=True), static_mean)
