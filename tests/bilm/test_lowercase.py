"""A biLM trained on lowercased text (`char_cnn.lowercase`): it reads every token lowercased, as
it saw them in training, whatever path the ids take (packed, carried state, the token cache)."""

from __future__ import annotations

import numpy as np
import pytest

from spacy_elmo import ElmoFileError, load_bilm
from spacy_elmo.bilm import BiLMOptions
from spacy_elmo.bilm.warmup import WARMUP_SENTENCES

from ..model_files import fixture_options, lowercasing_model

CASED = [["The", "CAT", "Sat", "on", "ÜBER", "Mats", "."], ["Hello", "<S>", "</S>"]]
LOWER = [["the", "cat", "sat", "on", "über", "mats", "."], ["hello", "<S>", "</S>"]]


def test_the_option_round_trips_and_is_written_only_when_true(fixture_dir):
    opts = fixture_options(fixture_dir)
    assert BiLMOptions.from_dict(opts).lowercase is False
    assert "lowercase" not in BiLMOptions.from_dict(opts).to_dict()["char_cnn"]
    assert "lowercase" not in BiLMOptions.from_dict(opts).sizes()
    opts["char_cnn"]["lowercase"] = True
    options = BiLMOptions.from_dict(opts)
    assert options.lowercase is True and options.sizes()["lowercase"] is True
    assert options.to_dict()["char_cnn"]["lowercase"] is True
    assert BiLMOptions.from_dict(options.to_dict()) == options


@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_lowercase_option_that_is_no_boolean_is_one_error(fixture_dir, value):
    opts = fixture_options(fixture_dir)
    opts["char_cnn"]["lowercase"] = value
    with pytest.raises(ElmoFileError, match=r"^x.json: 'char_cnn.lowercase' must be true or false"):
        BiLMOptions.from_dict(opts, source="x.json")


def test_a_character_table_model_cannot_lowercase(fixture_dir):
    """ELMoForManyLangs' tables are case-sensitive and have no such option: refused, not
    ignored."""
    opts = fixture_options(fixture_dir)
    opts["char_cnn"].update(lowercase=True, char_table=True, n_characters=100)
    with pytest.raises(ElmoFileError, match="'char_cnn.lowercase'.*character table"):
        BiLMOptions.from_dict(opts, source="x.json")


@pytest.mark.parametrize("state", ["warm", "zero", "carry"])
def test_a_lowercasing_model_embeds_cased_tokens_as_their_lowercase(fixture_dir, tmp_path, state):
    """Its options said to lowercase, and `embed` fed it cased text, which it never saw in
    training: other vectors for "The" than for "the". Now bit for bit the same, in each policy;
    literal `<S>` / `</S>` stay the boundary tokens."""
    model = lowercasing_model(fixture_dir, tmp_path / "lower", state)
    cased = load_bilm(model).embed(CASED)
    lowered = load_bilm(model).embed(LOWER)
    for a, b in zip(cased, lowered):
        assert np.array_equal(a, b)
    # the same weights without the option, warmed up on the lowercased warm-up text: what `the`
    # gives there, `The` now gives
    plain = load_bilm(fixture_dir, state=state)
    plain.network.compute_warm_state([[w.lower() for w in s] for s in WARMUP_SENTENCES])
    for a, b in zip(plain.embed(LOWER), cased):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert not np.allclose(plain.embed(CASED)[0], cased[0], atol=1e-3)


def test_the_token_cache_holds_one_row_for_a_word_in_any_case(fixture_dir, tmp_path):
    """Cached and computed, a word reads the same in every case: the cache is keyed by what the
    ids depend on, so "The" and "the" share a row, and neither can return the other's."""
    bilm = load_bilm(lowercasing_model(fixture_dir, tmp_path / "lower"))
    first = bilm.embed([["The"], ["the"], ["THE"]])
    assert len(bilm.token_cache.slots) == 3  # <S>, </S>, the
    assert "the" in bilm.token_cache.slots and "The" not in bilm.token_cache.slots
    for again in (
        bilm.embed([["tHe"]]),
        load_bilm(tmp_path / "lower", cache_size=0).embed([["The"]]),
    ):
        assert np.array_equal(again[0], first[0])
    assert np.array_equal(first[0], first[1]) and np.array_equal(first[1], first[2])


def test_word_ids_lowercase_but_keep_the_boundary_tokens(fixture_dir, tmp_path):
    network = load_bilm(lowercasing_model(fixture_dir, tmp_path / "lower")).network
    np.testing.assert_array_equal(
        network.word_ids(["The", "<S>", "</S>", "İ"]), network.word_ids(["the", "<S>", "</S>", "i̇"])
    )
    assert not np.array_equal(network.word_ids(["<S>"]), network.word_ids(["<s>"]))
    np.testing.assert_array_equal(network.char_ids([["The"]]), network.char_ids([["the"]]))
