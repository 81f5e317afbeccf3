"""`pretrain --init-from MODEL`: what is trained is the model as the run read it, once."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from spacy_elmo import load_bilm

from ..helpers import (
    one_error_line,
    override_args,
    quiet_train,
    run_pretrain,
    tiny_config,
    toy_sentences,
    write_corpus,
)


def test_a_model_saved_over_the_one_to_start_from_cannot_change_what_is_trained(
    tmp_path, monkeypatch
):
    """Another model saved over MODEL's directory while the run starts (after it read MODEL, as the
    run's seed is set): the run trains MODEL as it read it (its biLM and softmax), the one whose
    fingerprint init.json records, and ends with the weights of a run left alone."""
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    for name, seed in (("a", 0), ("b", 1)):  # two models of one vocabulary and sizes
        quiet_train(
            tiny_config(corpus, None, training__max_steps=2, training__seed=seed), tmp_path / name
        )
    start = tmp_path / "start"
    shutil.copytree(tmp_path / "a" / "model", start)
    tuning = tiny_config(corpus, None, model=False, training__max_steps=2, training__dropout=0.2)
    quiet_train(tuning, tmp_path / "alone", init_from=str(start))

    seed = torch.manual_seed

    def saved_over_as_seeded(value):
        if (tmp_path / "a" / "model").exists():
            shutil.rmtree(start)
            shutil.move(tmp_path / "b" / "model", start)
            shutil.rmtree(tmp_path / "a" / "model")
        return seed(value)

    monkeypatch.setattr(torch, "manual_seed", saved_over_as_seeded)
    quiet_train(tuning, tmp_path / "raced", init_from=str(start))
    monkeypatch.undo()
    assert not (tmp_path / "a" / "model").exists()  # the other model was saved over it
    for name in ("weights.pt", "lm_head.pt"):
        alone = torch.load(tmp_path / "alone" / "model" / name, weights_only=True)
        raced = torch.load(tmp_path / "raced" / "model" / name, weights_only=True)
        assert all(torch.equal(alone[k], raced[k]) for k in alone), name
    records = [json.loads((tmp_path / d / "init.json").read_text()) for d in ("alone", "raced")]
    assert records[0]["fingerprint"] == records[1]["fingerprint"]


def test_a_run_from_a_model_keeps_its_unknown_word_unless_corpus_unk_token_is_given(
    tmp_path, capsys
):
    """`--init-from` a model pretrained with corpus.unk_token "<UNK>" recorded the built-in
    `<unk>` instead: the tuned model, its tuning run and `embed` read `<UNK>` as three tokens."""
    train = write_corpus(tmp_path / "train.txt", [f"{s} <UNK>" for s in toy_sentences(100)])
    args = ["--no-progress", *override_args(train, None, training__max_steps=2)]
    code, err = run_pretrain([tmp_path / "base", *args, "--corpus.unk_token", "<UNK>"], capsys)
    assert code == 0, err
    tuned = [*args, "--init-from", tmp_path / "base" / "model"]
    assert run_pretrain([tmp_path / "kept", *tuned], capsys)[0] == 0
    assert load_bilm(tmp_path / "kept" / "model").options.unk_token == "<UNK>"
    given = [tmp_path / "given", *tuned, "--corpus.unk_token", "<unk>"]
    assert run_pretrain(given, capsys)[0] == 0
    assert load_bilm(tmp_path / "given" / "model").options.unk_token == "<unk>"


@pytest.mark.parametrize("boundary", ["<S>", "</S>"])
def test_a_sentence_boundary_as_the_unknown_word_is_one_error(tmp_path, capsys, boundary):
    """corpus.unk_token "<S>" turned every sentence boundary the model predicts into `<unk>`."""
    train = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    args = ["--no-progress", *override_args(train, None, training__max_steps=1)]
    code, err = run_pretrain([tmp_path / "out", *args, "--corpus.unk_token", boundary], capsys)
    assert code == 1 and "corpus.unk_token" in one_error_line(err) and boundary in err
