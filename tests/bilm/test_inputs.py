"""Edge cases of the input: empty, tiny, huge, long tokens, odd Unicode, wrong types."""

import numpy as np
import pytest

from spacy_elmo import ElmoConfigError, load_bilm
from spacy_elmo.bilm import batch_char_ids, word_char_ids

from ..helpers import FLOAT32_ATOL
from ..reference_bilm import ReferenceBiLM

# also run on MKL's compatible path and torch's default kernels (.ci/run)
pytestmark = pytest.mark.numeric


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


@pytest.mark.parametrize(
    "text", ["東京", "🙂👍🏽", "e\u0301\u0301", "tab\there\x00\x07", "\u200b", "ǅ"]
)
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
    for bad in (None, 5):  # not iterable: 'NoneType' object is not iterable, naming no sentence
        with pytest.raises(TypeError, match=f"sentence 1 is a {type(bad).__name__} "):
            bilm.embed([["ok"], bad])
    expected = bilm.embed([["a", "b"]], batch_size=4)
    np.testing.assert_array_equal(bilm.embed([["a", "b"]], batch_size=np.int64(4))[0], expected[0])
    with pytest.raises(ElmoConfigError, match="the path is empty"):
        load_bilm("")  # Path("") is the working directory
    with pytest.raises(ElmoConfigError, match=r"token cache size \(cache_size"):
        load_bilm("small", cache_size=-1)


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


def _ids_uncached(text: str, max_chars: int = 50) -> list:
    """bilm-tf's ids of a token, computed from the whole text (what the cache must agree with)."""
    if text in ("<S>", "</S>"):
        body = [256 if text == "<S>" else 257]
    else:
        body = list(text.encode("utf-8", "ignore")[: max_chars - 2])
    return [259, *(b + 1 for b in body), 260] + [261] * (max_chars - len(body) - 2)


@pytest.mark.parametrize("max_chars", [50, 5, 6, 8])
def test_char_ids_of_long_tokens_are_those_of_the_whole_text(max_chars):
    """The char-id cache keys a token by a prefix that determines its ids: cuts inside a multibyte
    character, characters that encode to nothing (lone surrogates) before the cut, and texts that
    begin like `<S>`."""
    texts = [
        "a" * 47 + "é" + "x" * 100,
        "é" * 30,
        "🙂" * 20 + "tail",
        "\ud800" * 60 + "abc",
        "\ud800" * 3 + "<S>",
        "<S>",
        "</S>",
        "<S>x",
        "</S>yz",
        "<S>" * 30,
        "a\ud800" * 40,
        "",
        "é",
        "x" * 48,
        "x" * 49,
    ]
    for text in texts + texts[::-1]:
        assert list(word_char_ids(text, max_chars)) == _ids_uncached(text, max_chars), (
            text[:60],
            max_chars,
        )


def test_the_char_id_cache_holds_no_long_token():
    """3,000 tokens of 100 KB held 290 MB in the cache (issue 34 item 4): a key is at most as long
    as the ids."""
    import tracemalloc

    word_char_ids("warm-up")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300):
            # 30 MB of token text, each dropped after its call
            word_char_ids(f"{i:04d}" + "y" * 100_000)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_000_000, f"{held:,} bytes held after the calls"


def test_efml_char_table_ids_of_a_long_token_are_those_of_its_48_character_cut():
    """ELMoForManyLangs' ids cut a token at 48 characters (not bytes); they hold nothing between
    calls."""
    import tracemalloc

    from spacy_elmo.bilm import CharTable

    chars = {
        c: i
        for i, c in enumerate(
            ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>", "a", "é", "🙂"]
        )
    }
    table = CharTable(chars, {"<oov>": 0, "<pad>": 1, "é" * 48: 2}, 50)
    long = "é" * 48 + "a" * 100_000
    np.testing.assert_array_equal(table.words_ids([long]), table.words_ids(["é" * 48]))
    assert table.words_ids([long])[0, -1] == 3  # the word id of the cut text
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            table.words_ids([f"{i}" + "a" * 100_000])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_000_000


def test_tensors_of_embed_iter_are_ordinary_tensors(bilm):
    """`as_tensor=True` gave inference tensors: a trained layer on them could not backpropagate
    and an in-place edit raised."""
    import torch

    tensors = list(bilm.embed_iter([["The", "cat"], [], ["sat"]], as_tensor=True))
    assert not any(t.is_inference() for t in tensors)
    weight = torch.ones(tensors[0].shape[-1], requires_grad=True)
    (tensors[0] * weight).sum().backward()
    assert weight.grad is not None
    tensors[2].zero_()
    expected = bilm.embed([["The", "cat"], [], ["sat"]])
    np.testing.assert_array_equal(tensors[0].numpy(), expected[0])
    assert tensors[1].shape == expected[1].shape


@pytest.mark.parametrize("begun,set_meanwhile", [("warm", "carry"), ("carry", "zero")])
def test_an_iteration_keeps_the_state_policy_it_began_with(fixture_dir, begun, set_meanwhile):
    """Setting `state_policy` while an `embed_iter` is consumed gave the rest the vectors of
    neither policy (carry set mid-way ran as zero; a carry iteration went on from zeros once
    another was set): the iteration keeps its own. Setting "carry" afresh starts from zeros."""
    sentences = [["The", "cat", "sat", "."], ["It", "ran", "."]] * 4
    expected = list(load_bilm(fixture_dir, state=begun).embed_iter(sentences, batch_size=1))
    bilm = load_bilm(fixture_dir, state=begun)
    it = bilm.embed_iter(sentences, batch_size=1)
    got = [next(it) for _ in range(3)]
    bilm.state_policy = set_meanwhile
    got += list(it)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    if begun == "carry":
        bilm.state_policy = "carry"
        np.testing.assert_array_equal(bilm.embed(sentences[:1], batch_size=1)[0], expected[0])


def test_a_float64_network_runs_in_float32_precision_only(fixture_dir):
    """`.double()` (the route of the float64 parity tests) under int8 failed inside torch
    ('expected scalar type Float but found Double'); and an empty sentence's tensor was float32
    beside float64 ones."""
    import torch

    from spacy_elmo import ElmoConfigError

    bilm = load_bilm(fixture_dir, precision="int8").double()
    with pytest.raises(ElmoConfigError, match="precision 'int8' runs a float32 network"):
        bilm.embed([["The", "cat"]])
    bilm.precision = "float32"
    tensors = list(bilm.embed_iter([["The", "cat"], []], as_tensor=True))
    assert [t.dtype for t in tensors] == [torch.float64, torch.float64]


@pytest.mark.parametrize("batch_size", [2**24 + 1, 2**60, 2**63])
def test_a_batch_size_beyond_the_bound_is_one_error(fixture_dir, batch_size):
    """`embed_iter` with 2**60 failed inside itertools.islice."""

    for state in ("warm", "carry"):
        bilm = load_bilm(fixture_dir, state=state)
        with pytest.raises(ElmoConfigError, match="batch_size must be an integer from 1 to"):
            list(bilm.embed_iter([["The", "cat"]], batch_size=batch_size))


def test_empty_word_lists_have_the_width_of_their_max_chars():
    """No words: `(0, max_chars)` ids, of the width asked for, not bilm-tf's 50."""
    from spacy_elmo.bilm import ByteIds, words_char_ids

    assert words_char_ids([], 8).shape == (0, 8)
    assert ByteIds(8).words_ids([]).shape == ByteIds(8).key_ids([]).shape == (0, 8)
    assert batch_char_ids([], 8).shape == (0, 2, 8)


def test_a_long_token_beginning_with_lone_surrogates_leaves_no_long_text_in_the_char_id_cache():
    """Characters that encode to nothing before the cut make the key read the whole text: it is
    still cut to `max_chars - 2` bytes."""
    import tracemalloc

    word_char_ids("warm-up")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            word_char_ids("\ud800" * 48 + f"{i:04d}" + "y" * 100_000)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_000_000, f"{held:,} bytes held after the calls"


EFML_CHARS = ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>", *"abos<>/"]


@pytest.mark.parametrize("max_chars", [5, 6, 7, 8, 50])
def test_the_ids_of_a_tokens_key_are_the_ids_of_the_token(max_chars):
    """Token cache keys (`keys`) give the ids of their words (`key_ids`), for bilm-tf's ids and
    ELMoForManyLangs' tables, also where a cut text reads as a boundary token."""
    from spacy_elmo.bilm import ByteIds, CharTable

    chars = {c: i for i, c in enumerate(EFML_CHARS)}
    table = CharTable(chars, {"<oov>": 0, "<pad>": 1, "<bos>": 2, "ab": 3}, max_chars)
    words = ["ab", "<bos>", "<bos>a", "<bos>ab", "<eos>" * 3, "<S>", "<S>a", "</S>ab", "ab" * 40]
    words += ["é" * 30, "\ud800" * 10 + "ab", "A" * 60, ""]
    for ids in (table, ByteIds(max_chars), ByteIds(max_chars, lowercase=True)):
        np.testing.assert_array_equal(ids.key_ids(ids.keys(words)), ids.words_ids(words))


@pytest.mark.parametrize("bad", [7, -1, 10**9])
def test_a_character_id_past_the_embeddings_last_row_is_refused(bad):
    """7 entries for an embedding of 8 rows (row 0 the padding): the ids 0 to 6 index it, 7 (the
    row past the last) is an ElmoFileError, not an IndexError inside torch."""
    from spacy_elmo import ElmoFileError
    from spacy_elmo.bilm import CharTable

    chars = {c: i for i, c in enumerate(EFML_CHARS[:7])}
    ids = CharTable.checked(chars, None, 50, 8, 0, "char.dic").words_ids(["a"])
    assert ids.shape == (1, 50) and ids.max() == 7
    chars["a"] = bad
    with pytest.raises(ElmoFileError, match=f"char.dic: character 'a' has id {bad:,}, outside"):
        CharTable.checked(chars, None, 50, 8, 0, "char.dic")


def test_a_boolean_id_in_a_character_table_file_is_refused():
    """JSON `true` is no id (Python reads it as 1)."""
    from spacy_elmo import ElmoFileError
    from spacy_elmo.bilm import CharTable

    chars = {c: i for i, c in enumerate(EFML_CHARS[:7])}
    text = CharTable(chars, None, 50).to_json()
    assert CharTable.from_json(text, 50, 8, 0, "t.json").chars == chars
    with pytest.raises(ElmoFileError, match="t.json: ids must be integers, got 'True'"):
        CharTable.from_json(text.replace('"a": 6', '"a": true'), 50, 8, 0, "t.json")


def test_a_character_table_refuses_a_token_that_is_no_str():
    from spacy_elmo.bilm import CharTable

    table = CharTable({c: i for i, c in enumerate(EFML_CHARS[:7])}, None, 50)
    for bad in (3, None, b"ab"):
        with pytest.raises(TypeError, match="token texts must be str, got"):
            table.words_ids(["a", bad])


def test_a_character_tables_digest_does_not_depend_on_the_order_of_its_entries():
    """The digest (part of a model's fingerprint) is of the entries, not of the order a file
    listed them in."""
    from spacy_elmo.bilm import CharTable

    chars = {c: i for i, c in enumerate(EFML_CHARS[:7])}
    words = {"<oov>": 0, "<pad>": 1, "Hund": 2}
    reordered = CharTable(dict(reversed(chars.items())), dict(reversed(words.items())), 50)
    assert reordered.digest() == CharTable(chars, words, 50).digest()
    assert CharTable(chars, {**words, "Hund": 1, "<pad>": 2}, 50).digest() != reordered.digest()
