"""Corpus text as `pretrain` reads it: its files, their lines and their tokens."""

from __future__ import annotations

import gzip

import pytest

from spacy_elmo import ElmoFileError
from spacy_elmo.embed.sentences import read_sentences
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.corpus import (
    UNK_ID,
    TrainingCorpus,
    Vocab,
    corpus_files,
    corpus_tokenizer,
    load_dev,
    make_tokenizer,
    read_lines,
    tokenize_file,
)
from spacy_elmo.tokenizer import blank

from ..helpers import one_error_line, override_args, run_pretrain, toy_sentences, write_corpus

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


def test_a_linked_directory_of_a_corpus_directory_is_read_as_a_linked_file_is(tmp_path):
    """Links in a corpus directory are followed, to files and directories alike; hidden ones are
    skipped."""
    elsewhere = tmp_path / "elsewhere"
    write_corpus(elsewhere / "more.txt", ["a b"])
    write_corpus(elsewhere / "one.txt", ["c d"])
    corpus = tmp_path / "corpus"
    write_corpus(corpus / "own" / "x.txt", ["e f"])
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "file.txt").symlink_to(elsewhere / "one.txt")
    (corpus / ".hidden").symlink_to(elsewhere, target_is_directory=True)
    assert [str(f.relative_to(corpus)) for f in corpus_files(corpus, "train")] == [
        "file.txt",
        "linked/more.txt",
        "linked/one.txt",
        "own/x.txt",
    ]


@pytest.mark.parametrize("target", ["itself", "the corpus", "a link back"])
def test_a_link_cycle_in_a_corpus_directory_is_one_error_naming_it(tmp_path, capsys, target):
    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    write_corpus(corpus / "a" / "x.txt", ["e f"])
    elsewhere.mkdir()
    if target == "a link back":
        (corpus / "a" / "out").symlink_to(elsewhere, target_is_directory=True)
        link = corpus / "a" / "out" / "back"
        (elsewhere / "back").symlink_to(corpus, target_is_directory=True)
    else:
        link = corpus / "a" / "loop"
        link.symlink_to(corpus / "a" if target == "itself" else corpus, target_is_directory=True)
    with pytest.raises(ElmoFileError, match=f"{link} links to a directory that holds it"):
        corpus_files(corpus, "train")
    code, err = run_pretrain([tmp_path / "out", *override_args(corpus)], capsys)
    assert code == 1 and str(link) in one_error_line(err)


@pytest.mark.parametrize("tokenizer", ["whitespace", "spacy"])
def test_lowercasing_keeps_the_boundaries_and_the_unk_token_as_written(tokenizer):
    """`corpus.lowercase` lowercased each line before tokenizing: a literal `<S>` / `</S>` became
    the ordinary words `<s>` / `</s>` and the corpus's `<UNK>` the word `<unk>`, which the softmax
    learned as a word. Now each token is lowercased after tokenizing, those three as written."""
    corpus = load_config(
        None, {"corpus.tokenizer": tokenizer, "corpus.unk_token": "<UNK>", "corpus.lowercase": True}
    )["corpus"]
    lines = ["<S> Mr. <UNK> Met ÜBER Bank . </S>", "The <UNK> ."]
    tokens = list(corpus_tokenizer(corpus)(line + "\n" for line in lines))
    assert tokens == [
        ["<S>", "mr.", "<UNK>", "met", "über", "bank", ".", "</S>"],
        ["the", "<UNK>", "."],
    ]
    cased = list(corpus_tokenizer({**corpus, "lowercase": False})(line for line in lines))
    assert cased[1] == ["The", "<UNK>", "."]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("tokenizer", ["whitespace", "spacy"])
def test_only_a_newline_ends_a_line_as_in_embed(tmp_path, gz, tokenizer):
    """pretrain read through universal newlines, which end a line at a lone \\r too (gzipped text
    alike); embed ends one at \\n only: a line with a \\r in it was two sentences to pretrain and
    one to embed. Now both read the same sentences, the \\r of \\r\\n in no token."""
    raw = b"one two\rthree four\r\nfive\xe2\x80\xa8six \xc2\x85 seven\nlast\rline\r\n"
    path = tmp_path / ("corpus.gz" if gz else "corpus.txt")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    plain = tmp_path / "plain.txt"
    plain.write_bytes(raw)
    f = tokenize_file(path, make_tokenizer(tokenizer, "en"), 100)
    pretrain = [[f.texts[i] for i in s] for s in f.sentences]
    embed = [
        t for _, t in read_sentences(plain, None if tokenizer == "whitespace" else blank("en"))
    ]
    assert len(pretrain) == 3 and pretrain == embed
    assert not any("\r" in t for s in pretrain for t in s), pretrain


def test_a_line_longer_than_max_sentence_length_is_cut_into_pieces_of_it(tmp_path):
    path = write_corpus(tmp_path / "train.txt", ["a b c d e f g", "", "h i"])
    f = tokenize_file(path, make_tokenizer("whitespace"), 3)
    assert [[f.texts[i] for i in s] for s in f.sentences] == [
        ["a", "b", "c"],
        ["d", "e", "f"],
        ["g"],
        ["h", "i"],
    ]
    assert f.n_tokens == 9


def test_the_dev_set_predicts_each_word_and_each_closing_boundary(tmp_path):
    dev = write_corpus(tmp_path / "dev.txt", ["the cat sat", "", "a dog"])
    vocab = Vocab(["<S>", "</S>", "<unk>", "the", "cat"])
    dev_set = load_dev(dev, make_tokenizer("whitespace"), 100, vocab, None)
    assert dev_set.n_predicted == 3 + 1 + 2 + 1
    assert dev_set.ids[1].tolist() == [0, UNK_ID, UNK_ID, 1]


def test_a_training_corpus_of_blank_lines_is_one_error_naming_it(tmp_path):
    path = write_corpus(tmp_path / "train.txt", ["", "  ", "\t"])
    with pytest.raises(ElmoFileError, match=rf"the training corpus {path} is empty \(no tokens"):
        TrainingCorpus(path, make_tokenizer("whitespace"), 100)


def test_a_dev_corpus_of_blank_lines_is_one_error_saying_so(tmp_path):
    dev = write_corpus(tmp_path / "dev.txt", ["", "  "])
    vocab = Vocab(["<S>", "</S>", "<unk>", "the"])
    with pytest.raises(ElmoFileError, match=rf"the dev corpus {dev} is empty$"):
        load_dev(dev, make_tokenizer("whitespace"), 100, vocab, None)
