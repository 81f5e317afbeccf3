"""`pretrain --init-from MODEL`: what is trained is the model as the run read it, once."""

from __future__ import annotations

import json
import shutil

import torch

from ..helpers import quiet_train, tiny_config, toy_sentences, write_corpus


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
