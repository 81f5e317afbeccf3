"""The study's rows for where ELMo goes (`placement`): each ELMo system's config and size overrides,
its runs tied to the biLM, every learned mix recorded by its config path, and the summary's table
"Where ELMo goes"."""

import json

import numpy as np
import pytest
import spacy
from thinc.api import Config

from project.scripts import summarize
from project.scripts.run_study import Study, size_overrides
from project.scripts.scoring import learned_mixes
from project.scripts.study import ELMO_SYSTEMS, SCALES

from ..helpers import CONFIGS, tagged_examples

TAGGED = [
    (["Ann", "saw", "Paris", "."], ["PROPN", "VERB", "PROPN", "PUNCT"]),
    (["It", "rains", "."], ["PRON", "VERB", "PUNCT"]),
]
INPUT, TAGGER_OUTPUT = "components.tok2vec.model.embed.elmo", "components.tagger.model.tok2vec.elmo"


@pytest.mark.parametrize(
    "system, paths",
    [
        ("elmo", [INPUT]),
        ("elmo-output", [TAGGER_OUTPUT]),
        ("elmo-both", [INPUT, TAGGER_OUTPUT]),
        ("elmo-layers01", [INPUT]),
    ],
)
def test_each_elmo_system_trains_its_config_with_sizes_for_each_of_its_mixes(system, paths):
    """The overrides name every ElmoFeatures block of the system's config, and only blocks it has
    (spaCy refuses an override of a setting the config lacks)."""
    config = CONFIGS / f"tagger_{ELMO_SYSTEMS[system]}.cfg"
    overrides = size_overrides(config, 3, 32)
    assert overrides == {
        f"{path}.{setting}": value
        for path in paths
        for setting, value in (("n_layers", 3), ("width", 32))
    }
    Config().from_disk(config, interpolate=False, overrides=overrides)
    ner = CONFIGS / f"ner_{ELMO_SYSTEMS[system]}.cfg"
    assert size_overrides(ner, 3, 32) == {
        k.replace(".tagger.", ".ner."): v for k, v in overrides.items()
    }


@pytest.mark.parametrize("system", ["elmo", "elmo-output", "elmo-both", "elmo-layers01"])
def test_runs_of_every_elmo_system_are_redone_after_the_bilm_changes(tmp_path, system):
    study = Study(SCALES["smoke"], None, "uner")
    # the biLM's sizes and fingerprint, without loading one
    study.__dict__["bilm_info"] = (
        3,
        32,
        "current",
    )
    pos, record = study.tasks[0], tmp_path / "train.json"
    for fingerprint, stale in (("earlier", True), ("current", False)):
        record.write_text(
            json.dumps(
                {"task": "pos", "system": system, "data": pos.data, "bilm_fingerprint": fingerprint}
            )
        )
        assert study.stale(record, pos) is stale
    record.write_text(json.dumps({"task": "pos", "system": "base", "data": pos.data}))
    assert not study.stale(record, pos)


@pytest.mark.parametrize("output_first", [False, True])
def test_every_mix_is_recorded_under_its_own_config_path(fixture_dir, output_first):
    """One component with two mixes (its own encoder reading layers [0, 1], ELMo at its output
    reading all): each record names the block that made it, whichever comes first in the config."""

    config = Config().from_disk(CONFIGS / "tagger_elmo_both.cfg")
    config["components"]["elmo"]["weights"] = str(fixture_dir)
    config["training"]["gpu_allocator"] = config["system"]["gpu_allocator"] = None
    config["nlp"]["pipeline"] = ["elmo", "tagger"]
    encoder = config["components"].pop("tok2vec")["model"]
    encoder["embed"]["elmo"].update(
        {"@architectures": "spacy_elmo.ElmoFeatures.v3", "layers": [0, 1]}
    )
    at_output = config["components"]["tagger"]["model"]["tok2vec"]
    # the listener gives way to the encoder
    features, _ = (
        at_output.pop("elmo"),
        at_output.pop("tok2vec"),
    )
    at_output.update(
        {"elmo": features, "tok2vec": encoder}
        if output_first
        else {"tok2vec": encoder, "elmo": features}
    )
    nlp = spacy.util.load_model_from_config(Config(config), auto_fill=True)
    nlp.initialize(lambda: tagged_examples(nlp, TAGGED))
    mixes = learned_mixes(nlp)
    assert list(nlp.config["components"]["tagger"]["model"]["tok2vec"])[1:] == (
        ["elmo", "tok2vec"] if output_first else ["tok2vec", "elmo"]
    )
    by_path = {mix["path"]: mix for mix in mixes}
    inner, outer = (
        by_path["components.tagger.model.tok2vec.tok2vec.embed.elmo"],
        by_path[TAGGER_OUTPUT],
    )
    assert len(mixes) == 2 and inner["layers"] == [0, 1] and outer["layers"] == [0, 1, 2]
    assert (
        inner["weights"][2] == 0.0
        and np.isclose(sum(inner["weights"]), 1)
        and inner["gamma"] == 1.0
    )
    assert np.allclose(outer["weights"], 1 / 3)


def run_record(system, fraction, seed, score, fingerprint="current", dev=None):
    record = {
        "task": "pos",
        "data": "UD English-EWT (UPOS)",
        "system": system,
        "fraction": fraction,
        "seed": seed,
        "test": {"tag_acc": score},
        "dev": score if dev is None else dev,
        "words_per_s": 1000.0,
        "pipeline_mb": 6.0,
        "train_seconds": 60.0,
        "date": "2026-11-25",
        "machine": "2 vCPU test",
    }
    if system != "base":
        record["bilm_fingerprint"] = fingerprint
        paths = {
            "elmo": [INPUT],
            "elmo-output": [TAGGER_OUTPUT],
            "elmo-both": [INPUT, TAGGER_OUTPUT],
            "elmo-layers01": [INPUT],
        }[system]
        layers = [0, 1] if system == "elmo-layers01" else [0, 1, 2]
        weights = [0.4, 0.6, 0.0] if system == "elmo-layers01" else [0.2, 0.3, 0.5]
        record["mixes"] = [
            {"path": path, "layers": layers, "weights": weights, "gamma": 1.5} for path in paths
        ]
    return record


def placement_metrics(metrics):
    """A metrics directory of tagger runs of the baseline and every ELMo placement at 10% and 100%,
    2 seeds each (ELMo at the output best on dev, not on test), and one run of an earlier biLM."""
    (metrics / "runs").mkdir(parents=True)
    (metrics / "bilm.json").write_text(
        json.dumps({"path": "bilm", "fingerprint": "current", "sha256": {"weights.pt": "abc"}})
    )
    scores = {
        "base": 0.80,
        "elmo": 0.84,
        "elmo-output": 0.82,
        "elmo-both": 0.86,
        "elmo-layers01": 0.83,
    }
    for system, score in scores.items():
        for fraction in (0.1, 1.0):
            for seed in (0, 1):
                value = score + fraction / 10 + seed / 100
                dev = 0.99 if system == "elmo-output" else value  # the best on dev, not on test
                (metrics / "runs" / f"pos-{system}-f{fraction:g}-s{seed}.json").write_text(
                    json.dumps(run_record(system, fraction, seed, value, dev=dev))
                )
    (metrics / "runs" / "pos-elmo-both-f1-s2.json").write_text(
        json.dumps(run_record("elmo-both", 1.0, 2, 0.10, fingerprint="earlier"))
    )
    return metrics


def test_the_summary_shows_where_elmo_goes_beside_the_input_and_the_baseline(tmp_path):
    """Each placement is a column of its own table (mean ± sd over seeds), and the one with the best
    dev score is chosen, by dev and not by test; the scores table and the claims keep to ELMo at the
    input, and the placement chosen on dev gets claims of its own; the layers table has a row per
    mix; a run of another biLM is left out, and without placement runs there is no such table."""
    metrics = placement_metrics(tmp_path / "metrics")
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert (
        "| task | data | fraction | baseline | input | output | input + output | input, layers [0, "
        "1] | "
        "chosen on dev |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        "| pos (UPOS accuracy) | UD English-EWT (UPOS) | 10% | 81.50 ± 0.71 | 85.50 ± 0.71 | 83.50 "
        "± 0.71 | "
        "87.50 ± 0.71 | 84.50 ± 0.71 | output: 83.50 ± 0.71 |\n"
        "| pos (UPOS accuracy) | UD English-EWT (UPOS) | 100% | 90.50 ± 0.71 | 94.50 ± 0.71 | "
        "92.50 ± 0.71 | "
        "96.50 ± 0.71 | 93.50 ± 0.71 | output: 92.50 ± 0.71 |\n"
    ) in summary
    assert (
        "| ELMo placed by dev (output) beats the baseline at 100% | pos | UD English-EWT (UPOS) | "
        "holds (+2.00) |" in summary
    )
    assert (
        "| ELMo placed by dev (output) beats floret vectors at 100% | pos | UD English-EWT (UPOS) "
        "| not run |" in summary
    )
    assert "| task | data | fraction | baseline | ELMo | ELMo − baseline |" in summary
    assert (
        "| ELMo beats the baseline at 100% | pos | UD English-EWT (UPOS) | holds (+4.00) |"
        in summary
    )
    left_out = "Made with an earlier biLM and left out until rerun: pos-elmo-both (1 run at 100%)."
    assert left_out in summary
    # cost of each system
    assert "| pos | UD English-EWT (UPOS) | ELMo at output | 1,000 | 6.0 | 1.0 |" in summary
    assert (
        "| task | data | system | mix | layer 0 | layer 1 | layer 2 | gamma |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
        "| pos | UD English-EWT (UPOS) | ELMo | `tok2vec.model.embed.elmo` | 0.200 | 0.300 | 0.500 "
        "| 1.500 |\n"
        "| pos | UD English-EWT (UPOS) | ELMo at output | `tagger.model.tok2vec.elmo` | 0.200 | "
        "0.300 | 0.500 | 1.500 |\n"
        "| pos | UD English-EWT (UPOS) | ELMo at input + output | `tok2vec.model.embed.elmo` | "
        "0.200 | 0.300 | 0.500 | "
        "1.500 |\n"
        "| pos | UD English-EWT (UPOS) | ELMo at input + output | `tagger.model.tok2vec.elmo` | "
        "0.200 | 0.300 | "
        "0.500 | 1.500 |\n"
        "| pos | UD English-EWT (UPOS) | ELMo layers [0, 1] | `tok2vec.model.embed.elmo` | 0.400 | "
        "0.600 | – | "
        "1.500 |\n"
    ) in summary
    for path in (metrics / "runs").glob("pos-elmo-*"):
        path.unlink()
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    assert "Where ELMo goes" not in (tmp_path / "summary.md").read_text()
