"""What reruns when: the steps of project.yml (as weasel reads it) pass and depend on what their
scripts read, and the scripts compare each record with what it was made from, saying why they
redo or skip a run."""

import ast
import gzip
import json
import os
import shutil
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest
from weasel.util import load_project_config

from project.scripts import run_study
from project.scripts.pretrain_bilm import check_trained, trained_otherwise
from project.scripts.run_study import CONVERTERS, SYSTEMS_MAIN, Study
from project.scripts.study import CONFIGS, SCALES, TASKS, shown
from project.scripts.summarize import main as summarize_main

from ..helpers import REPO, data_path, quiet_train, tiny_config, toy_sentences, write_corpus
from .project_copy import copy_project


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


def test_a_bilm_trained_otherwise_than_asked_is_kept_and_the_step_names_what_changed(tmp_path):
    """The pretrain step finds a trained biLM: of the settings, budget and text asked for, it is
    used; trained with another budget or on other text, the step stops naming the change (and how
    to train one as asked) rather than take it as "already trained"."""
    train_file = write_corpus(tmp_path / "text" / "train.txt", toy_sentences(60))
    dev_file = write_corpus(tmp_path / "text" / "dev.txt", toy_sentences(10, seed=1))
    bilm_dir = tmp_path / "bilm"
    quiet_train(tiny_config(train_file, dev_file), bilm_dir)
    assert trained_otherwise(tiny_config(train_file, dev_file), bilm_dir) == []
    # when to report is not what the biLM was made from
    assert (
        trained_otherwise(tiny_config(train_file, dev_file, training__eval_every=5), bilm_dir) == []
    )
    longer = tiny_config(train_file, dev_file, training__max_steps=40)
    assert trained_otherwise(longer, bilm_dir) == ["training.max_steps was 20, now 40"]
    write_corpus(train_file, toy_sentences(60, seed=2))
    [change] = trained_otherwise(tiny_config(train_file, dev_file), bilm_dir)
    assert change == f"the training text {train_file} changed"
    with pytest.raises(SystemExit) as stop:
        check_trained(longer, bilm_dir)
    message = str(stop.value)
    assert message.startswith(f"error: the biLM in {bilm_dir} was trained otherwise"), message
    assert "training.max_steps was 20, now 40" in message and "text" in message
    assert f"remove {bilm_dir}" in message and "\n" not in message


LM_SOURCES = {
    "wikitext2.train.txt": "wikitext2/train.txt.gz",
    "wikitext2.valid.txt": "wikitext2/valid.txt.gz",
    "1b_benchmark.dev.tokens": "lm1b_heldout/news.en.heldout-00010-of-00050.gz",
    "1b_benchmark.test.tokens": "lm1b_heldout/news.en.heldout-00012-of-00050.gz",
}


def small_lm_assets(project, lines=120):
    """project/assets/lm in a project copy: the first lines of each raw text (the smoke scale
    reads 100 of them)."""
    lm = project / "project" / "assets" / "lm"
    lm.mkdir(parents=True)
    for name, source in LM_SOURCES.items():
        with gzip.open(data_path(*source.split("/")), "rt", encoding="utf-8") as src:
            (lm / name).write_text("".join(islice(src, lines)), encoding="utf-8")
    return lm


def pretrain_step(project, *args):
    """`python -m project.scripts.pretrain_bilm --scale smoke ARGS` in the project copy."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "project.scripts.pretrain_bilm",
            "--scale",
            "smoke",
            "--threads",
            "1",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_pretrain_step_stops_where_its_bilm_was_trained_with_another_budget(tmp_path):
    """As the step runs it: the second run asks for more steps than the biLM was trained for and
    stops with one error line naming that, and bilm.json still names the biLM trained."""
    copy_project(tmp_path)
    small_lm_assets(tmp_path)
    first = pretrain_step(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    record = tmp_path / "project" / "training" / "smoke" / "metrics" / "bilm.json"
    trained = record.read_text()
    again = pretrain_step(tmp_path)
    assert again.returncode == 0 and "already trained" in again.stdout, again.stderr[-2000:]
    longer = pretrain_step(tmp_path, "--training.max_steps", "25")
    assert longer.returncode == 1, longer.stdout + longer.stderr[-2000:]
    assert longer.stderr.startswith("error: the biLM in project/training/smoke/bilm was trained")
    assert "training.max_steps was 20, now 25" in longer.stderr, longer.stderr
    assert record.read_text() == trained


def test_the_train_step_depends_on_every_config_its_runs_read():
    """An edited pretrain_tok2vec.cfg (whose [pretraining] the spacy-pretrain runs train with, and
    whose sha256 they record) reruns the step as the task configs do."""
    deps = commands()["train"]["deps"]
    study = Study(SCALES["full"], None, "uner")
    configs = {study.config_of(task, system) for task in study.tasks for system in SYSTEMS_MAIN}
    for path in [*sorted(configs), CONFIGS / "pretrain_tok2vec.cfg"]:
        assert covered(shown(path), deps), (shown(path), deps)


@pytest.mark.parametrize("system", ["floret", "spacy-pretrain"])
def test_a_baseline_run_made_with_other_baseline_weights_is_stale(tmp_path, system):
    """A run of a baseline records the sha256 of the vectors or weights it started from: after the
    baselines step made them again, the run is stale (and says why); a record from before runs
    recorded them is trusted."""
    study = Study(SCALES["smoke"], None, "uner", tasks=["pos"])
    study.training = tmp_path / "training"
    baselines = study.training / "baselines"
    artefact = {
        "floret": baselines / "floret" / "vectors" / "vocab" / "vectors",
        "spacy-pretrain": baselines / "tok2vec" / "model-last.bin",
    }[system]
    artefact.parent.mkdir(parents=True)
    artefact.write_bytes(b"first")
    record = {"task": "pos", "data": TASKS["pos"].data, "system": system, "fraction": 1.0}
    path = tmp_path / "train.json"
    shown_path = shown(artefact if system == "spacy-pretrain" else artefact.parent.parent)
    path.write_text(json.dumps({**record, "baseline": {shown_path: "0" * 64}}))
    reason = study.why_stale(path, TASKS["pos"])
    assert (
        reason
        == f"made with another baseline than {shown_path} now (the baselines step made it again)"
    )
    path.write_text(json.dumps({**record, "baseline": study.baseline_of(system)}))
    assert not study.stale(path, TASKS["pos"])
    artefact.write_bytes(b"made again")
    assert study.stale(path, TASKS["pos"])
    path.write_text(json.dumps(record))
    assert not study.stale(path, TASKS["pos"])


def imported_scripts(name, seen=None):
    """project/scripts/<name>.py and the scripts it imports (`from .module import ...`), all the
    way down."""
    seen = set() if seen is None else seen
    path = REPO / "project" / "scripts" / f"{name}.py"
    seen.add(path.relative_to(REPO).as_posix())
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if f"project/scripts/{node.module}.py" not in seen:
                imported_scripts(node.module, seen)
    return seen


def test_the_summary_depends_on_every_record_and_script_it_is_rendered_from():
    """summary.md is rendered from the runs' metrics and bilm.json, baselines.json, probe.json and
    tuned.json, by summarize.py and the scripts it imports: a change to any of them renders it
    again."""
    summary = commands(metrics_dir="project/metrics")["summary"]
    deps = summary["deps"]
    records = ["runs", "bilm.json", "baselines.json", "probe.json", "tuned.json"]
    for path in [*(f"project/metrics/{name}" for name in records), *imported_scripts("summarize")]:
        assert covered(path, deps), (path, deps)
    assert summary["script"] == ["python -m project.scripts.summarize --scale full"]


def test_a_torn_run_record_is_stale_and_says_so(tmp_path, capsys):
    """A train.json cut short (a kill during a write, before records were written whole) is stale:
    the reason names it, and evaluate names the run it leaves to the train step, which trains it
    again (rather than stop on a bare JSONDecodeError naming no file)."""
    study = Study(SCALES["smoke"], None, "uner", tasks=["pos"])
    study.training, study.metrics = tmp_path / "training", tmp_path / "metrics"
    record = study.run_dir(TASKS["pos"], "base", 1.0, 0) / "train.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"task": "pos", "data": "UD Eng')
    reason = study.why_stale(record, TASKS["pos"])
    assert reason.startswith(f"{record} is not whole JSON (") and "cut short" in reason, reason
    study.evaluate_step()
    out = capsys.readouterr().out
    assert f"pos-base-f1-s0: not evaluated: {reason}; the train step trains it again" in out


def test_a_torn_metrics_record_stops_the_summary_with_one_error_naming_it(tmp_path):
    metrics = tmp_path / "metrics"
    shutil.copytree(REPO / "project" / "metrics", metrics)
    torn = metrics / "runs" / "pos-base-f1-s0.json"
    torn.write_bytes(torn.read_bytes()[:200])
    with pytest.raises(SystemExit) as stop:
        summarize_main(["--metrics", str(metrics), "--out", str(tmp_path / "out")])
    message = str(stop.value)
    assert message.startswith(f"error: {torn} is not whole JSON (") and "\n" not in message
    assert "run the evaluate step again" in message


def test_the_baselines_step_outputs_what_the_baseline_runs_start_from(tmp_path):
    """Weasel runs the baselines step again where the weights or vectors the runs start from are
    gone or changed (its outputs), and the runs then find the baseline missing or made again."""
    outputs = commands(scale="smoke")["baselines"]["outputs"]
    study = Study(SCALES["smoke"], None, "uner")
    for system in ("spacy-pretrain", "floret"):
        [(path, digest)] = study.baseline_of(system).items()
        assert covered(path, outputs), (path, outputs)
    study.training = tmp_path
    record = tmp_path / "train.json"
    [(path, _)] = study.baseline_of("floret").items()
    record.write_text(
        json.dumps({"data": TASKS["pos"].data, "system": "floret", "baseline": {path: "0"}})
    )
    assert study.why_stale(record, TASKS["pos"]) == (
        f"its baseline {path} is missing: run the baselines step first, "
        "`python -m spacy project run baselines` (with the same --vars)"
    )
