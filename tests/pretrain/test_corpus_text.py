"""Corpus text as `pretrain` reads it: its files, their lines and their tokens."""

from __future__ import annotations

import gzip

import pytest

from spacy_elmo import ElmoFileError
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.corpus import UNK_ID, Vocab, corpus_tokenizer, load_dev, read_lines

from ..helpers import override_args, run_pretrain, toy_sentences, write_corpus

MARKED = [
    "pierre <unk> N years old will join the board .",
    "<S> mr. <unk> is chairman of (<unk>) n.v. </S>",
]


def test_the_spacy_tokenizer_keeps_the_unk_token_and_the_boundaries_whole():
    """spaCy splits `<unk>` into `<`, `unk`, `>`; the corpus's unknown-word token and literal
    `<S>` / `</S>` stay one token each, wherever spaCy splits punctuation off them."""
    corpus = load_config(None, {"corpus.unk_token": "<unk>"})["corpus"]
    assert corpus["tokenizer"] == "spacy"
    tokens = list(corpus_tokenizer(corpus)(line + "\n" for line in MARKED))
    assert tokens[0][:3] == ["pierre", "<unk>", "N"]
    assert tokens[1][0] == "<S>" and tokens[1][-1] == "</S>"
    assert tokens[1][tokens[1].index("(") + 1] == "<unk>"
    assert not {"<", ">", "unk", "/S"} & {t for s in tokens for t in s}


def test_the_unk_token_of_dev_text_maps_to_the_softmaxs_unk_with_the_spacy_tokenizer(tmp_path):
    corpus = load_config(None, {"corpus.unk_token": "<unk>"})["corpus"]
    dev = write_corpus(tmp_path / "dev.txt", MARKED[:1])
    vocab = Vocab(["<S>", "</S>", "<unk>", "pierre", "N", "years", "old", "board", "."])
    ids = load_dev(dev, corpus_tokenizer(corpus), 100, vocab, "<unk>").ids[0]
    assert ids[2] == UNK_ID and ids[1] == vocab.index["pierre"] and ids[3] == vocab.index["N"]


@pytest.mark.parametrize("unk", ["<unk>", "<UNK>"])
def test_a_run_with_the_spacy_tokenizer_learns_no_pieces_of_the_unk_token(tmp_path, capsys, unk):
    lines = [s.replace("cat", unk) for s in toy_sentences(100)] + [
        m.replace("<unk>", unk) for m in MARKED
    ]
    train = write_corpus(tmp_path / "train.txt", lines)
    args = override_args(train, train, corpus__tokenizer="spacy", corpus__unk_token=unk)
    code, err = run_pretrain(
        [tmp_path / "out", "--no-progress", *args, "--training.max_steps", "1"], capsys
    )
    assert code == 0, err
    words = (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert words[:3] == ["<S>", "</S>", "<unk>"]
    assert not {"<", ">", "unk", "UNK", unk, "/S"} & set(words[3:]), words


@pytest.mark.parametrize("name", ["train.TXT.GZ", "train.gzip", "train.txt"])
def test_a_gzipped_corpus_file_is_known_by_its_content_not_its_name(tmp_path, name):
    """gzip is read whatever the file's name; its text's errors name the decompressed file."""
    good = "The cat\nsat .\n".encode("utf-8")
    (tmp_path / name).write_bytes(gzip.compress(good))
    assert list(read_lines(tmp_path / name)) == ["The cat\n", "sat .\n"]
    (tmp_path / name).write_bytes(gzip.compress(good + "caf\u00e9\n".encode("latin-1")))
    with pytest.raises(ElmoFileError, match="line 3, byte 17 of the decompressed file"):
        list(read_lines(tmp_path / name))


def test_a_plain_text_file_named_gz_is_read_as_text(tmp_path):
    write_corpus(tmp_path / "train.txt.gz", ["The cat", "sat ."])
    assert list(read_lines(tmp_path / "train.txt.gz")) == ["The cat\n", "sat .\n"]
