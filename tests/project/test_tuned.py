"""The study's system `elmo-tuned`: ELMo at the input, with the biLM the `tune` step tuned on the
run's own training set. Where it finds that biLM, a clear stop where it is missing, its runs redone
after a new tuning, and its rows in the summary."""

import json

import pytest

from project.scripts import summarize
from project.scripts.run_study import Study
from project.scripts.study import SCALES, TUNABLE_FILES
from project.scripts.tune_bilm import Tuner

POS_DATA = "UD English-EWT (UPOS)"


def smoke_study(tmp_path, bilm=None, systems=("elmo-tuned",)):
    """The smoke study of the tagger, with its training directory under tmp_path and a biLM
    (fingerprint "current") that `pretrain` saved with its softmax, without loading one."""
    if bilm is None:
        bilm = tmp_path / "bilm" / "model"
        bilm.mkdir(parents=True)
        for name in TUNABLE_FILES:
            (bilm / name).touch()
    study = Study(SCALES["smoke"], str(bilm), "uner", tasks=["pos"], systems=list(systems))
    study.training = tmp_path / "training"
    study.__dict__["bilm_info"] = (3, 32, "current")
    return study


def write_tuning(study, fraction, seed, fingerprint, base="current"):
    """A finished tuning, as the `tune` step leaves it: the model's training.json and the stamp of
    the biLM it started from."""
    model = study.tuned_bilm(study.tasks[0], fraction, seed)
    model.mkdir(parents=True, exist_ok=True)
    (model / "training.json").write_text(json.dumps({"fingerprint": fingerprint}))
    (model.parent / "base.json").write_text(json.dumps({"bilm_fingerprint": base}))


def test_each_run_reads_the_bilm_tuned_on_its_own_training_set(tmp_path):
    """The whole split at 100%, the seed's subset below: where the `tune` step writes them."""
    study = Study(SCALES["full"], None, "uner")
    tuner = Tuner(study, study.bilm)
    for task in study.tasks:
        for fraction, seed, name in tuner.training_sets(task):
            for run_seed in [seed] if seed is not None else study.scale.seeds:
                assert study.tuned_bilm(task, fraction, run_seed) == (
                    tuner.root / task.run_name / name / "model"
                )


def test_a_missing_tuned_bilm_stops_the_training_step_naming_the_tune_step(tmp_path, capsys):
    study = smoke_study(tmp_path)
    for step, missing in (("train", "pos/f1/model"), ("sample", "pos/f0.1-s0/model")):
        with pytest.raises(SystemExit) as stop:
            study.train_step(step if step == "sample" else "main")
        message = str(stop.value)
        assert "`python -m spacy project run tune`" in message and missing in message, message
    # a tuning of an earlier biLM is no tuning of this one
    write_tuning(study, 1.0, 0, "tuned", base="earlier")
    with pytest.raises(SystemExit, match="pos/f1/model"):
        study.train_step("main")
    assert not (study.training / "runs").exists()  # nothing was trained before the stop
    # weights that cannot be tuned (the `tune` step records why): the system is left out
    capsys.readouterr()
    untunable = smoke_study(tmp_path / "published", bilm="small")
    untunable.train_step("main")
    out = capsys.readouterr().out
    assert "elmo-tuned: not run" in out and "main: 0 run(s) to train" in out


def test_a_run_is_redone_after_its_bilm_is_tuned_again_or_the_bilm_changes(tmp_path):
    study = smoke_study(tmp_path)
    pos, record = study.tasks[0], tmp_path / "train.json"
    record.write_text(
        json.dumps(
            {
                "task": "pos",
                "data": pos.data,
                "system": "elmo-tuned",
                "fraction": 1.0,
                "seed": 2,
                "bilm_fingerprint": "current",
                "tuned_bilm_fingerprint": "tuned-1",
            }
        )
    )
    assert study.stale(record, pos)  # not tuned yet
    write_tuning(study, 1.0, 0, "tuned-1")
    assert not study.stale(record, pos)  # every seed at 100% reads the one tuning of the split
    write_tuning(study, 1.0, 0, "tuned-2")
    assert study.stale(record, pos)
    write_tuning(study, 1.0, 0, "tuned-1")
    study.__dict__["bilm_info"] = (3, 32, "new")
    assert study.stale(record, pos)


def tuning_name(fraction, seed):
    """The training set a tuning is of, as the fake fingerprints below name it."""
    return "f1" if fraction == 1.0 else f"f{fraction:g}-s{seed}"


def run_record(system, fraction, seed, score, tuned_fingerprint=None):
    record = {
        "task": "pos",
        "data": POS_DATA,
        "system": system,
        "fraction": fraction,
        "seed": seed,
        "test": {"tag_acc": score},
        "dev": score,
        "words_per_s": 1000.0,
        "pipeline_mb": 6.0,
        "train_seconds": 60.0,
        "date": "2026-11-25",
        "machine": "2 vCPU test",
    }
    if system.startswith("elmo"):
        record["bilm_fingerprint"] = "current"
    if system == "elmo-tuned":
        record["tuned_bilm_fingerprint"] = tuned_fingerprint or tuning_name(fraction, seed)
    return record


# test scores by system and fraction (seed 1 scores 0.01 more than seed 0)
SCORES = {
    "base": {0.01: 0.70, 0.1: 0.80, 1.0: 0.90},
    "spacy-pretrain": {1.0: 0.905},
    "floret": {1.0: 0.895},
    "elmo": {0.01: 0.76, 0.1: 0.83, 1.0: 0.91},
    "elmo-tuned": {0.01: 0.78, 0.1: 0.84, 1.0: 0.92},
}


def tuned_metrics(metrics):
    """Tagger runs of SCORES (2 seeds), the tunings they read in tuned.json, and one run of an
    earlier tuning."""
    (metrics / "runs").mkdir(parents=True)
    (metrics / "bilm.json").write_text(
        json.dumps(
            {
                "path": "bilm",
                "fingerprint": "current",
                "sha256": {"weights.pt": "abc"},
                "corpus_sha256": {"wikitext2.train.txt": "d1", "1b_benchmark.dev.tokens": "d2"},
            }
        )
    )
    for system, by_fraction in SCORES.items():
        for fraction, score in by_fraction.items():
            for seed in (0, 1):
                (metrics / "runs" / f"pos-{system}-f{fraction:g}-s{seed}.json").write_text(
                    json.dumps(run_record(system, fraction, seed, score + seed / 100))
                )
    (metrics / "runs" / "pos-elmo-tuned-f1-s2.json").write_text(
        json.dumps(run_record("elmo-tuned", 1.0, 2, 0.10, tuned_fingerprint="earlier"))
    )
    records = [
        {
            "task": "pos",
            "data": POS_DATA,
            "fraction": fraction,
            "seed": seed,
            "fingerprint": tuning_name(fraction, seed),
            "tune_seconds": 120.0 if fraction == 1.0 else 10.0,
            "machine": "2 vCPU tuner",
        }
        for fraction, seed in ((1.0, None), (0.01, 0), (0.01, 1), (0.1, 0), (0.1, 1))
    ]
    (metrics / "tuned.json").write_text(json.dumps({"records": records}))
    return metrics


def test_the_summary_gives_the_tuned_bilm_its_rows_claims_cost_and_text(tmp_path):
    """A column beside ELMo, the claims of ELMo against the baselines made of it too and it against
    ELMo, the tuning time in the cost table, the raw text each system saw; a run of an earlier
    tuning left out; none of it without tuned runs."""
    metrics = tuned_metrics(tmp_path / "metrics")
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert (
        "| task | data | fraction | baseline | spacy pretrain | floret vectors | ELMo | "
        "ELMo, tuned biLM | ELMo − baseline |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        f"| pos (UPOS accuracy) | {POS_DATA} | 1% | 70.50 ± 0.71 | – | – | 76.50 ± 0.71 | "
        "78.50 ± 0.71 | +6.00 |\n"
        f"| pos (UPOS accuracy) | {POS_DATA} | 10% | 80.50 ± 0.71 | – | – | 83.50 ± 0.71 | "
        "84.50 ± 0.71 | +3.00 |\n"
        f"| pos (UPOS accuracy) | {POS_DATA} | 100% | 90.50 ± 0.71 | 91.00 ± 0.71 | 90.00 ± 0.71 "
        "| 91.50 ± 0.71 | 92.50 ± 0.71 | +1.00 |\n"
    ) in summary
    on = f"| pos | {POS_DATA} |"
    for claim in (
        f"| ELMo beats the baseline at 1% {on} holds (+6.00) |",
        f"| ELMo, tuned biLM beats the baseline at 1% {on} holds (+8.00) |",
        f"| ELMo, tuned biLM beats the baseline at 100% {on} holds (+2.00) |",
        f"| ELMo, tuned biLM beats spacy pretrain at 100% {on} holds (+1.50) |",
        f"| ELMo, tuned biLM beats floret vectors at 100% {on} holds (+2.50) |",
        f"| the gain of ELMo, tuned biLM grows as the data shrinks {on} holds "
        "(1%: +8.00, 10%: +4.00, 100%: +2.00) |",
        f"| ELMo, tuned biLM beats ELMo at 10% {on} holds (+1.00) |",
        f"| ELMo, tuned biLM on 1% matches the baseline on 10% {on} does not hold "
        "(78.50 ± 0.71 vs 80.50 ± 0.71) |",
        f"| ELMo, tuned biLM on 10% matches the baseline on 100% {on} does not hold "
        "(84.50 ± 0.71 vs 90.50 ± 0.71) |",
    ):
        assert claim in summary, claim
    assert (
        f"{on} ELMo, tuned biLM | 1,000 | 6.0 | 1.0 + 2.0 tuning the biLM | 2 vCPU test; "
        "2 vCPU tuner |" in summary
    )
    [text] = [line for line in summary.splitlines() if line.startswith("Raw text each system saw")]
    assert "`wikitext2.train.txt`, `1b_benchmark.dev.tokens`" in text and "labels dropped" in text
    assert "Made with an earlier biLM and left out until rerun: pos-elmo-tuned-f1-s2." in summary
    for path in (metrics / "runs").glob("pos-elmo-tuned-*"):
        path.unlink()
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert "tuned biLM" not in summary and "Raw text" not in summary
