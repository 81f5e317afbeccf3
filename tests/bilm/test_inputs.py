"""Edge cases of the input: empty, tiny, huge, long tokens, odd Unicode, wrong types."""
import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.bilm import batch_char_ids, word_char_ids

from ..helpers import FLOAT32_ATOL
from ..reference_bilm import ReferenceBiLM

pytestmark = pytest.mark.numeric  # also run on MKL's compatible path and torch's default kernels (.ci/run)


@pytest.fixture(scope="module")
def bilm(fixture_dir):
    return load_bilm(fixture_dir, state="warm")


def test_no_sentences(bilm):
    assert bilm.embed([]) == []
    assert list(bilm.embed_iter(iter([]))) == []


def test_zero_length_sentence(bilm):
    out = bilm.embed([[], ["a", "b"], []])
    assert [o.shape for o in out] == [(3, 0, 32), (3, 2, 32), (3, 0, 32)]
    assert out[0].dtype == np.float32
    np.testing.assert_allclose(out[1], bilm.embed([["a", "b"]])[0], atol=FLOAT32_ATOL)


def test_one_token_sentence_matches_reference(bilm, fixture_dir):
    ref = ReferenceBiLM(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    zero = load_bilm(fixture_dir, state="zero")
    out = zero.embed([["Hello"]])[0]
    assert out.shape == (3, 1, 32)
    np.testing.assert_allclose(out, ref.run(["Hello"])[0], atol=FLOAT32_ATOL)


def test_two_thousand_token_sentence(bilm, fixture_dir):
    rng = np.random.default_rng(0)
    vocab = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    long = [vocab[i] for i in rng.integers(0, len(vocab), 2000)]
    out = bilm.embed([long, ["short"]], batch_size=4)
    assert out[0].shape == (3, 2000, 32)
    assert np.isfinite(out[0]).all()
    # the forward half of the first 10 tokens only depends on what came before them
    head = bilm.embed([long[:10]])[0]
    np.testing.assert_allclose(out[0][1:, :10, :16], head[1:, :, :16], atol=FLOAT32_ATOL)
    # layer 0 is position-independent
    np.testing.assert_allclose(out[0][0, :10], head[0], atol=FLOAT32_ATOL)


def test_long_token_embeds_like_its_48_byte_cut(bilm):
    long = "pneumonoultramicroscopicsilicovolcanoconiosis" * 2  # 90 bytes
    cut = long.encode()[:48].decode()
    a, b = bilm.embed([["a", long, "b"], ["a", cut, "b"]])
    np.testing.assert_array_equal(word_char_ids(long), word_char_ids(cut))
    np.testing.assert_allclose(a, b, atol=FLOAT32_ATOL)


@pytest.mark.parametrize("text", ["東京", "🙂👍🏽", "e\u0301\u0301", "tab\there\x00\x07", "\u200b", "ǅ"])
def test_unicode_char_ids_are_utf8_bytes(text):
    ids = word_char_ids(text)
    raw = list(text.encode("utf-8"))
    assert ids[0] == 259 and ids[len(raw) + 1] == 260
    assert list(ids[1 : len(raw) + 1]) == [b + 1 for b in raw]
    assert (ids[len(raw) + 2 :] == 261).all()


def test_multibyte_character_split_at_the_cut():
    text = "a" * 47 + "é"  # é is 2 bytes: the cut at 48 bytes keeps its first byte only
    ids = word_char_ids(text)
    assert ids[48] == "é".encode()[0] + 1 and ids[49] == 260


def test_boundary_tokens_given_as_text():
    assert list(word_char_ids("<S>")[:4]) == [259, 257, 260, 261]
    assert list(word_char_ids("</S>")[:4]) == [259, 258, 260, 261]
    ids = batch_char_ids([["x"], []])
    assert ids.shape == (2, 3, 50)
    assert (ids[1, 2] == 0).all() and list(ids[1, 1, :3]) == [259, 258, 260]


def test_unicode_sentences_embed(bilm):
    out = bilm.embed([["東京", "🙂", "e\u0301", "\x00"]])[0]
    assert out.shape == (3, 4, 32) and np.isfinite(out).all()


def test_bad_input_types(bilm):
    with pytest.raises(TypeError, match="list of token texts"):
        bilm.embed(["a plain string"])
    with pytest.raises(TypeError, match="must be str"):
        bilm.embed([["ok", 3]])
    with pytest.raises(ValueError, match="batch_size"):
        bilm.embed([["a"]], batch_size=0)


def test_embed_iter_reads_its_input_lazily(bilm):
    """embed_iter consumes its input lazily: it never reads more than a window ahead."""
    consumed = []

    def stream():
        for i in range(10_000):
            consumed.append(i)
            yield ["tok", str(i % 7)]

    it = bilm.embed_iter(stream(), batch_size=16)
    for _ in range(5):
        next(it)
    assert len(consumed) <= 16 * 8
