"""One spaCy tokenizer for `pretrain` and `embed` (spacy_elmo.tokenizer): both read a corpus line
as the same tokens, `<unk>` (PTB, WikiText), `<S>` and `</S>` kept whole."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spacy_elmo import BiLMOptions, ElmoFileError, load_bilm
from spacy_elmo.pretrain.text import make_tokenizer, tokenize_file

from .helpers import FLOAT32_ATOL, data_path, pretrained_with_unk, read_output, run_cli, write_lines

LINES = [
    "the <unk> sat on <S> the mat .",
    "(<unk>) said </S>, it's <unk>.",
    "no specials here",
]

TOKENS = [  # spaCy's English tokens of LINES, `<unk>`, `<S>` and `</S>` whole
    ["the", "<unk>", "sat", "on", "<S>", "the", "mat", "."],
    ["(", "<unk>", ")", "said", "</S>", ",", "it", "'s", "<unk>", "."],
    ["no", "specials", "here"],
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def pretrain_tokens(path):
    """The tokens `pretrain` reads from `path` under its default config (`--lang en`)."""
    f = tokenize_file(path, make_tokenizer("spacy", "en", unk_token="<unk>"), 1000)
    return [[f.texts[i] for i in s] for s in f.sentences]


def test_pretrain_and_embed_read_a_line_as_the_same_tokens(corpus, fixture_dir, tmp_path):
    """A biLM pretrained on text holding `<unk>` read it as one token; `embed` (a plain
    spacy.blank) read `<`, `unk`, `>`, so its vectors were for tokens the biLM never saw."""
    tokens = pretrain_tokens(corpus)
    assert tokens == TOKENS
    out = tmp_path / "out.hdf5"
    assert run_cli("embed", corpus, out, "-w", fixture_dir, "--lang", "en", "--no-progress") == 0
    arrays, _, _ = read_output(out)
    expected = load_bilm(fixture_dir).embed(TOKENS)  # the tokens written out by hand
    assert sorted(arrays, key=int) == ["0", "1", "2"]
    for i, want in enumerate(expected):
        np.testing.assert_allclose(arrays[str(i)], want, atol=FLOAT32_ATOL)


@pytest.fixture(scope="module")
def upper_unk_model(tmp_path_factory):
    """A tiny biLM pretrained with corpus.unk_token "<UNK>"."""
    return pretrained_with_unk(tmp_path_factory.mktemp("upper"), "<UNK>")


def test_the_unknown_word_travels_with_the_model(upper_unk_model, tmp_path):
    """Recorded by pretrain, kept by `convert` to either format and by a saved pipeline; a model
    that records none (the fixture) has `<unk>` and writes none."""
    import spacy

    assert load_bilm(upper_unk_model).options.unk_token == "<UNK>"
    assert run_cli("convert", upper_unk_model, tmp_path / "hdf5", "--to", "hdf5") == 0
    assert run_cli("convert", tmp_path / "hdf5", tmp_path / "own") == 0
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "own")})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    for model in ("hdf5", "own", "pipeline"):
        assert load_bilm(tmp_path / model).options.unk_token == "<UNK>", model
    options = json.loads((tmp_path / "hdf5" / "options.json").read_text(encoding="utf-8"))
    with pytest.raises(ElmoFileError, match="'unk_token' must be a string of 1 to 1024"):
        BiLMOptions.from_dict({**options, "unk_token": ["<UNK>"]})
    fixture = load_bilm(data_path("allennlp_elmo_fixture"))
    assert fixture.options.unk_token == "<unk>" and "unk_token" not in fixture.options.to_dict()


def test_embed_keeps_the_unknown_word_the_model_was_pretrained_with(upper_unk_model, tmp_path):
    """A biLM pretrained with corpus.unk_token "<UNK>" records it; `embed` with spaCy's tokenizer
    keeps it whole (it split it in three: `<`, `UNK`, `>`), in one file and in shards alike: the
    vectors of the line split by hand (--whitespace), and a tokenizer record that names it."""
    model = upper_unk_model
    text = write_lines(tmp_path / "in.txt", ["the cat (<UNK>) sat on <S> the mat ."] * 4)
    split = write_lines(tmp_path / "split.txt", ["the cat ( <UNK> ) sat on <S> the mat ."] * 4)
    args = ["-w", model, "--no-progress", "--flush-every", "2"]
    assert run_cli("embed", split, tmp_path / "split.hdf5", "--whitespace", *args) == 0
    assert run_cli("embed", text, tmp_path / "one.hdf5", "--lang", "en", *args) == 0
    assert run_cli("embed", text, tmp_path / "shards", "--shards", "2", *args) == 0
    expected, _, _ = read_output(tmp_path / "split.hdf5")
    assert expected["0"].shape[1] == 11
    one, _, attributes = read_output(tmp_path / "one.hdf5")
    tokenizer = json.loads(attributes["spacy_elmo.settings"])["tokenizer"]
    assert tokenizer == "spacy:en keeping <S> </S> <UNK>"  # what --resume must find again
    shards = {}
    for shard in sorted((tmp_path / "shards").glob("shard-*.hdf5")):
        shards.update(read_output(shard)[0])
    for arrays in (one, shards):
        assert arrays.keys() == expected.keys()
        assert all(np.array_equal(arrays[k], expected[k]) for k in expected)
