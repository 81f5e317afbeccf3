"""One spaCy tokenizer for `pretrain` and `embed` (spacy_elmo.tokenizer): both read a corpus line
as the same tokens, `<unk>` (PTB, WikiText), `<S>` and `</S>` kept whole."""

from __future__ import annotations

import pytest

from spacy_elmo.pretrain.text import make_tokenizer, tokenize_file

from .helpers import read_output, run_cli

LINES = [
    "the <unk> sat on <S> the mat .",
    "(<unk>) said </S>, it's <unk>.",
    "no specials here",
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
    assert tokens[0] == ["the", "<unk>", "sat", "on", "<S>", "the", "mat", "."]
    out = tmp_path / "out.hdf5"
    assert run_cli("embed", corpus, out, "-w", fixture_dir, "--lang", "en", "--no-progress") == 0
    arrays, _, _ = read_output(out)
    assert [arrays[str(i)].shape[1] for i in range(len(LINES))] == [len(t) for t in tokens]
