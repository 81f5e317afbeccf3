"""The `elmo` component: annotations, segmentation, batching, caching, options and errors."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example

from spacy_elmo import BiLM, BiLMOptions, ElmoError, ElmoFileError, load_bilm
from spacy_elmo.bilm import mix_layers
from spacy_elmo.doc_data import ElmoDocData
from spacy_elmo.feature_cache import FeatureCache
from spacy_elmo.windows import Window, rule_sentences, windows_of

from ..helpers import FLOAT32_ATOL, held_after
from ..readme_blocks import README

# also run on MKL's compatible path and torch's default kernels (.ci/run)
pytestmark = pytest.mark.numeric

SENTENCES = [
    "The quick brown fox jumped over the lazy dog .".split(),
    "A second , rather shorter sentence .".split(),
    "Colorless green ideas sleep furiously !".split(),
    "Is this the third one ?".split(),
    "Yes".split(),
]


@pytest.fixture()
def nlp(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    return nlp


def words_doc(nlp, words, sent_starts=None):
    return Doc(nlp.vocab, words=words, sent_starts=sent_starts)


def test_extensions_shapes_and_values(nlp, fixture_bilm):
    doc = nlp(words_doc(nlp, SENTENCES[0]))
    expected = fixture_bilm.embed([SENTENCES[0]])[0]  # (3, n, 32)
    n = len(SENTENCES[0])
    assert doc._.elmo_layers.shape == (3, n, 32) and doc._.elmo_layers.dtype == np.float32
    np.testing.assert_allclose(doc._.elmo_layers, expected, atol=FLOAT32_ATOL)
    np.testing.assert_allclose(doc._.elmo, expected.mean(0), atol=FLOAT32_ATOL)
    assert doc._.elmo.shape == (n, 32) and doc._.elmo.dtype == np.float32
    np.testing.assert_allclose(doc[3]._.elmo, expected.mean(0)[3], atol=FLOAT32_ATOL)
    np.testing.assert_allclose(doc[2:5]._.elmo, expected.mean(0)[2:5].mean(0), atol=FLOAT32_ATOL)


def test_mix_options(fixture_dir, fixture_bilm):
    expected = fixture_bilm.embed([SENTENCES[1]])[0]
    for mix, weights in (("top", [0, 0, 1]), ([0.5, 0.25, 0.25], [0.5, 0.25, 0.25])):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": mix})
        doc = nlp(words_doc(nlp, SENTENCES[1]))
        np.testing.assert_allclose(
            doc._.elmo, np.tensordot(np.array(weights, "f"), expected, 1), atol=FLOAT32_ATOL
        )


@pytest.mark.parametrize("mix", ["average", [0.7, -0.3, 1.9]])
def test_the_mix_is_summed_in_float32_in_layer_order(fixture_dir, mix):
    """`doc._.elmo` is `w_0 h_0 + w_1 h_1 + w_2 h_2`, each product and sum rounded to float32 in
    layer order (`spacy_elmo.bilm.mix_layers`): the same bits as numpy's, here."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": mix})
    doc = nlp(words_doc(nlp, SENTENCES[0] + SENTENCES[2]))
    layers = doc._.elmo_layers
    weights = np.full(3, 1 / 3, dtype=np.float32) if mix == "average" else np.float32(mix)
    expected = layers[0] * weights[0]
    for j in (1, 2):
        expected = expected + layers[j] * weights[j]
    assert expected.dtype == np.float32
    np.testing.assert_array_equal(doc._.elmo, expected)
    with pytest.raises(ValueError, match="2 weights for 3 layers"):
        mix_layers(weights[:2], layers)


def test_float16_and_mix_only_storage(fixture_dir, fixture_bilm):
    expected = fixture_bilm.embed([SENTENCES[0]])[0]
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo", config={"weights": str(fixture_dir), "store": "float16", "keep_layers": False}
    )
    doc = nlp(words_doc(nlp, SENTENCES[0]))
    assert doc._.elmo_data.layers is None and doc._.elmo_data.mixed.dtype == np.float16
    assert doc._.elmo_layers is None
    assert doc._.elmo.dtype == np.float16  # the stored dtype
    np.testing.assert_allclose(doc._.elmo, expected.mean(0), atol=2e-3, rtol=2e-3)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "store": "float16"})
    # the views the README names: float16, the layers float32
    doc = nlp(words_doc(nlp, SENTENCES[0]))
    assert doc._.elmo.dtype == doc[0]._.elmo.dtype == doc[0:3]._.elmo.dtype == np.float16
    assert doc._.elmo_data.layers.dtype == np.float16 and doc._.elmo_layers.dtype == np.float32


def test_sentences_are_separate_inputs(nlp, fixture_bilm):
    words = SENTENCES[0] + SENTENCES[1]
    starts = [True] + [False] * (len(SENTENCES[0]) - 1) + [True] + [False] * (len(SENTENCES[1]) - 1)
    with_sents = nlp(words_doc(nlp, words, starts))
    no_sents = nlp(words_doc(nlp, words))  # the built-in split finds the same two sentences
    expected = np.concatenate(fixture_bilm.embed(SENTENCES[:2]), axis=1)
    np.testing.assert_allclose(with_sents._.elmo_layers, expected, atol=FLOAT32_ATOL)
    np.testing.assert_allclose(no_sents._.elmo_layers, expected, atol=FLOAT32_ATOL)


def test_whitespace_tokens_get_zeros_and_do_not_change_neighbours(nlp):
    plain = nlp("Hello there . How are you ?")
    spaced = nlp("Hello  there .\n\nHow are you ?")
    spaces = [t.i for t in spaced if t.is_space]
    assert len(spaces) == 2
    layers = spaced._.elmo_layers
    assert not layers[:, spaces].any()
    kept = [t.i for t in spaced if not t.is_space]
    np.testing.assert_allclose(layers[:, kept], plain._.elmo_layers, atol=FLOAT32_ATOL)
    assert np.abs(layers[:, kept]).sum(-1).min() > 0


def test_empty_and_whitespace_only_docs(nlp):
    for text in ("", "   ", "\n\n \t"):
        doc = nlp(text)
        assert doc._.elmo_layers.shape == (3, len(doc), 32)
        assert not doc._.elmo.any()
    assert nlp("")[0:0]._.elmo.shape == (32,)


def test_rule_sentences():
    texts = 'He said " Go . " Then he left ! Why ? ( Really ... ) Fine'.split()
    assert rule_sentences(texts) == [(0, 6), (6, 10), (10, 12), (12, 16), (16, 17)]
    assert rule_sentences([]) == []
    assert rule_sentences(list("我们喜欢北京。「猫在睡觉！」好？")) == [(0, 7), (7, 14), (14, 16)]


def test_windows_cover_long_sentences_once():
    wins = windows_of([(0, 5), (5, 1005)], max_length=100)
    assert wins[0] == Window(0, 5, 0, 5)
    kept = [i for w in wins for i in range(w.keep_start, w.keep_end)]
    assert kept == list(range(1005))
    for w in wins:
        assert w.end - w.start <= 100 and w.start <= w.keep_start < w.keep_end <= w.end
    inner = [w for w in wins[1:] if w.keep_start > 5 + 25 and w.keep_end < 1005 - 25]
    assert inner and all(w.keep_start - w.start == 25 and w.end - w.keep_end == 25 for w in inner)


@pytest.mark.parametrize("max_length", [4, 7, 64, 128])
def test_no_window_is_read_twice(max_length):
    """Every length up to 5,000 (for windows of 4 and 7 tokens up to 1,000: their checks' work grows
    as the square of the last length): each token kept once, with at least a quarter window of
    context on each side where the sentence has it, and no window the biLM reads twice."""
    context = max_length // 4
    last, every = (1000, 1) if max_length < 64 else (5000, 7)
    for n in range(max_length + 1, last, every):
        wins = windows_of([(0, n)], max_length)
        assert [i for w in wins for i in range(w.keep_start, w.keep_end)] == list(range(n))
        assert len({(w.start, w.end) for w in wins}) == len(wins), (n, wins[-3:])
        for w in wins:
            assert w.end - w.start <= max_length
            assert w.keep_start - w.start >= min(context, w.keep_start)
            assert w.end - w.keep_end >= min(context, n - w.keep_end)


@pytest.mark.parametrize("mark", [*".!?…。！？｡؟۔।॥", "...", "?!", "。。"])
def test_each_sentence_final_mark_the_readme_names_ends_a_sentence(mark):
    """README: the built-in split is after `. ! ? …`, CJK, Arabic and Devanagari marks (a token of
    them only)."""
    assert rule_sentences(["a", "b", mark, "c", "d"]) == [(0, 3), (3, 5)]


def test_a_word_holding_a_period_ends_no_sentence():
    assert rule_sentences(["Mr.", "Smith", "saw", "U.S.", "troops", "3.5", "km", "."]) == [(0, 8)]


def test_every_closing_mark_after_the_end_stays_in_its_sentence():
    texts = ["He", "said", '"', "go", ".", "'", '"', ")", "Then", "."]
    assert rule_sentences(texts) == [(0, 8), (8, 10)]


def test_use_sents_chooses_the_docs_sentences_or_the_built_in_split(fixture_dir, fixture_bilm):
    """Sentence boundaries that are not the built-in split's: the biLM reads the Doc's sentences
    with `use_sents` (the default), the built-in split's without it."""
    words = SENTENCES[0] + SENTENCES[1]
    starts = [i in (0, 4) for i in range(len(words))]  # "The quick brown fox" | "jumped ..."
    by_doc = np.concatenate(fixture_bilm.embed([words[:4], words[4:]]), axis=1)
    by_rule = np.concatenate(fixture_bilm.embed(SENTENCES[:2]), axis=1)
    for use_sents, expected in ((True, by_doc), (False, by_rule)):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "use_sents": use_sents})
        doc = nlp(words_doc(nlp, words, starts))
        np.testing.assert_allclose(doc._.elmo_layers, expected, atol=FLOAT32_ATOL)


def test_windows_of_a_long_sentence_read_max_length_tokens_each():
    """No window is shorter than the sentence allows: the first and last windows take their
    context from the one side they have, so each reads exactly `max_length` tokens."""
    for max_length in (4, 7, 8, 64):
        for n in range(max_length + 1, 6 * max_length):
            wins = windows_of([(3, 3 + n)], max_length)
            assert all(w.end - w.start == max_length for w in wins), (max_length, n, wins)
            assert (wins[0].start, wins[-1].end) == (3, 3 + n)


def test_a_long_sentence_gets_the_kept_centre_of_each_window(fixture_dir, fixture_bilm):
    """A 30-token sentence without sentence-final punctuation, `max_length` 8, whitespace tokens
    between its words: each token's layers are those of the window that keeps it, embedded alone
    (at its place in that window); the whitespace tokens zeros."""
    words = ["w%d" % i for i in range(30)]
    with_spaces = [w for i, w in enumerate(words) for w in ([w, "\n"] if i % 7 == 3 else [w])]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "max_length": 8})
    doc = nlp(Doc(nlp.vocab, words=with_spaces))
    expected = np.zeros((3, len(words), 32), dtype=np.float32)
    for start, end, keep_start, keep_end in windows_of([(0, len(words))], 8):
        window = fixture_bilm.embed([words[start:end]])[0]
        expected[:, keep_start:keep_end] = window[:, keep_start - start : keep_end - start]
    kept = [t.i for t in doc if not t.is_space]
    assert len(kept) == len(words) and len(doc) > len(words)
    np.testing.assert_allclose(doc._.elmo_layers[:, kept], expected, atol=FLOAT32_ATOL)
    assert not doc._.elmo_layers[:, [t.i for t in doc if t.is_space]].any()


def test_long_doc_in_windows(fixture_dir):
    """A 100,000-token Doc without sentence-final punctuation: bounded windows, every token
    embedded."""
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo",
        config={
            "weights": str(fixture_dir),
            "store": "float16",
            "max_length": 64,
            "cache_at_inference": True,
            "model": {"batch_size": 32},
        },
    )
    rng = random.Random(0)
    vocab = ["w%d" % i for i in range(5000)]
    doc = nlp(Doc(nlp.vocab, words=[rng.choice(vocab) for _ in range(100_000)]))
    layers = doc._.elmo_data.layers
    assert layers.shape == (3, 100_000, 32) and layers.dtype == np.float16
    assert np.abs(layers[2].astype("f")).sum(-1).min() > 0
    elmo = nlp.get_pipe("elmo")
    assert len(elmo.cache) > 100_000 // 64  # one entry per window, each at most 64 tokens


def test_batch_composition_does_not_change_outputs(nlp):
    docs = [" ".join(s) for s in SENTENCES]
    alone = [nlp(text)._.elmo_layers for text in docs]
    elmo = nlp.get_pipe("elmo")
    for batch_size in (1, 2, 5):
        elmo.cache.clear()
        together = [d._.elmo_layers for d in nlp.pipe(reversed(docs), batch_size=batch_size)][::-1]
        for a, b in zip(alone, together):
            np.testing.assert_allclose(a, b, atol=FLOAT32_ATOL)


def test_pipe_keeps_order(nlp):
    texts = [" ".join(SENTENCES[i % 5][: 1 + i % 7]) for i in range(40)]
    docs = list(nlp.pipe(texts, batch_size=7))
    assert [d.text for d in docs] == texts
    for doc in docs:
        assert doc._.elmo.shape == (len(doc), 32)


TRAINING = {"training": {"annotating_components": ["elmo"]}}  # as `spacy train` runs elmo


def test_cached_features_equal_fresh_ones(fixture_dir):
    nlp = spacy.blank("en", config=TRAINING)
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    texts = [" ".join(s) for s in SENTENCES]
    # training: the cache is on
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(t), {}) for t in texts])
    fresh_nlp = spacy.blank("en")
    fresh_nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_mb": 0})
    fresh_nlp.initialize(lambda: [Example.from_dict(fresh_nlp.make_doc(t), {}) for t in texts])
    first = [d._.elmo_layers for d in nlp.pipe(texts)]
    elmo = nlp.get_pipe("elmo")
    assert elmo.cache.misses == len(texts) and elmo.cache.hits == 0
    second = [d._.elmo_layers for d in nlp.pipe(texts)]
    assert elmo.cache.hits == len(texts)
    fresh = [d._.elmo_layers for d in fresh_nlp.pipe(texts)]
    assert len(fresh_nlp.get_pipe("elmo").cache) == 0
    for a, b, c in zip(first, second, fresh):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, atol=FLOAT32_ATOL)


def test_feature_cache_is_bounded_lru():
    cache = FeatureCache(max_bytes=1000)
    for i in range(10):
        cache.put(("a", i), np.zeros(50, dtype=np.float32))  # 200 bytes each
    assert cache.nbytes <= 1000 and len(cache) == 5
    assert cache.get(("a", 9)) is not None and cache.get(("a", 0)) is None


def test_the_feature_cache_evicts_the_least_recently_read_and_counts_each_array_once():
    """LRU, not first in first out: a read keeps an entry; an array of exactly the bound fits; a
    key put again is neither stored twice nor counted twice."""
    cache = FeatureCache(max_bytes=600)
    arrays = {key: np.full(50, key, dtype=np.float32) for key in range(4)}  # 200 bytes each
    for key in range(3):
        cache.put(key, arrays[key])
    assert cache.get(0) is arrays[0]  # 0 read: 1 is now the least recently used
    cache.put(3, arrays[3])
    assert sorted(cache.entries) == [0, 2, 3] and cache.nbytes == 600
    cache.put(3, arrays[3])
    assert len(cache) == 3 and cache.nbytes == 600
    whole = FeatureCache(max_bytes=200)
    whole.put("a", arrays[0])
    assert whole.get("a") is arrays[0] and whole.nbytes == 200


def test_the_feature_cache_holds_no_long_token_texts_beyond_its_bound():
    """`cache_mb` counted the arrays only, and each was keyed on its sentence's full token texts:
    100 sentences holding a 100 KB token kept 10 MB under a 64 KB bound. Keyed on a digest now."""
    cache = FeatureCache(max_bytes=2**16)

    def fill():
        for i in range(100):
            sentence = ["%04d" % i + "x" * 100_000, "."]
            cache.through("prefix", [sentence], lambda seqs: [np.zeros((3, 2, 4), np.float32)])

    held = held_after(fill)
    assert len(cache) == 100 and cache.nbytes == 100 * 96
    assert held < 2**16, f"{held:,} bytes held"
    # the README: "each keyed by a 32-byte digest of its sentence's tokens"
    assert {(prefix, len(digest)) for prefix, digest in cache.entries} == {("prefix", 32)}
    for same, sentence in [
        (True, ["0000" + "x" * 100_000, "."]),
        (False, ["0000" + "x" * 100_001, "."]),  # one character more
        (False, ["0000" + "x" * 100_000 + ".", ""]),  # the same characters in other tokens
        (False, ["0000" + "x" * 100_000, ".", ""]),
    ]:
        found = cache.through("prefix", [sentence], lambda seqs: [np.ones(1)])[0]
        assert (found.sum() == 0) == same


def test_inference_is_not_answered_from_the_cache(nlp, fixture_dir, tmp_path):
    """At inference (a pipeline added or loaded, or initialized without training with elmo) every
    call computes: repeated texts are not answered from memory, so `spacy benchmark speed`, which
    repeats its Docs, measures the biLM, and a stream of Docs does not fill the cache. Where
    training annotates with elmo, `initialize` turns the cache on; `cache_at_inference` keeps it
    on after loading."""
    texts = [" ".join(s) for s in SENTENCES]
    elmo = nlp.get_pipe("elmo")
    for initialized in (False, True):  # spaCy's made-up examples, as `nlp.initialize()` makes
        if initialized:
            nlp.initialize()
        for _ in range(2):
            list(nlp.pipe(texts))
        assert len(elmo.cache) == 0 and elmo.cache.hits == 0
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    for _ in range(2):
        list(loaded.pipe(texts))
    assert len(loaded.get_pipe("elmo").cache) == 0
    training = spacy.load(tmp_path / "pipeline", config=TRAINING)
    training.initialize(lambda: [Example.from_dict(training.make_doc(t), {}) for t in texts])
    for _ in range(2):
        list(training.pipe(texts))
    assert training.get_pipe("elmo").cache.hits == len(texts)
    kept = spacy.load(
        tmp_path / "pipeline", config={"components": {"elmo": {"cache_at_inference": True}}}
    )
    for _ in range(2):
        list(kept.pipe(texts))
    assert kept.get_pipe("elmo").cache.hits == len(texts)


def test_initialize_without_training_with_elmo_keeps_cache_at_inference(fixture_dir):
    """`initialize` turns the cache on where training annotates with elmo, and never off: a
    pipeline initialized without that keeps `cache_at_inference`."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_at_inference": True})
    nlp.initialize()
    for _ in range(2):
        nlp("A second , rather shorter sentence .")
    assert elmo.caching and elmo.cache.hits == 1


def test_cache_key_includes_state_policy(fixture_dir):
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_at_inference": True})
    warm = nlp("A second , rather shorter sentence .")._.elmo_layers
    elmo.bilm.state_policy = "zero"
    zero = nlp("A second , rather shorter sentence .")._.elmo_layers
    assert elmo.cache.hits == 0 and len(elmo.cache) == 2
    assert not np.allclose(warm, zero)


def test_carry_is_never_answered_from_the_cache(fixture_dir):
    """Under "carry" a sentence's vectors depend on the calls before: the cache stays out."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_at_inference": True})
    elmo.bilm.state_policy = "carry"
    first, second = (nlp("A second , rather shorter sentence .")._.elmo_layers for _ in range(2))
    assert len(elmo.cache) == 0 and elmo.cache.hits == 0
    assert not np.allclose(first[1:], second[1:])


@pytest.mark.parametrize("max_length", [3, 0, -4])
def test_max_length_below_4_is_refused(max_length):
    """Windows keep `max_length // 4` tokens of context on each side: 4 is the least with any."""
    with pytest.raises(ValueError, match="max_length must be an integer of at least 4"):
        spacy.blank("en").add_pipe("elmo", config={"max_length": max_length})
    spacy.blank("en").add_pipe("elmo", config={"max_length": 4})


def test_cache_key_includes_the_precision_and_the_weights(fixture_dir):
    """The cache is keyed by the biLM's fingerprint and precision too: after either changes, a
    sentence is computed again, as a biLM loaded with them computes it."""
    words = "A second , rather shorter sentence .".split()
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_at_inference": True})
    float32 = nlp(Doc(nlp.vocab, words=words))._.elmo_layers
    elmo.bilm.precision = "int8"
    int8 = nlp(Doc(nlp.vocab, words=words))._.elmo_layers
    assert elmo.cache.hits == 0 and len(elmo.cache) == 2
    want = load_bilm(fixture_dir, precision="int8").embed([words])[0]
    np.testing.assert_allclose(int8, want, atol=FLOAT32_ATOL)
    assert not np.allclose(int8, float32, atol=FLOAT32_ATOL)
    elmo.bilm.precision = "float32"
    state = {k: v * 0.5 for k, v in elmo.bilm.network.state_dict().items()}
    elmo.bilm.network.load_state_dict(state)  # other weights, in place
    halved = nlp(Doc(nlp.vocab, words=words))._.elmo_layers
    assert elmo.cache.hits == 0 and len(elmo.cache) == 3
    other = load_bilm(fixture_dir)
    other.network.load_state_dict(state)
    np.testing.assert_allclose(halved, other.embed([words])[0], atol=FLOAT32_ATOL)
    assert not np.allclose(halved, float32, atol=FLOAT32_ATOL)


def test_vector_hooks(fixture_dir, monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "vector_hooks": True})
    monkeypatch.setattr("spacy_elmo.workers._warned", set())  # each said once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = nlp("The cat sat .  The dog sat .")
    assert not [w for w in caught if "stay in this worker" in str(w.message)]  # not a worker
    np.testing.assert_allclose(doc[1].vector, doc[1]._.elmo)
    kept = [t.i for t in doc if not t.is_space]
    np.testing.assert_allclose(doc.vector, doc._.elmo[kept].mean(0), atol=FLOAT32_ATOL)
    np.testing.assert_allclose(doc[0:3].vector, doc[0:3]._.elmo, atol=FLOAT32_ATOL)
    a, b = doc[1], doc[6]
    cos = float(a.vector @ b.vector / np.linalg.norm(a.vector) / np.linalg.norm(b.vector))
    assert a.similarity(b) == pytest.approx(cos, abs=1e-5)
    assert doc.has_vector and doc[0].has_vector
    assert doc[0:3].similarity(doc[5:8]) > 0
    space = doc[4]  # a whitespace token: a zero vector, whose similarity is 0.0, as spaCy's
    assert space.is_space and not space.vector.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert space.similarity(doc[1]) == doc[1].similarity(space) == 0.0


def test_vector_norms_of_float16_vectors_are_finite(fixture_dir):
    """spaCy squared the float16 hook vector itself for `vector_norm`: a norm over 256 (its
    squares past float16's 65504) came back infinite."""
    nlp = spacy.blank("en")
    config = {"weights": str(fixture_dir), "vector_hooks": True, "store": "float16"}
    nlp.add_pipe("elmo", config=config)
    doc = nlp("The cat sat .")
    data = doc._.elmo_data
    doc._.elmo_data = ElmoDocData(
        np.full_like(data.layers, 100), None, data.mix_weights, data.spans, orths=data.orths
    )
    expected = 100 * np.sqrt(doc._.elmo.shape[1])
    for part in (doc[1], doc[0:2], doc):
        assert part.vector_norm == pytest.approx(expected, rel=1e-6)


def test_similarity_with_other_vectors_is_one_error_or_zero_with_spacys_warning(fixture_dir):
    """Against vectors of another width, similarity was numpy's broadcasting error; against a
    Doc without vectors, 0.0 without spaCy's warning."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "vector_hooks": True})
    doc = nlp("The cat sat .")
    other = spacy.blank("en")
    other.vocab.set_vector("cat", np.ones(5, "f"))
    with pytest.raises(ElmoError, match="32-wide ELMo vectors .* 5-wide vectors"):
        doc.similarity(other("a cat"))
    with pytest.warns(UserWarning, match="W008"):
        assert doc[1].similarity(spacy.blank("en")("no vectors")) == 0.0


def test_memory_zone_keeps_memory_flat(fixture_dir):
    rng = random.Random(1)
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "cache_at_inference": True})
    elmo.cache.max_bytes = 200_000
    n_strings = len(nlp.vocab.strings)
    for _ in range(3):
        with nlp.memory_zone():
            texts = [
                " ".join("x%d" % rng.randrange(10**9) for _ in range(12)) + " ." for _ in range(50)
            ]
            for doc in nlp.pipe(texts):
                assert doc._.elmo.shape == (13, 32)
    assert len(nlp.vocab.strings) == n_strings
    assert elmo.cache.nbytes <= 200_000
    assert len(elmo.bilm.token_cache.slots) <= elmo.bilm.token_cache.capacity


def test_weights_load_lazily_and_on_initialize(fixture_dir):
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    from spacy_elmo.layers import get_embedder

    assert get_embedder(elmo.model) is None  # the factory builds from sizes alone
    nlp("Lazy loading works .")
    assert get_embedder(elmo.model) is not None
    nlp2 = spacy.blank("en")
    elmo2 = nlp2.add_pipe("elmo", config={"weights": str(fixture_dir)})
    nlp2.initialize()
    assert get_embedder(elmo2.model) is not None


def test_weights_take_an_options_and_weight_file_pair(nlp, fixture_dir):
    pair = [str(fixture_dir / "options.json"), str(fixture_dir / "lm_weights.hdf5")]
    expected = nlp("The cat sat .")._.elmo_layers
    for weights in (pair, tuple(pair)):
        paired = spacy.blank("en")
        paired.add_pipe("elmo", config={"weights": weights})
        np.testing.assert_array_equal(paired("The cat sat .")._.elmo_layers, expected)
    initialized = spacy.blank("en")
    initialized.add_pipe("elmo")
    initialized.config["initialize"]["components"]["elmo"] = {"weights": pair}
    initialized.initialize()
    np.testing.assert_array_equal(initialized("The cat sat .")._.elmo_layers, expected)
    missing = spacy.blank("en")
    missing.add_pipe("elmo", config={"weights": [pair[0], pair[1] + ".gone"]})
    match = r"\[components.elmo\] weights: ELMo weight file not found"
    with pytest.raises(ValueError, match=match):
        missing.initialize()
    with pytest.raises(ValueError, match=match):
        missing("The cat sat .")


def test_clear_errors(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(ValueError, match="no ELMo weights"):
        nlp("no weights")
    with pytest.raises(ValueError, match="store must be"):
        spacy.blank("en").add_pipe("elmo", config={"store": "int8"})
    # stored only the mix, silently
    with pytest.raises(ValueError, match="save_layers needs keep_layers"):
        spacy.blank("en").add_pipe("elmo", config={"keep_layers": False, "save_layers": True})
    options = BiLM(
        BiLMOptions.from_dict(
            {
                "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8]], "n_highway": 1},
                "lstm": {
                    "projection_dim": 8,
                    "dim": 16,
                    "n_layers": 2,
                    "use_skip_connections": True,
                },
            }
        )
    ).options.to_dict()
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "model": {"options": options}})
    with pytest.raises(
        ValueError, match="disagree with the weights.*projection_dim: config 8, weights 16"
    ):
        nlp.initialize()
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": [0.5, 0.5]})
    with pytest.raises(ValueError, match="mix has 2 weights but the biLM has 3"):
        nlp("x")


def test_size_errors_name_the_model_of_an_elmo_of_any_name(fixture_dir):
    """ElmoModel.v1's options that are invalid or differ from the weights named the section
    [components.elmo.model.options], another component's where the elmo component has another
    name (two elmo components need two names): they name the model's options."""
    nlp = spacy.blank("en")
    options = {"lstm": {"projection_dim": 8, "dim": 16, "n_layers": 2, "cell_clip": 3}}
    options["char_cnn"] = {"embedding": {"dim": 4}, "filters": [[1, 4]], "n_highway": 1}
    options["char_cnn"].update(n_characters=262, max_characters_per_token=50, activation="relu")
    options["lstm"].update(proj_clip=3, use_skip_connections=True)
    nlp.add_pipe(
        "elmo", name="elmo_b", config={"weights": str(fixture_dir), "model": {"options": options}}
    )
    with pytest.raises(ValueError) as sizes:
        nlp.initialize()
    invalid = {"lstm": {"dim": -1}}
    with pytest.raises(ValueError) as bad:
        spacy.blank("en").add_pipe("elmo", name="elmo_b", config={"model": {"options": invalid}})
    assert "disagree with the weights" in str(sizes.value)
    for err in (sizes, bad):
        assert "components.elmo." not in str(err.value)
        assert "spacy_elmo.ElmoModel.v1" in str(err.value)


def test_factory_and_architectures_via_entry_points(fixture_dir):
    """A fresh interpreter finds `elmo` and the architectures without importing spacy_elmo."""
    code = (
        "import spacy\n"
        "nlp = spacy.blank('en')\n"
        f"nlp.add_pipe('elmo', config={{'weights': {str(fixture_dir)!r}}})\n"
        "doc = nlp('It works .')\n"
        "print(doc._.elmo.shape)\n"
        "from spacy.util import registry\n"
        "for name in ('spacy_elmo.ElmoModel.v1', 'spacy_elmo.ElmoFeatures.v1', "
        "'spacy_elmo.ElmoMultiHashEmbed.v1'):\n"
        "    registry.architectures.get(name)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(3, 32)"


def readme_settings() -> dict:
    """`{setting: default}` from the README's table of the `elmo` component's settings."""
    text = README.read_text(encoding="utf-8").split("## The `elmo` component", 1)[1]
    rows = [line.split(" | ") for line in text.split("\n\n", 2)[1].splitlines()[2:]]
    settings = {}
    for names, defaults, _ in rows:
        names = re.findall(r"`([\w.]+)`", names)
        values = [json.loads(v.strip("` ")) for v in defaults.split(", ")]
        assert len(names) == len(values), (names, defaults)
        settings.update(zip(names, values))
    return settings


def test_the_readmes_settings_table_gives_the_factorys_defaults():
    """Every setting of `elmo` and of its model is in the README's table, at the default the code
    has (a default changed in one place only, or a setting added without its row, fails)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    factory = {k: v for k, v in nlp.config["components"]["elmo"].items() if k != "factory"}
    model = {f"model.{k}": v for k, v in factory.pop("model").items() if not k.startswith("@")}
    assert readme_settings() == {**factory, **model}


@pytest.mark.parametrize(
    "config, setting",
    [
        ({"threads": 100_000}, "threads"),
        ({"model": {"token_cache_size": 10**11}}, "token_cache_size"),
        ({"model": {"token_cache_size": -1}}, "token_cache_size"),
    ],
)
def test_unbounded_settings_are_one_config_error(fixture_dir, config, setting):
    """threads=100000 crashed in torch ('could not create a primitive'), token_cache_size=10**11
    tried to allocate 6.4 TB and -1 silently turned the cache off (issue 32 item 8)."""
    from spacy_elmo import ElmoConfigError
    from spacy_elmo.pipeline import DEFAULT_MODEL_CONFIG

    nlp = spacy.blank("en")
    if "model" in config:
        model = dict(
            spacy.util.load_config_from_str(DEFAULT_MODEL_CONFIG)["model"], **config["model"]
        )
        config = {"model": model}
    with pytest.raises(ElmoConfigError, match=setting):
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), **config})
        nlp.initialize()
        nlp("The cat sat .")


def test_a_float16_mix_beyond_its_range_is_an_error_not_infinities(fixture_dir):
    """`store="float16"` keeps the layers in float16; a mix whose sums pass float16's range (65504)
    is one ElmoFileError when the Doc is made, as with `keep_layers` false, never infinities in
    `doc._.elmo` or a stored Doc."""
    for keep_layers in (True, False):
        nlp = spacy.blank("en")
        config = {"store": "float16", "mix": [1e4, 1e4, 1e4], "keep_layers": keep_layers}
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), **config})
        with pytest.raises(ElmoFileError, match="float16.s range"):
            nlp("The cat sat on the mat .")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "store": "float16"})
    doc = nlp("The cat sat on the mat .")
    assert np.isfinite(doc._.elmo).all() and doc._.elmo.dtype == np.float16


def test_a_mix_of_the_wrong_length_is_an_error_at_initialize(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": [0.5, 0.5]})
    with pytest.raises(ValueError, match="mix has 2 weights but the biLM has 3"):
        nlp.initialize()


def test_the_model_without_weights_is_one_elmo_error():
    """The component's thinc model called before its weights are set (`model.predict` before
    `nlp.initialize`, as `spacy debug model` and users' scripts may)."""
    nlp = spacy.blank("en")
    model = nlp.add_pipe("elmo").model
    with pytest.raises(ElmoError, match="no weights yet: set the 'weights'"):
        model.predict([["The", "cat"]])


def test_a_whitespace_only_sentence_gets_no_window():
    """A sentence of whitespace tokens only (the Doc's own boundaries) is no biLM input: no empty
    window, the other sentences' windows counted over the non-whitespace tokens."""
    from spacy_elmo.doc_windows import doc_windows

    doc = Doc(spacy.blank("en").vocab, words=["a", ".", "\n\n", "b"], sent_starts=[1, 0, 1, 1])
    keep, wins = doc_windows(doc, use_sents=True, max_length=64)
    assert keep.tolist() == [0, 1, 3]
    assert wins == [Window(0, 2, 0, 2), Window(2, 3, 2, 3)]


def test_the_layers_put_together_are_read_only_with_zeros_for_whitespace():
    from spacy_elmo.doc_windows import doc_layers, doc_windows

    doc = Doc(spacy.blank("en").vocab, words=["a", "\n", "b", "."])
    plan = doc_windows(doc, use_sents=False, max_length=64)
    outputs = [np.arange(3 * 3 * 2, dtype=np.float32).reshape(3, 3, 2) + 1]
    layers = doc_layers(doc, plan, outputs, 3, 2, np.float32)
    assert not layers.flags.writeable and not layers[:, 1].any()
    np.testing.assert_array_equal(layers[:, [0, 2, 3]], outputs[0])
