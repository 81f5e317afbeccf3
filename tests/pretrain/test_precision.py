"""`training.precision` of pretrain: bfloat16 autocast of the forward pass, float32 cell state and
weights, "auto" by what the device has, a clear error for what training cannot run, resumption that
keeps it."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from spacy_elmo import BiLM, ElmoConfigError, ElmoResumeError, load_bilm
from spacy_elmo.bilm.precision import native_bfloat16
from spacy_elmo.pretrain import BiLanguageModel, FullSoftmax, train
from spacy_elmo.pretrain.config import bilm_options, check_config, load_config, training_precision
from spacy_elmo.pretrain.corpus import TrainingCorpus, Vocab, make_tokenizer
from spacy_elmo.pretrain.outputs import CONFIG_FILE

from ..helpers import quiet_train, tiny_config, toy_sentences, write_corpus

NATIVE = native_bfloat16(torch.device("cpu"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    return write_corpus(d / "train.txt", toy_sentences(300)), write_corpus(
        d / "dev.txt", toy_sentences(30, seed=1)
    )


def test_the_objective_under_bfloat16_autocast_keeps_a_float32_cell_state(toy):
    """Autocast runs the products in bfloat16; the gates and the cell state stay float32, and the
    NLL is the float32 one within bfloat16's rounding."""
    torch.manual_seed(0)
    config = tiny_config(toy[0])
    corpus = TrainingCorpus(toy[0], make_tokenizer("whitespace"), 100)
    vocab = Vocab.build(corpus.counts, None)
    model = BiLanguageModel(BiLM(bilm_options(config)), FullSoftmax(16, len(vocab))).eval()
    batches = corpus.batches(
        (0, 0, 0), 0, vocab, None, "stream", 80, 10, word_ids=model.bilm.word_ids
    )
    _, batch = next(batches)
    exact, _ = model(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, state = model(batch)
    assert state.c.dtype == torch.float32
    torch.testing.assert_close(low.float(), exact, rtol=2e-2, atol=0)
    assert not torch.equal(low.float(), exact)  # the products did run in bfloat16


def test_bfloat16_pretraining_learns_records_its_precision_and_saves_float32(toy, tmp_path):
    config = tiny_config(
        *toy, training__precision="bfloat16", training__max_steps=30, training__eval_every=10
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train(config, tmp_path, progress_bar=False, log=lambda m: None)
    assert summary["precision"] == ("bfloat16" if NATIVE else "float32")
    warned = any("no native bfloat16" in str(w.message) for w in caught)
    assert warned == (not NATIVE)
    curve = [
        json.loads(line)["dev"]["mean"]
        for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert curve[-1] < 0.7 * curve[0]  # it learns
    float32 = quiet_train(
        tiny_config(*toy, training__max_steps=30, training__eval_every=10), tmp_path / "fp32"
    )
    assert abs(summary["dev"]["mean"] - float32["dev"]["mean"]) < 0.1 * float32["dev"]["mean"]
    weights = torch.load(tmp_path / "model" / "weights.pt", weights_only=True)
    assert {w.dtype for w in weights.values()} == {torch.float32}
    assert load_bilm(tmp_path / "model").embed([["the", "cat"]])[0].dtype.name == "float32"


def test_auto_is_bfloat16_where_native_else_float32_and_bad_values_are_named(toy, tmp_path):
    summary = quiet_train(
        tiny_config(*toy, training__precision="auto", training__max_steps=2), tmp_path
    )
    assert summary["precision"] == ("bfloat16" if NATIVE else "float32")
    with pytest.raises(ElmoConfigError, match="training.precision"):
        tiny_config(*toy, training__precision="int8")


def test_a_run_resumes_only_in_its_precision_and_configs_before_the_setting_meant_float32(
    toy, tmp_path
):
    kwargs = dict(training__max_steps=4, training__checkpoint_every=2)
    quiet_train(tiny_config(*toy, **kwargs), tmp_path)
    config_file = tmp_path / CONFIG_FILE
    # as a run of an earlier version saved it
    config_file.write_text(
        "".join(
            line
            for line in config_file.read_text().splitlines(keepends=True)
            if not line.startswith("precision")
        )
    )
    with pytest.raises(
        ElmoResumeError, match="training.precision is 'bfloat16' but .* with 'float32'"
    ):
        quiet_train(
            tiny_config(*toy, training__precision="bfloat16", training__max_steps=6),
            tmp_path,
            resume=True,
        )
    summary = quiet_train(tiny_config(*toy, training__max_steps=6), tmp_path, resume=True)
    assert summary["steps"] == 6 and summary["precision"] == "float32"


def test_a_config_written_before_the_precision_setting_means_float32_wherever_it_runs():
    """Not "auto": on a machine with native bfloat16 an earlier run's config would train in
    bfloat16 what its run trained in float32."""
    config = load_config()
    del config["training"]["precision"]
    check_config(config)
    assert training_precision(config) == "float32"
