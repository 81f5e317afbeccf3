"""The `tune` step's parts on a tiny biLM: the task's text without labels, the config of a tuning,
the dev perplexity before tuning, and a tuning skipped when done, continued when interrupted and
redone from another biLM; which given weights can be tuned."""

import json

import pytest
import spacy
from spacy.tokens import Doc, DocBin

from project.scripts.study import tunable_model
from project.scripts.tune_bilm import perplexity_before, tune, tuning_config, write_text
from spacy_elmo import load_bilm
from spacy_elmo.pretrain import Trainer

from ..helpers import quiet_train, tiny_config, toy_sentences, write_corpus


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny biLM trained by `pretrain` (its run directory), and a task's train and dev text."""
    d = tmp_path_factory.mktemp("tune")
    train = write_corpus(d / "lm.txt", toy_sentences(300))
    dev = write_corpus(d / "dev.txt", toy_sentences(30, seed=1))
    quiet_train(tiny_config(train, dev, training__max_steps=5), d / "bilm")
    task = write_corpus(d / "task.txt", toy_sentences(100, seed=2))
    return d / "bilm", task, dev


def test_the_text_is_the_sentences_without_labels(tmp_path):
    vocab = spacy.blank("en").vocab
    docs = DocBin()
    tagged = Doc(vocab, words=["Ms.", "Lee", "left", "."], tags=["NNP", "NNP", "VBD", "."])
    tagged.ents = [tagged.char_span(0, 7, label="PER")]
    docs.add(tagged)
    docs.add(Doc(vocab, words=["Hi", "!"], spaces=[False, False]))
    docs.to_disk(tmp_path / "train.spacy")
    target = tmp_path / "text" / "train.txt"
    info = write_text(tmp_path / "train.spacy", target)
    assert target.read_text() == "Ms. Lee left .\nHi !\n"
    assert info["sentences"] == 2 and info["tokens"] == 6 and len(info["sha256"]) == 64
    written = target.stat().st_mtime_ns
    assert write_text(tmp_path / "train.spacy", target) == info
    assert target.stat().st_mtime_ns == written  # the same text is not written again


def test_the_tuning_config_is_the_bilms_own_for_one_epoch_of_the_task(base):
    run, task, dev = base
    config = tuning_config(run / "model", task, dev, {"training.batch_tokens": 40})
    c, t = config["corpus"], config["training"]
    assert c["train"] == str(task) and c["dev"] == str(dev) and c["tokenizer"] == "whitespace"
    assert t["max_epochs"] == 1 and t["max_steps"] is None and t["max_minutes"] is None
    assert t["batch_tokens"] == 40 and config["model"]["lstm_dim"] == 32


def test_perplexity_before_tuning_is_the_trainers_own(base, tmp_path):
    """The untuned biLM's dev perplexity is what the trainer measures of it before any step."""
    run, task, dev = base
    config = tuning_config(run / "model", task, dev, {})
    trainer = Trainer(
        config, tmp_path, init_from=str(run / "model"), progress_bar=False, log=lambda m: None
    )
    assert perplexity_before(run / "model", config) == trainer.evaluate()


def test_a_tuning_is_skipped_when_done_continued_when_cut_off_and_redone_for_another_bilm(
    base, tmp_path, capsys
):
    run, task, dev = base
    model = run / "model"
    stamp = {"bilm_fingerprint": load_bilm(model).fingerprint(), "train": "a", "dev": "b"}

    def config(steps):
        return tuning_config(model, task, dev, {"training.max_steps": steps})

    out = tmp_path / "tuned"
    assert tune(config(2), out, model, stamp)["steps"] == 2
    assert json.loads((out / "base.json").read_text()) == stamp
    # cut off after its last checkpoint, before the model was saved
    for path in sorted((out / "model").iterdir()):
        path.unlink()
    (out / "model").rmdir()
    capsys.readouterr()
    summary = tune(config(3), out, model, stamp)
    assert summary["steps"] == 3 and "resumed at step 2" in capsys.readouterr().err
    assert load_bilm(out / "model").fingerprint() == summary["fingerprint"]
    saved = (out / "model" / "training.json").stat().st_mtime_ns
    assert tune(config(3), out, model, stamp) == summary
    assert (out / "model" / "training.json").stat().st_mtime_ns == saved
    assert "is already tuned" in capsys.readouterr().out
    summary = tune(config(1), out, model, {**stamp, "bilm_fingerprint": "0" * 64})
    assert summary["steps"] == 1 and "tuning again" in capsys.readouterr().out


def test_only_a_model_saved_by_pretrain_with_its_softmax_is_tuned(base, fixture_dir):
    run, _, _ = base
    assert tunable_model(str(run)) == (run / "model", "")
    assert tunable_model(str(run / "model")) == (run / "model", "")
    for weights in (str(fixture_dir), "small"):
        model, reason = tunable_model(weights)
        assert model is None and "lm_head.pt" in reason and weights in reason
