"""What reruns when: the steps of project.yml (as weasel reads it) pass and depend on what their
scripts read, and the scripts compare each record with what it was made from, saying why they
redo or skip a run."""

import json
from pathlib import Path

import pytest
from weasel.util import load_project_config

from project.scripts import run_study
from project.scripts.run_study import CONVERTERS, Study
from project.scripts.study import SCALES, TASKS

from ..helpers import REPO


def commands(**variables):
    """project.yml's commands (name -> command) as weasel reads them with these --vars."""
    overrides = {f"vars.{name}": value for name, value in variables.items()}
    config = load_project_config(REPO, overrides=overrides)
    return {command["name"]: command for command in config["commands"]}


def scripts_of(module, **variables):
    """Every script line of project.yml that runs `python -m project.scripts.<module>`."""
    return [
        line
        for command in commands(**variables).values()
        for line in command["script"]
        if f"-m project.scripts.{module} " in line
    ]


def test_every_step_that_reads_the_bilm_is_given_elmo_weights():
    """With --vars.elmo_weights, each script that loads the biLM (to train with it, or to compare
    a run's biLM with it, as `evaluate` does) gets it, not the pretrained default."""
    lines = [
        line
        for module in ("run_study", "tune_bilm", "layer_probe")
        for line in scripts_of(module, elmo_weights="/given/bilm")
        if "run_study corpus " not in line and "run_study baselines " not in line
    ]
    assert sum("run_study evaluate " in line for line in lines) == 3, lines
    assert [line for line in lines if "--bilm=/given/bilm" not in line] == []
    assert "project/metrics/bilm.json" in commands()["evaluate"]["deps"]


def test_evaluate_says_which_runs_it_skips_as_made_with_another_bilm(capsys, tmp_path, fixture_dir):
    """A trained ELMo run of another biLM than the step's is not evaluated, and the step says so
    (the train step trains it again); a run not trained at all is passed over quietly."""
    study = Study(SCALES["smoke"], str(fixture_dir), "uner", tasks=["pos"])
    study.training, study.metrics = tmp_path / "training", tmp_path / "metrics"
    run = study.run_dir(TASKS["pos"], "elmo", 1.0, 0)
    run.mkdir(parents=True)
    record = {"task": "pos", "data": TASKS["pos"].data, "system": "elmo", "fraction": 1.0}
    record.update(seed=0, bilm_fingerprint="0" * 64)
    (run / "train.json").write_text(json.dumps(record))
    study.evaluate_step()
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if "pos-" in line]
    assert line.startswith("pos-elmo-f1-s0: not evaluated:") and "another biLM" in line, out
    assert "train step" in line
    assert list((study.metrics / "runs").iterdir()) == []


def test_a_stale_runs_reason_is_given(tmp_path, fixture_dir):
    study = Study(SCALES["smoke"], str(fixture_dir), "uner", tasks=["pos"])
    record = tmp_path / "train.json"
    assert study.why_stale(record, TASKS["pos"]) == "not trained"
    record.write_text(json.dumps({"task": "pos", "data": "other", "system": "base"}))
    assert "other data" in study.why_stale(record, TASKS["pos"])
    record.write_text(json.dumps({"task": "pos", "data": TASKS["pos"].data, "system": "base"}))
    assert study.why_stale(record, TASKS["pos"]) is None


def covered(path, deps):
    """Whether one of a step's deps is `path` or a directory above it."""
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


@pytest.mark.parametrize("ner_data", ["uner", "conll2003"])
def test_the_corpus_step_depends_on_every_file_it_converts_and_on_its_converters(ner_data):
    """New NER data (either data set) or an edited converter reruns the step, which converts
    again what was made from them (the splits record the same files)."""
    corpus = commands(ner_data=ner_data)["corpus"]
    [script] = corpus["script"]
    deps = corpus["deps"]
    for task in Study(SCALES["full"], None, ner_data).tasks:
        for name in task.files.values():
            assert covered(f"project/assets/{name}", deps), (name, deps)
    for module in (*CONVERTERS, run_study):
        path = Path(module.__file__).relative_to(REPO).as_posix()
        assert covered(path, deps), (path, deps)
    assert "-m project.scripts.run_study corpus " in script
