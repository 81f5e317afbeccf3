"""The output vocabulary as `pretrain` reads and writes it (vocab.txt)."""

from __future__ import annotations

from collections import Counter
from typing import List

import pytest

from spacy_elmo import ElmoConfigError, ElmoFileError
from spacy_elmo.files import RECORD_BYTES
from spacy_elmo.pretrain.corpus import SPECIALS, UNK_ID, Vocab

from ..helpers import one_error_line, override_args, run_pretrain, toy_sentences, write_corpus


def test_a_word_twice_in_a_vocabulary_file_is_one_error_naming_it_and_its_lines(tmp_path):
    path = write_corpus(tmp_path / "vocab.txt", ["<S>", "</S>", "<unk>", "the", "cat", "the"])
    with pytest.raises(ElmoFileError, match=rf"{path} .*'the' is on lines 4 and 6"):
        Vocab.from_disk(path)


def test_init_from_a_model_whose_vocabulary_repeats_a_word_is_one_error(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train, training__max_steps=1)]
    assert run_pretrain([tmp_path / "base", *args], capsys)[0] == 0
    path = tmp_path / "base" / "model" / "vocab.txt"
    words = path.read_text(encoding="utf-8").splitlines()
    path.write_text("".join(w + "\n" for w in [*words[:-1], words[3]]), encoding="utf-8")
    code, err = run_pretrain([tmp_path / "out", "--init-from", path.parent, *args], capsys)
    assert code == 1
    assert f"{path}" in one_error_line(err)
    assert f"{words[3]!r} is on lines 4 and {len(words)}" in err


def long_words(n: int) -> List[str]:
    """`n` distinct words of 4,095 bytes, in the order a vocabulary ranks them (ties by text)."""
    return [f"{i:07d}" + "x" * 4088 for i in range(n)]


# vocab.txt of the specials (15 bytes) and this many long words is the most a run reads back
FITS = (RECORD_BYTES - 15) // 4096


def test_a_vocabulary_too_large_to_read_back_is_refused_when_built(tmp_path):
    """The error names the largest vocab.size that fits; a vocabulary of that size is read back."""
    counts = Counter(long_words(FITS + 10))
    with pytest.raises(ElmoConfigError, match=f"set --vocab.size {FITS} or less"):
        Vocab.build(counts, None)
    with pytest.raises(ElmoConfigError, match=f"set --vocab.size {FITS} or less"):
        Vocab.build(counts, FITS + 1)
    vocab = Vocab.build(counts, FITS)
    (tmp_path / "vocab.txt").write_text(vocab.to_str(), encoding="utf-8")
    assert Vocab.from_disk(tmp_path / "vocab.txt").words == vocab.words


def test_a_run_whose_vocabulary_it_could_not_read_back_stops_before_training(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.txt", long_words(FITS + 10))
    code, err = run_pretrain([tmp_path / "out", "--no-progress", *override_args(train)], capsys)
    assert code == 1
    assert f"set --vocab.size {FITS} or less" in one_error_line(err)
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_words_rank_by_falling_count_then_by_text_and_size_cuts_that_ranking():
    counts = Counter({"b": 2, "c": 3, "a": 2, "d": 1, "<S>": 9, "<UNK>": 9})
    assert Vocab.build(counts, None, "<UNK>").words == [*SPECIALS, "c", "a", "b", "d"]
    assert Vocab.build(counts, 2, "<UNK>").words == [*SPECIALS, "c", "a"]
    assert Vocab.build(counts, 4, "<UNK>").words == [*SPECIALS, "c", "a", "b", "d"]
    with pytest.raises(ElmoFileError, match="vocab.size = 5 is larger .* only 4 distinct words"):
        Vocab.build(counts, 5, "<UNK>")
    assert len(Vocab.build(counts, 5, "<UNK>", shrink=True)) == 3 + 4


def test_a_vocabulary_file_must_start_with_the_special_tokens(tmp_path):
    path = write_corpus(tmp_path / "vocab.txt", ["<S>", "</S>", "the", "<unk>"])
    with pytest.raises(ElmoFileError, match=rf"{path} .*must start with"):
        Vocab.from_disk(path)


def test_words_holding_unicode_spaces_read_back_whole(tmp_path):
    """vocab.txt holds one word a line: a token with a no-break or ideographic space in it (the
    spaCy tokenizer keeps them inside tokens) is one word when read back."""
    vocab = Vocab([*SPECIALS, "a\u00a0b", "c\u3000d", "e"])
    (tmp_path / "vocab.txt").write_text(vocab.to_str(), encoding="utf-8")
    assert Vocab.from_disk(tmp_path / "vocab.txt").words == vocab.words


def test_the_corpus_unk_token_is_the_softmaxs_unk_even_where_the_vocabulary_holds_it():
    """A vocabulary from --init-from may hold the corpus's unknown-word token as a word."""
    vocab = Vocab([*SPECIALS, "<UNK>", "a"])
    assert vocab.lookup(["<UNK>", "a", "zzz"], "<UNK>").tolist() == [UNK_ID, 4, UNK_ID]
    assert vocab.lookup(["<UNK>"], None).tolist() == [3]


def test_a_vocabulary_of_exactly_the_bytes_a_run_reads_back_is_kept(tmp_path):
    """The long words fill vocab.txt to RECORD_BYTES less one line, which a last rarer word
    fills exactly; a word more is refused."""
    words = long_words((RECORD_BYTES - 15) // 4096)
    last = RECORD_BYTES - 15 - 4096 * len(words)
    counts = Counter({**{w: 2 for w in words}, "y" * (last - 1): 1})
    vocab = Vocab.build(counts, None)
    assert len(vocab.to_str().encode("utf-8")) == RECORD_BYTES
    (tmp_path / "vocab.txt").write_text(vocab.to_str(), encoding="utf-8")
    assert Vocab.from_disk(tmp_path / "vocab.txt").words == vocab.words
    with pytest.raises(ElmoConfigError, match=f"set --vocab.size {len(words) + 1} or less"):
        Vocab.build(Counter({**counts, "z": 1}), None)
