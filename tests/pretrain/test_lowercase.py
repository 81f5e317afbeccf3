"""`corpus.lowercase`: the biLM trained on lowercased text is saved as one that reads its tokens
lowercased, so that `load_bilm`, the `elmo` component and `embed` feed it what it was trained on."""

from __future__ import annotations

import json

import numpy as np
from thinc.api import Config

from spacy_elmo import load_bilm

from ..helpers import one_error_line, override_args, run_pretrain, toy_sentences, write_corpus

CASED = [["The", "Cat", "SAW", "John", "on", "Monday", "."]]
LOWER = [["the", "cat", "saw", "john", "on", "monday", "."]]


def embeds_alike(model, a, b) -> bool:
    return all(
        np.array_equal(x, y) for x, y in zip(load_bilm(model).embed(a), load_bilm(model).embed(b))
    )


def test_a_run_on_lowercased_text_saves_a_model_that_reads_lowercased_tokens(tmp_path, capsys):
    """The model was trained on lowercased text, but nothing in it said so: `load_bilm` and the
    component fed it "The", never seen in training. Now its options say `lowercase`, and "The"
    gives "the"'s vectors bit for bit."""
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = override_args(train, None, training__max_steps=2, corpus__lowercase=True)
    code, err = run_pretrain([tmp_path / "out", "--no-progress", *args], capsys)
    assert code == 0, err
    model = tmp_path / "out" / "model"
    words = (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert "john" in words and "John" not in words  # trained on lowercased text
    options = json.loads((model / "bilm.json").read_text(encoding="utf-8"))["options"]
    assert options["char_cnn"]["lowercase"] is True
    assert embeds_alike(model, CASED, LOWER)


def test_export_hdf5_of_a_lowercasing_model_is_refused_before_training(tmp_path, capsys):
    """bilm-tf and AllenNLP ignore the option and would feed the model cased text: `--export-hdf5`
    with `corpus.lowercase` is refused before training, nothing written; and so with a model from
    `--init-from` that lowercases, whose setting the run takes."""
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train, None, training__max_steps=2)]
    code, err = run_pretrain(
        [tmp_path / "out", *args, "--corpus.lowercase", "true", "--export-hdf5"], capsys
    )
    expected = (
        "error: config 'training.export_hdf5': this run's model reads each token lowercased "
        "(corpus.lowercase = true), which bilm-tf and AllenNLP ignore: they would feed it cased "
        "text; keep the model in this project's format (OUTPUT_DIR/model): drop --export-hdf5"
    )
    assert code == 1 and one_error_line(err) == expected
    assert not (tmp_path / "out").exists()
    code, err = run_pretrain([tmp_path / "base", *args, "--corpus.lowercase", "true"], capsys)
    assert code == 0, err
    tuned = [tmp_path / "tuned", *args, "--init-from", tmp_path / "base" / "model"]
    code, err = run_pretrain([*tuned, "--export-hdf5"], capsys)
    assert code == 1 and one_error_line(err) == expected.replace(
        "= true)", f"= true, from --init-from {tmp_path / 'base' / 'model'})"
    )
    assert not (tmp_path / "tuned").exists()


def test_a_run_from_a_lowercasing_model_keeps_it_unless_corpus_lowercase_is_given(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train, None, training__max_steps=2)]
    code, err = run_pretrain([tmp_path / "base", *args, "--corpus.lowercase", "true"], capsys)
    assert code == 0, err
    tuned = [*args, "--init-from", tmp_path / "base" / "model"]
    assert run_pretrain([tmp_path / "kept", *tuned], capsys)[0] == 0
    assert Config().from_disk(tmp_path / "kept" / "config.cfg")["corpus"]["lowercase"] is True
    assert load_bilm(tmp_path / "kept" / "model").options.lowercase
    assert embeds_alike(tmp_path / "kept" / "model", CASED, LOWER)
    cased = [tmp_path / "cased", *tuned, "--corpus.lowercase", "false"]
    assert run_pretrain(cased, capsys)[0] == 0
    assert not load_bilm(tmp_path / "cased" / "model").options.lowercase
    assert not embeds_alike(tmp_path / "cased" / "model", CASED, LOWER)
