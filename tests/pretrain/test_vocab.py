"""The output vocabulary as `pretrain` reads and writes it (vocab.txt)."""

from __future__ import annotations

import pytest

from spacy_elmo import ElmoFileError
from spacy_elmo.pretrain.corpus import Vocab

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
