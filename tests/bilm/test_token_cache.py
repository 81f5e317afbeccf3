"""The token-layer cache after an interruption (Ctrl-C, an alarm) inside its store: a word counts
as cached only once its row was written for it; and vectors computed before a `clear()` (new weights
or precision, while another thread computed) are not stored after it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm.cache import TokenLayerCache

from ..efml_models import write_efml_model
from ..helpers import held_after
from ..model_files import lowercasing_model


class Interrupted:
    """Vectors whose rows cannot be read: the store stops where Ctrl-C could stop it, after the
    words were given rows and before those rows were written."""

    shape, dtype, device = (1, 2), torch.float32, torch.device("cpu")

    def __getitem__(self, index):
        raise KeyboardInterrupt


def computed(value: float):
    return lambda words: torch.full((len(words), 2), value)


@pytest.mark.parametrize("full", [False, True])
def test_an_interrupted_store_leaves_no_word_on_a_row_it_did_not_write(full):
    """`full`: the new word takes the least recently used word's row (else a free one)."""
    cache = TokenLayerCache(2 if full else 4, 2)
    cache.lookup(["a", "b"], computed(1.0))
    with pytest.raises(KeyboardInterrupt):
        cache._store(["c"], Interrupted(), cache.generation)
    out = cache.lookup(["a", "b", "c"][1:] if full else ["a", "b", "c"], computed(7.0))
    expected = [1.0, 7.0] if full else [1.0, 1.0, 7.0]  # c computed, never a's row or garbage
    assert out[:, 0].tolist() == expected
    assert cache.lookup(["c"], computed(9.0))[0, 0] == 7.0  # stored since


def test_a_biLM_interrupted_while_caching_embeds_as_a_fresh_one(fixture_dir, monkeypatch):
    bilm = load_bilm(fixture_dir)
    sentences = [["The", "cat", "sat", "."], ["Zebras", "graze", "quietly", "."]]
    bilm.embed(sentences[:1])
    store = bilm.token_cache._store

    def interrupted(words, vectors, generation):
        store(words, Interrupted(), generation)

    monkeypatch.setattr(bilm.token_cache, "_store", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bilm.embed(sentences)
    monkeypatch.undo()
    for a, b in zip(bilm.embed(sentences), load_bilm(fixture_dir, cache_size=0).embed(sentences)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_vectors_computed_before_a_clear_are_not_stored_after_it():
    """Another thread's `clear()` (a new precision or new weights) while this one computes: its
    vectors, of the old weights, are returned to it but not cached for later calls."""
    cache = TokenLayerCache(8, 2)

    def cleared_meanwhile(words):
        cache.clear()
        return torch.full((len(words), 2), 1.0)

    assert cache.lookup(["a", "b"], cleared_meanwhile)[:, 0].tolist() == [1.0, 1.0]
    assert cache.lookup(["a", "b"], computed(2.0))[:, 0].tolist() == [2.0, 2.0]
    assert cache.lookup(["a", "b"], computed(3.0))[:, 0].tolist() == [2.0, 2.0]  # cached since


def test_a_boundary_state_computed_before_a_clear_is_not_kept_after_it(fixture_dir, monkeypatch):
    bilm = load_bilm(fixture_dir, state="zero")
    runner = bilm.runner
    step = runner.network.step_boundaries

    def cleared_meanwhile(x, state):
        runner.clear()
        return step(x, state)

    monkeypatch.setattr(runner.network, "step_boundaries", cleared_meanwhile)
    runner.boundary_state(bilm.state_policy)
    assert runner._after_boundary == {}


@pytest.mark.parametrize("kind", ["bytes", "lowercase", "efml"])
def test_distinct_huge_tokens_leave_no_long_text_in_the_token_cache(fixture_dir, tmp_path, kind):
    """1,000 distinct 200 KB tokens (base64 blobs, minified lines) kept 190 MB after the call: the
    cache was keyed on each full text, though the ids read its first max_chars - 2 bytes (ELMo's
    tables: characters) only. Now keyed on those, the vectors as the uncached biLM gives them."""
    path = {
        "bytes": fixture_dir,
        "lowercase": lambda: lowercasing_model(fixture_dir, tmp_path / "lower"),
        "efml": lambda: write_efml_model(tmp_path / "de.model"),
    }[kind]
    path = path if kind == "bytes" else path()
    bilm = load_bilm(path, state="zero")
    bilm.embed([["warm", "up"]])

    def embed_blobs():
        bilm.embed([["%04d" % i + "É" * 50_000] for i in range(200)])  # 100 KB of utf-8 each

    held = held_after(embed_blobs)
    assert len(bilm.token_cache.slots) == 204  # <S>, </S>, warm, up and the blobs
    assert held < 2**20, f"{held:,} bytes held after the call"
    same_start = [["x" * 48 + "É" * 1000, "x" * 48 + "É" * 2000, "É" * 40 + "a", "É" * 40 + "b"]]
    cached = bilm.embed(same_start)[0]
    plain = load_bilm(path, state="zero", cache_size=0).embed(same_start)[0]
    np.testing.assert_array_equal(cached, plain)
    np.testing.assert_array_equal(cached[0, 0], cached[0, 1])  # token layer: the same 48 bytes
    # 41 characters, 81 bytes: one cut in bytes, two tokens in characters
    assert np.array_equal(cached[0, 2], cached[0, 3]) == (kind != "efml")
