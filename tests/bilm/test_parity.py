"""Exactness: the fixture's TensorFlow outputs, and the fast path against the numpy reference."""

import json

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import words_char_ids

from ..helpers import FLOAT32_ATOL, FLOAT64_ATOL
from ..reference_bilm import TINY_OPTIONS, ReferenceBiLM, write_random_weights

# also run on MKL's compatible path and torch's default kernels (.ci/run)
pytestmark = pytest.mark.numeric

SENTS = [
    "The quick brown fox jumps over the lazy dog .".split(),
    ["Hi"],
    "A somewhat longer sentence , with commas , numbers like 3.14 and UPPER case words .".split(),
    "naïve café — 東京 🙂".split(),
]


def test_token_layer_matches_tensorflow(fixture_dir):
    bilm = load_bilm(fixture_dir)
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(words) == expected.shape[0] == 458
    with torch.no_grad():
        got = bilm.network.token_encoder(torch.from_numpy(words_char_ids(words))).numpy()
    assert np.abs(got - expected).max() <= FLOAT32_ATOL


def test_token_layer_through_embed_matches_tensorflow(fixture_dir):
    """Layer 0 of `embed` is `[x; x]` with x the TF token layer (via the token cache)."""
    bilm = load_bilm(fixture_dir, state="zero")
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    sentences = [words[i : i + 50] for i in range(0, len(words), 50)]
    layer0 = np.concatenate([out[0] for out in bilm.embed(sentences)])
    assert np.abs(layer0[:, :16] - expected).max() <= FLOAT32_ATOL
    assert np.array_equal(layer0[:, :16], layer0[:, 16:])


def test_carried_state_matches_tensorflow(fixture_dir):
    """10 batches of 3 with states carried, row k of batch i = sentences[k][i]."""
    bilm = load_bilm(fixture_dir, state="carry")
    sentences = json.loads((fixture_dir / "sentences.json").read_text())
    refs = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    worst = 0.0
    for i in range(10):
        out = bilm.embed([sentences[k][i].split() for k in range(3)], batch_size=3)
        for k in range(3):
            expected = refs[k][str(i)][...]  # (2, n, 16): forward, backward top layer
            top = out[k][2]
            assert top.shape == (expected.shape[1], 32)
            worst = max(
                worst,
                np.abs(top[:, :16] - expected[0]).max(),
                np.abs(top[:, 16:] - expected[1]).max(),
            )
    assert worst <= FLOAT32_ATOL


def test_carry_differs_from_zero_after_first_batch(fixture_dir):
    """Sanity of the carry test: without carried state only batch 0 would match."""
    sentences = json.loads((fixture_dir / "sentences.json").read_text())
    carry, zero = load_bilm(fixture_dir, state="carry"), load_bilm(fixture_dir, state="zero")
    first = [[sentences[k][i].split() for k in range(3)] for i in range(2)]
    a0, b0 = carry.embed(first[0], batch_size=3), zero.embed(first[0], batch_size=3)
    np.testing.assert_allclose(a0[0], b0[0], atol=FLOAT32_ATOL)
    a1, b1 = carry.embed(first[1], batch_size=3), zero.embed(first[1], batch_size=3)
    assert np.abs(a1[0][2] - b1[0][2]).max() > 1e-3


def _reference_pair(directory):
    return ReferenceBiLM(directory / "options.json", directory / "weights.hdf5")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("source", ["fixture", "random"])
def test_fast_path_matches_reference_recurrence(source, threads, fixture_dir, tmp_path):
    """With 2 or more threads the two directions run side by side (one thread each): same values,
    and torch's thread count is what it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _check_fast_path(source, fixture_dir, tmp_path)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def _check_fast_path(source, fixture_dir, tmp_path):
    if source == "fixture":
        ref = ReferenceBiLM(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
        path = fixture_dir
    else:
        path = write_random_weights(tmp_path, TINY_OPTIONS, seed=3)
        ref = _reference_pair(path)
    bilm = load_bilm(path, state="zero")
    out = bilm.embed(SENTS, batch_size=2)
    for sent, got in zip(SENTS, out):
        expected, _ = ref.run(sent)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= FLOAT32_ATOL


def _embed_in_child(bilm, queue):
    queue.put(bilm.embed(SENTS)[0])


def test_side_by_side_directions_in_a_forked_child(fixture_dir):
    """A process forked after an embed (spaCy's n_process) embeds too: it makes its own threads."""
    import multiprocessing

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bilm = load_bilm(fixture_dir, state="zero")
        expected = bilm.embed(SENTS)[0]
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_embed_in_child, args=(bilm, queue))
        child.start()
        try:
            got = queue.get(timeout=60)
            child.join(timeout=60)
        finally:
            if child.is_alive():
                child.kill()
        assert child.exitcode == 0
        np.testing.assert_allclose(got, expected, atol=FLOAT32_ATOL)
    finally:
        torch.set_num_threads(before)


def test_random_weights_clip_and_saturate(tmp_path):
    """The random model exercises the clips (else the comparison above would prove less)."""
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=3)
    out = load_bilm(path, state="zero").embed(SENTS)
    top = np.concatenate([o[1] for o in out], axis=0)
    assert np.isclose(np.abs(top).max(), 0.8, atol=1e-6)  # proj_clip reached


def test_warm_and_carry_match_reference_with_state(tmp_path):
    """Carried state across calls equals the reference run with the same state handed on."""
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=5)
    ref = _reference_pair(path)
    bilm = load_bilm(path, state="carry")
    state = None
    for sent in SENTS:
        got = bilm.embed([sent], batch_size=1)[0]
        expected, state = ref.run(sent, state)
        assert np.abs(got - expected).max() <= FLOAT32_ATOL
    # warm = the state after reading the warm-up text in one carried row
    from spacy_elmo.bilm.warmup import WARMUP_SENTENCES

    state = None
    for sent in WARMUP_SENTENCES:
        _, state = ref.run(sent, state)
    warm = load_bilm(path, state="warm")
    for sent in SENTS:
        expected, _ = ref.run(sent, state)
        assert np.abs(warm.embed([sent])[0] - expected).max() <= FLOAT32_ATOL


def test_packed_path_with_small_chunks_matches_reference(tmp_path, monkeypatch):
    """Many rows of mixed lengths, with the input projection split into chunks of a few
    positions."""
    from spacy_elmo.bilm import schedule

    dim = TINY_OPTIONS["lstm"]["dim"]
    monkeypatch.setattr(schedule, "PACKED_CHUNK_BYTES", 5 * 16 * dim)  # 5 rows of 4 x dim float32
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=7)
    ref = _reference_pair(path)
    sentences = [SENTS[i % len(SENTS)][: 1 + i % 9] for i in range(12)] + [[]]
    out = load_bilm(path, state="zero").embed(sentences, batch_size=64)
    for sent, got in zip(sentences, out):
        if not sent:
            assert got.shape == (3, 0, 16)
            continue
        expected, _ = ref.run(sent)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= FLOAT32_ATOL


def test_prefix_tree_steps_each_distinct_prefix_once():
    from spacy_elmo.bilm.schedule import prefix_tree

    a, b, c, d, e = range(5)
    rows = [[a, b, c], [a, b, d], [a, b], [e]]
    ids = np.array([r + [0] * (3 - len(r)) for r in rows])
    tree, node = prefix_tree(ids, np.array([3, 3, 2, 1]))
    assert tree.batch_sizes == [2, 1, 2]  # {a, e}, {ab}, {abc, abd}
    assert tree.words.tolist() == [a, e, b, c, d]
    assert tree.parents[0] is None  # depth 0 starts from the shared state
    assert tree.parents[1] is None  # ab continues a, node 0 of depth 0: no gather
    assert tree.parents[2].tolist() == [0, 0]  # abc and abd both continue ab
    assert node.tolist() == [[0, 2, 3], [0, 2, 4], [0, 2, -1], [1, -1, -1]]


def test_compute_batches_take_each_sentence_once_longest_first_filled_to_their_bounds():
    """`batches_by_length`: each non-empty sentence in one batch (an empty one in none: a batch of
    empty sentences only has no words), longest first, at most `8 * batch_size` sentences and
    `256 * batch_size` tokens a batch, and a batch closes only where the next sentence would pass a
    bound."""
    from spacy_elmo.bilm.schedule import ROWS_PER_BATCH, TOKENS_PER_BATCH, batches_by_length

    rng = np.random.default_rng(3)
    for batch_size in (1, 2):
        max_rows, max_tokens = batch_size * ROWS_PER_BATCH, batch_size * TOKENS_PER_BATCH
        lengths = [0] * 20 + [1] * 30 + [max_tokens // 2] * 3 + [max_tokens, 7, 5, 200, 56]
        lengths = [int(n) for n in rng.permutation(lengths)]
        batches = list(batches_by_length([["w"] * n for n in lengths], batch_size))
        flat = [i for batch in batches for i in batch]
        assert sorted(flat) == [i for i, n in enumerate(lengths) if n]
        assert [lengths[i] for i in flat] == sorted(filter(None, lengths), reverse=True)
        for batch, after in zip(batches, batches[1:] + [None]):
            tokens = sum(lengths[i] for i in batch)
            assert len(batch) <= max_rows and tokens <= max_tokens
            if after is not None:
                assert len(batch) == max_rows or tokens + lengths[after[0]] > max_tokens


def _reference_tree(ids, lengths):
    """The prefix tree built depth by depth from the prefixes themselves: (words, batch_sizes,
    parents as lists or None, node)."""
    words, batch_sizes, parents, node = [], [], [], np.full(ids.shape, -1)
    index = {(): 0}  # prefix -> its node among its depth's nodes
    offset = 0
    for t in range(ids.shape[1]):
        rows = [b for b in range(len(ids)) if lengths[b] > t]
        if not rows:
            break
        keys = sorted({(index[tuple(ids[b, :t])], int(ids[b, t])) for b in rows})
        parent = [k[0] for k in keys]
        words += [k[1] for k in keys]
        batch_sizes.append(len(keys))
        parents.append(None if t == 0 or parent == list(range(len(keys))) else parent)
        index = {
            tuple(ids[b, : t + 1]): keys.index((index[tuple(ids[b, :t])], int(ids[b, t])))
            for b in rows
        }
        for b in rows:
            node[b, t] = offset + index[tuple(ids[b, : t + 1])]
        offset += len(keys)
    return words, batch_sizes, parents, node.tolist()


def test_prefix_tree_matches_one_built_from_the_prefixes():
    """Random batches, among them rows that run alone past the others (a long sentence's window is
    one such row: its chain is built at once)."""
    from spacy_elmo.bilm.schedule import prefix_tree

    rng = np.random.default_rng(0)
    for _ in range(200):
        B, T = int(rng.integers(1, 6)), int(rng.integers(1, 12))
        lengths = rng.integers(1, T + 1, size=B)
        ids = rng.integers(0, int(rng.integers(1, 4)), size=(B, T))
        tree, node = prefix_tree(ids, lengths)
        got = (
            tree.words.tolist(),
            tree.batch_sizes,
            [None if p is None else p.tolist() for p in tree.parents],
            node.tolist(),
        )
        assert got == _reference_tree(ids, lengths), (ids.tolist(), lengths.tolist())


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_beginnings_endings_and_repeats_match_reference(threads, tmp_path):
    """Sentences that share first words (stepped once forward), last words (once backward) or are
    repeated: each equals the reference run alone."""
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=11)
    ref = _reference_pair(path)
    base = "the cat sat on the mat .".split()
    sentences = [
        base,
        base[:3] + ["down", "."],
        ["a"] + base[1:],
        base,
        base[:1],
        ["."],
        base[:3],
        ["dogs"] + base[-2:],
        base[::-1],
    ]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = load_bilm(path, state="zero").embed(sentences)
    finally:
        torch.set_num_threads(before)
    for sent, got in zip(sentences, out):
        expected, _ = ref.run(sent)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= FLOAT32_ATOL


@pytest.mark.parametrize("source", ["fixture", "random"])
def test_float64_fast_path_equals_the_reference_recurrence(source, fixture_dir, tmp_path):
    """Where exactness is the point, float64: regrouping, packing, shared prefixes, the token cache,
    the boundary steps computed once, the warm state and carried state equal the step-by-step
    reference."""
    from spacy_elmo.bilm.warmup import WARMUP_SENTENCES

    if source == "fixture":
        path, ref = (
            fixture_dir,
            ReferenceBiLM(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"),
        )
    else:
        path = write_random_weights(tmp_path, TINY_OPTIONS, seed=13)
        ref = _reference_pair(path)
    sentences = SENTS + [SENTS[0][:4], SENTS[0][:4] + ["again"], SENTS[2][-3:], SENTS[0]]
    zero = load_bilm(path, state="zero").double()
    for sent, got in zip(sentences, zero.embed_iter(sentences, batch_size=2, as_tensor=True)):
        assert float((got - torch.from_numpy(ref.run(sent)[0])).abs().max()) <= FLOAT64_ATOL
    state = None
    for sent in WARMUP_SENTENCES:
        _, state = ref.run(sent, state)
    warm = load_bilm(path, state="warm").double()
    for sent, got in zip(sentences, warm.embed_iter(sentences, batch_size=2, as_tensor=True)):
        assert float((got - torch.from_numpy(ref.run(sent, state)[0])).abs().max()) <= FLOAT64_ATOL
    carry, state = load_bilm(path, state="carry").double(), None
    for sent in sentences:
        got = next(carry.embed_iter([sent], batch_size=1, as_tensor=True))
        expected, state = ref.run(sent, state)
        assert float((got - torch.from_numpy(expected)).abs().max()) <= FLOAT64_ATOL


@pytest.mark.numeric
@pytest.mark.parametrize("state", ["zero", "warm"])
def test_a_long_sentence_in_windows_equals_the_reference(state, tmp_path):
    """A sentence longer than `256 * batch_size` tokens is computed in windows, the recurrence
    carried both ways (memory bounded by batch_size, not by the sentence): in float64 the
    step-by-step reference's layers; `embed_long` gives the same pieces, in order."""
    from spacy_elmo.bilm.warmup import WARMUP_SENTENCES

    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=17)
    ref = _reference_pair(path)
    rng = np.random.default_rng(3)
    sentence = [
        str(w)
        for w in rng.choice(["the", "cat", "sat", "on", "a", "mat", ".", "x1", "über"], size=700)
    ]
    start = None
    if state == "warm":
        for sent in WARMUP_SENTENCES:
            _, start = ref.run(sent, start)
    expected = ref.run(sentence, start)[0]
    bilm = load_bilm(path, state=state).double()
    (got,) = bilm.embed_iter([sentence], batch_size=1, as_tensor=True)  # windows of 256 tokens
    assert float((got - torch.from_numpy(expected)).abs().max()) <= FLOAT64_ATOL
    pieces = list(load_bilm(path, state=state).embed_long(sentence, batch_size=1))
    assert [p.shape[1] for p in pieces] == [256, 256, 188]
    assert np.abs(np.concatenate(pieces, axis=1) - expected).max() <= FLOAT32_ATOL
