"""The ELMo data on a Doc follows its tokens: retokenizing after `elmo` (merge_entities, merges,
splits) realigns it by the documented rule, and stored data read back is checked against the Doc."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span

from spacy_elmo import ElmoError, doc_data
from spacy_elmo.bilm.finite import NonFiniteError
from spacy_elmo.doc_data import ElmoDocData

TEXT = "New York is a big city ."


@pytest.fixture(scope="module")
def nlp(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    nlp.initialize()
    return nlp


def test_merge_entities_in_a_pipeline_gives_each_token_its_own_vectors(nlp):
    before = nlp(TEXT)
    layers, mix = before._.elmo_layers.copy(), before._.elmo.copy()
    ruler = nlp.add_pipe("entity_ruler", after="elmo")
    ruler.add_patterns([{"label": "GPE", "pattern": "New York"}])
    nlp.add_pipe("merge_entities", after="entity_ruler")
    try:
        doc = nlp(TEXT)
    finally:
        nlp.remove_pipe("merge_entities")
        nlp.remove_pipe("entity_ruler")
    assert [t.text for t in doc] == ["New York", "is", "a", "big", "city", "."]
    assert doc._.elmo.shape == (len(doc), mix.shape[1])
    assert doc._.elmo_layers.shape == (layers.shape[0], len(doc), layers.shape[2])
    np.testing.assert_allclose(doc[0]._.elmo, mix[0:2].mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        doc._.elmo_layers[:, 0], layers[:, 0:2].mean(axis=1), rtol=1e-6, atol=1e-6
    )
    for i in range(1, len(doc)):  # every later token keeps its own vector: "is" is not York's
        np.testing.assert_array_equal(doc[i]._.elmo, mix[i + 1])
        np.testing.assert_array_equal(doc._.elmo_layers[:, i], layers[:, i + 1])
    np.testing.assert_allclose(
        doc[0:2]._.elmo, np.stack([doc[0]._.elmo, mix[2]]).mean(axis=0), rtol=1e-6
    )


def test_a_token_read_before_the_whole_doc_is_realigned_too(nlp):
    expected = nlp(TEXT)._.elmo
    doc = nlp(TEXT)
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[4:6])  # "city ."
    assert doc[2]._.elmo is not None
    np.testing.assert_array_equal(doc[2]._.elmo, expected[2])
    np.testing.assert_allclose(doc[4]._.elmo, expected[4:6].mean(axis=0), rtol=1e-6, atol=1e-6)
    assert doc._.elmo.shape[0] == len(doc) == 6


def test_a_split_gives_each_piece_its_source_tokens_vector(nlp):
    doc = nlp("NewYork is big .")
    expected = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[0], ["New", "York"], heads=[(doc[0], 1), doc[1]])
    assert [t.text for t in doc] == ["New", "York", "is", "big", "."]
    assert doc._.elmo.shape[0] == len(doc)
    np.testing.assert_array_equal(doc[0]._.elmo, expected[0])
    np.testing.assert_array_equal(doc[1]._.elmo, expected[0])
    np.testing.assert_array_equal(doc._.elmo[2:], expected[1:])


def test_a_merge_leaves_whitespace_parts_out_of_the_mean(nlp):
    doc = nlp("New  York is big .")  # two spaces: a whitespace token between New and York
    assert doc[1].is_space
    expected = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:3])
    np.testing.assert_allclose(doc[0]._.elmo, expected[[0, 2]].mean(axis=0), rtol=1e-6, atol=1e-6)


def test_a_span_and_the_token_merged_from_it_get_one_vector(nlp):
    doc = nlp("New  York is big .")  # a whitespace token inside the span
    span_vector = doc[0:3]._.elmo
    np.testing.assert_allclose(span_vector, doc._.elmo[[0, 2]].mean(axis=0), rtol=1e-6, atol=1e-6)
    assert not doc[1:2]._.elmo.any()  # whitespace alone: zeros
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:3])
    np.testing.assert_allclose(doc[0]._.elmo, span_vector, rtol=1e-6, atol=1e-6)


def test_merge_noun_chunks_style_retokenizing_then_storing_round_trips(nlp):
    doc = nlp(TEXT)
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[3:5])  # "big city"
    expected = doc._.elmo.copy()
    back = list(DocBin(docs=[doc], store_user_data=True).get_docs(nlp.vocab))[0]
    np.testing.assert_array_equal(back._.elmo, expected)


def test_data_of_another_text_is_one_error(nlp):
    doc = nlp(TEXT)
    other = nlp.make_doc("Completely different words here")
    other._.elmo_data = doc._.elmo_data
    with pytest.raises(ElmoError, match="does not fit this Doc"):
        _ = other._.elmo


@pytest.mark.parametrize("retokenize", [False, True])
def test_data_of_another_text_with_the_same_token_offsets_is_one_error(nlp, retokenize):
    """Data copied onto a Doc of another text whose tokens have the same character offsets was
    read as that Doc's: 'dog' got the vector of 'cat', silently."""
    doc = nlp("The cat sat .")
    other = nlp.make_doc("The dog ran .")
    assert np.array_equal(doc_data.token_spans(doc), doc_data.token_spans(other))
    other.user_data.update(doc.user_data)
    if retokenize:
        with other.retokenize() as retokenizer:
            retokenizer.merge(other[0:2])
    reads = [  # "The" first: its own span and text are those it was computed for
        lambda: other[0]._.elmo,
        lambda: other[0:1]._.elmo,
        lambda: other[1]._.elmo,
        lambda: other._.elmo,
    ]
    for read in reads:
        with pytest.raises(ElmoError, match="does not fit this Doc.*another text"):
            read()
    assert doc[1]._.elmo.shape == (doc._.elmo.shape[1],)  # the Doc it was computed for reads it


def test_a_word_where_the_data_had_only_whitespace_is_another_text(nlp):
    """'a b' computed, read on 'axb' (tokens 'a', 'x', 'b'): the old tokens' spans and texts fit,
    but 'x' lies where `elmo` saw only whitespace, which no rule realigns: one error, not zeros."""
    doc = nlp(Doc(nlp.vocab, words=["a", "b"], spaces=[True, False]))
    other = Doc(nlp.vocab, words=["a", "x", "b"], spaces=[False, False, False])
    other.user_data.update(doc.user_data)
    with pytest.raises(ElmoError, match="does not fit this Doc.*another text"):
        _ = other._.elmo


def test_stored_data_keeps_each_tokens_text_hash_and_a_wrong_one_is_an_error(nlp):
    doc = read_back(nlp, stored(nlp, lambda d: d))
    assert np.array_equal(doc._.elmo_data.orths, doc.to_array("ORTH"))

    def two_hashes(d):
        return ElmoDocData(d.layers, None, d.mix_weights, d.spans, True, orths=d.orths[:2])

    with pytest.raises(ElmoError, match="'orths' must be 6"):
        read_back(nlp, stored(nlp, two_hashes))


def test_a_doc_whose_tokens_were_read_pickles_and_deep_copies(nlp):
    """The data remembers (weakly) the Doc whose text it checked: copies and pickles forget it."""
    doc = nlp(TEXT)
    expected = doc[1]._.elmo.copy()
    for back in (pickle.loads(pickle.dumps(doc)), copy.deepcopy(doc), doc.copy()):
        np.testing.assert_array_equal(back[1]._.elmo, expected)
        np.testing.assert_array_equal(back._.elmo, doc._.elmo)


def test_a_copied_doc_keeps_its_elmo_data_read_only(nlp):
    """`doc.copy()` deep-copies the user data: the copy's arrays came back writeable, so an
    in-place edit of `doc._.elmo` changed every later read of the copy's vectors."""
    copied = nlp(TEXT).copy()
    for read in (lambda: copied._.elmo, lambda: copied._.elmo_layers, lambda: copied[1]._.elmo):
        with pytest.raises(ValueError, match="read-only"):
            read()[..., 0] += 1


# ---------------------------------------------------------------------- stored data read back
def stored(nlp, edit) -> bytes:
    doc = nlp("The cat sat on mats .")
    data = doc._.elmo_data
    doc._.elmo_data = edit(data)
    return DocBin(docs=[doc], store_user_data=True).to_bytes()


def read_back(nlp, blob):
    return list(DocBin().from_bytes(blob).get_docs(nlp.vocab))[0]


def two_rows(data):
    return ElmoDocData(
        layers=data.layers[:, :2], mixed=None, mix_weights=data.mix_weights, save_layers=True
    )


@pytest.mark.parametrize(
    "edit,problem",
    [
        (
            lambda d: ElmoDocData(layers=None, mixed="hello", mix_weights=d.mix_weights),
            "'mixed' must be a 2-d float",
        ),
        (lambda d: ElmoDocData(layers=None, mixed=None, mix_weights=d.mix_weights), "neither"),
        (
            lambda d: ElmoDocData(
                layers=d.layers, mixed=None, mix_weights=np.ones(7, "f"), save_layers=True
            ),
            "'weights' must be 3 mix weights",
        ),
        (
            lambda d: ElmoDocData(
                layers=np.full_like(d.layers, np.nan),
                mixed=None,
                mix_weights=d.mix_weights,
                save_layers=True,
            ),
            "non-finite",
        ),
        (
            lambda d: ElmoDocData(
                layers=d.layers[:, :2],
                mixed=None,
                mix_weights=d.mix_weights,
                spans=d.spans,
                save_layers=True,
            ),
            "'spans' must be 2",
        ),
        (
            lambda d: ElmoDocData(
                layers=d.layers.astype(np.int32),
                mixed=None,
                mix_weights=d.mix_weights,
                save_layers=True,
            ),
            "'layers' must be a 3-d float16 or float32 array, got a int32",
        ),
        (  # wrapped into int32 before
            lambda d: ElmoDocData(
                d.layers, None, d.mix_weights, d.spans.astype(np.int64) + 2**40, True
            ),
            "'spans' must be 6 .* pairs within",
        ),
        (  # read back as float64 vectors before
            lambda d: ElmoDocData(None, d.mix().astype(np.float64), d.mix_weights, d.spans),
            "'mixed' must be a 2-d float16 or float32 array, got a float64",
        ),
    ],
)
def test_edited_stored_data_is_one_error_when_read_back(nlp, edit, problem):
    with pytest.raises(ElmoError, match=f"stored ELMo data .*{problem}"):
        read_back(nlp, stored(nlp, edit))


def without_spans(data):
    """The data as spacy_elmo stored it before it kept the tokens' spans."""
    return ElmoDocData(
        layers=data.layers, mixed=None, mix_weights=data.mix_weights, save_layers=True
    )


@pytest.mark.parametrize("edit", [two_rows, without_spans])
def test_stored_data_without_token_spans_is_one_error_on_reading(nlp, edit):
    """Data stored without its tokens' spans cannot be checked against the Doc: a Doc
    retokenized to the same number of tokens got shifted vectors ('is' read York's)."""
    doc = read_back(nlp, stored(nlp, edit))
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])  # "The cat"
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[3], ["ma", "ts"], heads=[(doc[3], 1), doc[2]])
    assert len(doc) == 6
    for read in (lambda: doc[4]._.elmo, lambda: Span(doc, 0, 3)._.elmo, lambda: doc._.elmo):
        with pytest.raises(ElmoError, match="holds no character spans of its tokens"):
            read()


def test_features_refuse_misaligned_data_by_name(nlp):
    from spacy_elmo.layers.mix import doc_layers

    doc = read_back(nlp, stored(nlp, two_rows))
    model = spacy.registry.get("architectures", "spacy_elmo.ElmoFeatures.v1")(n_layers=3, width=32)
    model.initialize()
    with pytest.raises(ElmoError, match="does not fit this Doc"):
        doc_layers(model, [doc], is_train=False)


def test_a_doc_without_elmo_reads_none(nlp):
    doc = nlp.make_doc("no elmo here")
    assert Doc.has_extension("elmo") and doc._.elmo is None and doc[0]._.elmo is None


@pytest.mark.parametrize("value", ["a string", {"a": "dict"}, [1, 2]])
def test_something_else_in_elmo_data_is_one_error(nlp, value):
    doc = nlp.make_doc(TEXT)
    doc._.elmo_data = value
    for read in (lambda: doc._.elmo, lambda: doc[1]._.elmo, lambda: doc[0:2]._.elmo):
        with pytest.raises(ElmoError, match="not ELMo data"):
            read()


def test_a_span_is_checked_against_its_own_tokens_not_the_whole_doc(nlp, monkeypatch):
    """Reading `span._.elmo` looks at the span's tokens only: every span of a long Doc in turn
    (entities, noun chunks) costs the Doc's length once, not once per span."""
    doc = nlp(" ".join(["the cat sat ."] * 500))
    expected = doc._.elmo.copy()
    seen = []
    spans_of = doc_data.token_spans
    monkeypatch.setattr(doc_data, "token_spans", lambda d: seen.append(len(d)) or spans_of(d))
    for start in range(0, len(doc), 2):
        got = doc[start : start + 2]._.elmo
        np.testing.assert_allclose(got, expected[start : start + 2].mean(0), rtol=1e-6, atol=1e-6)
    assert sum(seen) <= 2 * len(doc), f"{sum(seen)} token spans computed for {len(doc) // 2} spans"
    with doc.retokenize() as retokenizer:  # a span after a merge is realigned all the same
        retokenizer.merge(doc[0:2])
    np.testing.assert_allclose(doc[0:1]._.elmo, expected[0:2].mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(doc[1:2]._.elmo, expected[2])


def test_tokens_and_spans_of_a_retokenized_doc_are_checked_against_their_own_tokens(
    nlp, monkeypatch
):
    """After a retokenization each token's and span's read checks its own rows of the realigned
    data: reading every token of a long Doc costs its length a few times, not once per token."""
    doc = nlp(" ".join(["the cat sat ."] * 500))
    expected = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    seen = []
    spans_of = doc_data.token_spans
    monkeypatch.setattr(doc_data, "token_spans", lambda d: seen.append(len(d)) or spans_of(d))
    for token in doc[1:]:
        np.testing.assert_array_equal(token._.elmo, expected[token.i + 1])
    for start in range(1, len(doc) - 1, 2):
        assert doc[start : start + 2]._.elmo is not None
    assert sum(seen) <= 4 * len(doc), f"{sum(seen)} token spans computed for {len(doc)} tokens"


def test_vector_hooks_on_a_doc_without_elmo_data_say_so(fixture_dir):
    """`Span.as_doc()` copies a Doc's hooks but not its extensions: the new Doc has no ELMo
    vector (`has_vector` false), and reading one is one ElmoError saying why, not a TypeError."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "vector_hooks": True})
    doc = nlp("The cat sat. The dog ran.")
    sent = list(doc.sents)[0].as_doc()
    assert sent._.elmo_data is None
    assert not sent.has_vector and not sent[0].has_vector and not sent[0:2].has_vector
    for read in (
        lambda: sent.vector,
        lambda: sent[0].vector,
        lambda: sent[0:2].vector,
        lambda: sent[0].similarity(sent[1]),
        lambda: sent.similarity(doc),
    ):
        with pytest.raises(ElmoError, match="no ELMo data.*as_doc"):
            read()
    assert doc[0].has_vector and doc[0].similarity(doc[1]) != 0  # the Doc it came from still works


def test_a_doc_reads_the_same_vectors_however_often_it_was_read_between_retokenizings(nlp):
    """Merge 'ab cd', then split it into 'a' and 'b cd': realigned from the tokens `elmo` saw, 'a'
    gets the vector of 'ab' and 'b cd' the mean of 'ab' and 'cd', whether or not the Doc was read
    after the merge (a read in between had made 'a' the mean of the merge)."""
    expected = nlp("ab cd ef .")._.elmo
    results = []
    for read_between in (False, True):
        doc = nlp("ab cd ef .")
        with doc.retokenize() as retokenizer:
            retokenizer.merge(doc[0:2])
        if read_between:
            _ = doc._.elmo
        with doc.retokenize() as retokenizer:
            retokenizer.split(doc[0], ["a", "b cd"], heads=[(doc[0], 1), doc[1]])
        assert [t.text for t in doc] == ["a", "b cd", "ef", "."]
        results.append(doc._.elmo.copy())
        np.testing.assert_array_equal(doc[0]._.elmo, expected[0])
        np.testing.assert_allclose(doc[1]._.elmo, expected[0:2].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(results[0], results[1])


def test_a_new_whitespace_token_between_old_ones_gets_zeros(nlp):
    """Merging 'New York' then splitting it into 'New', ' ', 'York' keeps the text; the space was
    in no token `elmo` saw, and was refused as 'computed for another text'."""
    doc = nlp("New York is big.")
    expected = doc._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[0], ["New", " ", "York"], heads=[doc[1], doc[1], doc[3]])
    assert [t.text for t in doc] == ["New", " ", "York", "is", "big", "."]
    assert doc.text == "New York is big."
    np.testing.assert_array_equal(doc._.elmo[[0, 2, 3, 4, 5]], expected)
    assert not doc[1]._.elmo.any()


def test_a_whitespace_piece_split_out_of_a_token_elmo_saw_gets_zeros(nlp):
    """'New York' merged before `elmo`, split into 'New', ' ', 'York' after: the space piece got
    the merged token's vector, where a Doc that had that token when `elmo` ran gets zeros."""
    doc = nlp.make_doc("I love New York today")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[2:4])
    doc = nlp.get_pipe("elmo")(doc)
    merged = doc[2]._.elmo.copy()
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[2], ["New", " ", "York"], heads=[doc[2], doc[2], doc[2]])
    assert doc[3].is_space and doc.text == "I love New York today"
    assert not doc[3]._.elmo.any() and not doc._.elmo_layers[:, 3].any()
    np.testing.assert_array_equal(doc[2]._.elmo, merged)
    np.testing.assert_array_equal(doc[4]._.elmo, merged)


class TextReads:
    """A Doc that counts how often its text is read."""

    def __init__(self, doc):
        self.doc, self.reads = doc, 0

    def __len__(self):
        return len(self.doc)

    def to_array(self, attrs):
        return self.doc.to_array(attrs)

    @property
    def text(self):
        self.reads += 1
        return self.doc.text


def test_realigning_reads_the_doc_text_once(nlp):
    """spaCy builds `Doc.text` anew on each read: read once per token, realigning a 50,000-token
    Doc with 5,000 merges took 342 s."""
    doc = nlp(" ".join(["word"] * 400))
    data = doc._.elmo_data
    with doc.retokenize() as retokenizer:
        for i in range(0, 400, 4):
            retokenizer.merge(doc[i : i + 2])
    counted = TextReads(doc)
    realigned = data.realigned(counted)
    assert counted.reads == 1 and realigned.n_tokens == len(doc) == 300


def test_sums_that_overflow_float32_are_an_error_or_summed_wider(nlp):
    """Layers near float32's largest value: a mix beyond it is one NonFiniteError, never
    infinities in doc._.elmo; the mean of a merged token and of a span is summed in float64 (a
    float32 sum gave infinities where the mean is finite)."""
    doc = nlp("one two three .")
    data = doc._.elmo_data
    big = np.full_like(data.layers, 3e38)
    doc._.elmo_data = ElmoDocData(big, None, np.array([1e4, 0, 0], "f"), data.spans)
    with pytest.raises(NonFiniteError, match="doc._.elmo: values beyond float32's range"):
        _ = doc._.elmo
    doc._.elmo_data = ElmoDocData(big, None, np.array([1, 0, 0], "f"), data.spans)
    assert np.isfinite(doc[0:3]._.elmo).all() and doc[0:3]._.elmo[0] == np.float32(3e38)
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:3])
    assert doc[0]._.elmo[0] == np.float32(3e38) and np.isfinite(doc._.elmo_layers).all()


def test_two_docs_sharing_one_data_check_their_texts_once_each(nlp, monkeypatch):
    """Docs made with another's user data share its data object: reading their tokens in turn
    checked each Doc's whole text again at every switch (a 100,000-token pair: hours)."""
    doc = nlp(" ".join(["the cat sat ."] * 50))
    twin = Doc(
        doc.vocab,
        words=[t.text for t in doc],
        spaces=[bool(t.whitespace_) for t in doc],
        user_data=doc.user_data,
    )
    assert twin._.elmo_data is doc._.elmo_data
    hashed = []
    hash_of = doc_data.get_string_id
    monkeypatch.setattr(doc_data, "get_string_id", lambda text: hashed.append(1) or hash_of(text))
    for a, b in zip(doc, twin):
        np.testing.assert_array_equal(a._.elmo, b._.elmo)
    assert len(hashed) <= 2 * len(doc), f"{len(hashed)} token texts hashed for {len(doc)} tokens"
