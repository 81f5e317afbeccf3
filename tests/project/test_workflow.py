"""The spaCy project end to end: the `smoke` workflow (every step of `all` on tiny slices) in a copy
of the project, and the committed summary re-rendered from the committed metrics."""

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

import pytest
import spacy

from project.scripts.claims import gain_grows
from project.scripts.results import PLACEMENTS
from project.scripts.run_study import Study
from project.scripts.study import SCALES, TASKS, TUNED_AT
from project.scripts.summarize import main as summarize_main
from spacy_elmo import load_bilm

from ..helpers import REPO, data_path
from .project_copy import copy_project, spacy_project

pytestmark = pytest.mark.slow
SMOKE_METRICS = "project/training/smoke/metrics"


def summarize(metrics, out):
    """`python -m project.scripts.summarize --metrics METRICS --out OUT`, run in this process (the
    copy of the study holds the same scripts; with both paths given, nothing depends on where the
    project lies)."""
    summarize_main(["--metrics", str(metrics), "--out", str(out)])


@pytest.fixture(scope="module")
def smoke_project(tmp_path_factory):
    data_dir = data_path()
    project = tmp_path_factory.mktemp("project")
    copy_project(project)
    spacy_project(
        "run", "smoke", ".", f"--vars.data_dir={data_dir}", "--vars.threads=1", cwd=project
    )
    return project


def test_smoke_workflow_runs_every_step_and_writes_the_summary(smoke_project):
    metrics = smoke_project / SMOKE_METRICS
    bilm = json.loads((metrics / "bilm.json").read_text())
    assert bilm["trained_here"] and bilm["training"]["steps"] == 20
    assert (smoke_project / bilm["path"] / "weights.pt").is_file()
    runs = {p.stem: json.loads(p.read_text()) for p in (metrics / "runs").glob("*.json")}
    # main comparison: 2 tasks x 5 systems x 1 seed; sample efficiency: 2 tasks x 3 systems x 1
    # fraction
    assert len(runs) == 10 + 6, sorted(runs)
    for name, run in runs.items():
        metric = "tag_acc" if run["task"] == "pos" else "ents_f"
        assert (
            0.0 <= run["test"][metric] <= 1.0 and run["words_per_s"] > 0 and run["pipeline_mb"] > 0
        ), name
    [mix] = runs["pos-elmo-f1-s0"]["mixes"]
    assert mix["path"] == "components.tok2vec.model.embed.elmo" and mix["layers"] == [0, 1, 2]
    assert abs(sum(mix["weights"]) - 1) < 1e-5 and mix["gamma"] > 0
    # carries its vectors
    assert runs["pos-floret-f1-s0"]["pipeline_mb"] > runs["pos-base-f1-s0"]["pipeline_mb"]
    # the 10% subsets are a tenth of the (sliced) training set
    assert (
        runs["pos-base-f0.1-s0"]["train_sentences"] == 20
        and runs["pos-base-f1-s0"]["train_sentences"] == 200
    )
    # the baselines start from their pretrained weights: with the same seed and data, only those
    # differ
    runs_dir = smoke_project / "project" / "training" / "smoke" / "runs"
    tok2vec = {
        system: spacy.load(runs_dir / f"pos-{system}-f1-s0" / "model-best")
        .get_pipe("tok2vec")
        .model
        for system in ("base", "spacy-pretrain")
    }
    assert tok2vec["base"].to_bytes() != tok2vec["spacy-pretrain"].to_bytes()
    probe = json.loads((metrics / "probe.json").read_text())
    assert (
        set(probe["layers"]) == {"0", "1", "2"} and abs(sum(probe["mix"]["mix_weights"]) - 1) < 1e-5
    )
    summary = (metrics / "summary.md").read_text()
    assert "| pos (UPOS accuracy) | UD English-EWT (UPOS) | 100% |" in summary
    # NER on Universal NER English-EWT by default: no CoNLL-2003 asked for or fetched
    assert (
        "| ner (entity F1) | Universal NER English-EWT (preliminary train split) | 100% |"
        in summary
    )
    assert not (smoke_project / "project" / "assets" / "conll2003").exists()
    assert "ELMo beats the baseline at 10%" in summary and bilm["sha256"]["weights.pt"] in summary
    # the rows of ELMo with the biLM tuned on the task's text, beside ELMo
    assert "| ELMo | ELMo, tuned biLM | ELMo − baseline |" in summary
    assert summary.count("| ELMo, tuned biLM beats the baseline at 10% |") == 2
    assert summary.count("| ELMo, tuned biLM beats spacy pretrain at 100% |") == 2
    assert summary.count(" tuning the biLM |") == 2 and "Raw text each system saw" in summary
    assert "Where ELMo goes" not in summary  # no placement runs in `smoke`
    for png in ("accuracy_by_fraction.png", "layer_weights.png"):
        assert (metrics / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_smoke_workflow_tunes_the_bilm_on_each_tasks_text(smoke_project):
    """The `tune` step: a record per task and training set (the whole split, the 10% subset of seed
    0), perplexities before and after, and a tuned biLM that loads; the `elmo-tuned` run of each
    training set read that biLM, and the `probe` step probed the one tuned on the POS training
    split beside the untuned biLM."""
    metrics = smoke_project / SMOKE_METRICS
    bilm = json.loads((metrics / "bilm.json").read_text())
    records = json.loads((metrics / "tuned.json").read_text())["records"]
    assert sorted((r["task"], r["fraction"], r["seed"] or 0) for r in records) == [
        ("ner", 0.1, 0),
        ("ner", 1.0, 0),
        ("pos", 0.1, 0),
        ("pos", 1.0, 0),
    ]
    for record in records:
        before, after = (record["dev_perplexity"][when] for when in ("before", "after"))
        assert all(math.isfinite(p[d]) for p in (before, after) for d in ("forward", "mean"))
        assert record["bilm"]["fingerprint"] == bilm["fingerprint"] and record["steps"] == 3
        assert record["text"]["train"]["sentences"] == (200 if record["fraction"] == 1 else 20)
        tuned = load_bilm(smoke_project / record["path"])
        assert tuned.fingerprint() == record["fingerprint"] != bilm["fingerprint"]
        task = "pos" if record["task"] == "pos" else "ner-uner"
        run_id = f"{task}-elmo-tuned-f{record['fraction']:g}-s0"
        run = json.loads((metrics / "runs" / f"{run_id}.json").read_text())
        assert (run["tuned_bilm"], run["tuned_bilm_fingerprint"], run["bilm_fingerprint"]) == (
            record["path"],
            record["fingerprint"],
            bilm["fingerprint"],
        )
    [whole_pos] = [r for r in records if (r["task"], r["fraction"]) == ("pos", 1.0)]
    probe = json.loads((metrics / "probe.json").read_text())
    tuned = probe["tuned"]
    assert (tuned["fingerprint"], tuned["path"]) == (whole_pos["fingerprint"], whole_pos["path"])
    assert set(tuned["layers"]) == set(probe["layers"]) == {"0", "1", "2"}
    assert abs(sum(tuned["mix"]["mix_weights"]) - 1) < 1e-5 and tuned["mix"]["gamma"] > 0
    summary = (metrics / "summary.md").read_text()
    assert (
        "| UPOS accuracy (%), tuned biLM | " in summary
        and "| mix weights, tuned biLM | " in summary
    )
    assert f"Best single layer of the biLM tuned on the POS training split (`{tuned['path']}`)" in (
        summary
    )


# The steps of the placement test, run one after another in one interpreter (each as its
# `python -m project.scripts.run_study|summarize ARGS` runs it: `main` with those arguments), in the
# project copy that is the working directory; a line `#step# STEP` comes before each step's output.
STEPS = """
import sys
from project.scripts import run_study, summarize

for step in sys.argv[1:]:
    module, *args = step.split()
    print(f"#step# {step}", flush=True)
    if module == "summarize":
        summarize.main(args)
    else:
        sys.argv = [f"project.scripts.{module}", *args]
        run_study.main()
    sys.stdout.flush()
"""


def test_the_placement_systems_train_and_evaluate_on_the_smoke_bilm(smoke_project, tmp_path):
    """`run_study.py placement` (here one task and fraction) trains ELMo at the encoder's output, at
    its input and output, and at its input on layers [0, 1], then the tuned biLM at the one of them
    that dev chose (here the input's dev score is set below every other); `evaluate` records each
    pipeline's mixes under their config paths; the summary shows them beside ELMo at the input, and
    the tuned biLM at the chosen placement; run again, the step finds nothing to do."""
    copy_project(tmp_path)
    for part in ("corpus/smoke", "bilm", "tuned", "metrics", "runs/pos-elmo-f0.1-s0"):
        part = part if part.startswith("corpus") else f"training/smoke/{part}"
        shutil.copytree(smoke_project / "project" / part, tmp_path / "project" / part)
    for record in (
        tmp_path / "project/training/smoke/runs/pos-elmo-f0.1-s0/train.json",
        tmp_path / SMOKE_METRICS / "runs/pos-elmo-f0.1-s0.json",
    ):
        record.write_text(json.dumps({**json.loads(record.read_text()), "dev": -1.0}))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    study = "run_study {} --scale smoke --tasks pos"
    placement = study.format("placement") + " --fractions 0.1"
    steps = [placement, study.format("evaluate"), "summarize --scale smoke", placement]
    # one interpreter for the four steps (each `python -m` start costs seconds of imports); the
    # files each step writes are checked below, and the last step's output
    out = subprocess.run(
        [sys.executable, "-c", STEPS, *steps],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    outputs = re.split(r"^#step# ", out, flags=re.M)[1:]
    assert [o.splitlines()[0] for o in outputs] == steps
    metrics = tmp_path / SMOKE_METRICS
    bilm = json.loads((metrics / "bilm.json").read_text())
    runs = {
        system: json.loads((metrics / "runs" / f"pos-{system}-f0.1-s0.json").read_text())
        for system in ("elmo-output", "elmo-both", "elmo-layers01")
    }
    paths = {system: [mix["path"] for mix in run["mixes"]] for system, run in runs.items()}
    assert paths == {
        "elmo-output": ["components.tagger.model.tok2vec.elmo"],
        "elmo-both": [
            "components.tok2vec.model.embed.elmo",
            "components.tagger.model.tok2vec.elmo",
        ],
        "elmo-layers01": ["components.tok2vec.model.embed.elmo"],
    }
    [layers01] = runs["elmo-layers01"]["mixes"]
    assert (
        layers01["layers"] == [0, 1]
        and layers01["weights"][2] == 0.0
        and abs(sum(layers01["weights"]) - 1) < 1e-5
    )
    assert all(
        run["bilm_fingerprint"] == bilm["fingerprint"] and 0 <= run["test"]["tag_acc"] <= 1
        for run in runs.values()
    )
    summary = (metrics / "summary.md").read_text()
    table = summary.split("## Where ELMo goes")[1].split("##")[0]
    row = next(line for line in table.splitlines() if line.startswith("| pos (UPOS accuracy) |"))
    # baseline, input, output, both, layers [0, 1]: all run
    assert "| 10% |" in row and "–" not in row
    chosen = max(runs, key=lambda system: runs[system]["dev"])
    tuned = json.loads((metrics / "runs" / f"pos-{TUNED_AT[chosen]}-f0.1-s0.json").read_text())
    assert tuned["tuned_bilm"].endswith("tuned/pos/f0.1-s0/model") and "test" in tuned
    scores = summary.split("## Scores")[1].split("##")[0]
    row = next(line for line in scores.splitlines() if line.startswith("| pos (UPOS accuracy) |"))
    assert f"| {100 * tuned['test']['tag_acc']:.2f} ({PLACEMENTS[chosen]}) |" in row
    assert outputs[-1].count(" 0 run(s) to train") == 2 and "not chosen yet" not in outputs[-1]


def test_a_retrained_run_is_evaluated_again(smoke_project, tmp_path):
    """`evaluate` scores a run again where its training is not the one its metrics record (here a
    retrained base run: another train.json); a run whose metrics record its training is skipped."""
    copy_project(tmp_path)
    runs = "project/training/smoke/runs"
    parts = ["project/corpus/smoke", "project/training/smoke/bilm", "project/training/smoke/tuned"]
    for part in [*parts, SMOKE_METRICS, f"{runs}/pos-base-f1-s0", f"{runs}/pos-elmo-f1-s0"]:
        shutil.copytree(smoke_project / part, tmp_path / part)
    trained = tmp_path / runs / "pos-base-f1-s0" / "train.json"
    retrained = {**json.loads(trained.read_text()), "date": "2099-01-01", "train_seconds": 1.0}
    trained.write_text(json.dumps(retrained))
    evaluated = tmp_path / SMOKE_METRICS / "runs" / "pos-base-f1-s0.json"
    kept = tmp_path / SMOKE_METRICS / "runs" / "pos-elmo-f1-s0.json"
    before = kept.stat().st_mtime_ns
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    step = "run_study evaluate --scale smoke --tasks pos"
    subprocess.run(
        [sys.executable, "-c", STEPS, step], cwd=tmp_path, env=env, check=True, capture_output=True
    )
    record = json.loads(evaluated.read_text())
    assert record["date"] == "2099-01-01" and record["train_seconds"] == 1.0 and "test" in record
    assert kept.stat().st_mtime_ns == before


# In a copy of the study: whether a run is stale, then the edit named as the first argument, the
# corpus step (which prints each split it converts), and whether the run is stale now.
STALE_AFTER = """
import sys
from pathlib import Path
from project.scripts.run_study import Study
from project.scripts.study import SCALES, TASKS

DEV = "project/assets/ud/en_ewt-ud-dev.conllu"
study = Study(SCALES["smoke"], None, "uner", tasks=["pos"])
run = Path("project/training/smoke/runs/pos-base-f1-s0/train.json").resolve()
print("stale before:", study.stale(run, TASKS["pos"]))
exec(sys.argv[1])
study.corpus_step()
print("stale after:", Study(SCALES["smoke"], None, "uner", tasks=["pos"]).stale(run, TASKS["pos"]))
"""


@pytest.mark.parametrize(
    "edit, converted",
    [
        ("open('project/configs/tagger_base.cfg', 'a').write('\\n# edited\\n')", []),
        ("p = Path(DEV); p.write_text(p.read_text().split('\\n\\n', 1)[1])", ["dev.spacy"]),
    ],
    ids=["config", "data"],
)
def test_a_run_of_other_inputs_is_stale_and_a_changed_data_file_is_converted_again(
    smoke_project, tmp_path, edit, converted
):
    """A run records the sha256 of its config, training subset and dev split: another config, or
    a data file the corpus step converts again (it records what each split was made from), makes
    it stale, to be trained again; splits made from unchanged files are kept."""
    copy_project(tmp_path)
    parts = ["project/corpus/smoke", "project/training/smoke/runs/pos-base-f1-s0"]
    for part in parts:
        shutil.copytree(smoke_project / part, tmp_path / part)
    shutil.copytree(smoke_project / "project/assets", tmp_path / "project/assets", symlinks=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-c", STALE_AFTER, edit],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert (out[0], out[-1]) == ("stale before: False", "stale after: True"), out
    assert [line.split(": ")[0].rsplit("/", 1)[1] for line in out[1:-1]] == converted, out


def test_finished_steps_are_skipped(smoke_project):
    """A step whose deps and outputs are unchanged does not run again: summarize.py, which always
    writes summary.md and the plots, leaves them untouched."""
    metrics = smoke_project / SMOKE_METRICS
    outputs = [metrics / "summary.md", *sorted(metrics.glob("*.png"))]
    written = [path.stat().st_mtime_ns for path in outputs]
    spacy_project(
        "run",
        "summary",
        ".",
        "--vars.scale=smoke",
        f"--vars.metrics_dir={SMOKE_METRICS}",
        cwd=smoke_project,
    )
    assert [path.stat().st_mtime_ns for path in outputs] == written


def test_summary_rerenders_identically_from_the_metrics(smoke_project, tmp_path):
    metrics = smoke_project / SMOKE_METRICS
    summarize(metrics, tmp_path)
    assert (tmp_path / "summary.md").read_text() == (metrics / "summary.md").read_text()


def test_committed_summary_matches_the_committed_metrics(tmp_path):
    """The README quotes project/metrics/summary.md: it must be what the committed metrics give."""
    metrics = REPO / "project" / "metrics"
    assert (metrics / "summary.md").exists(), (
        "run `spacy project run all` and commit project/metrics"
    )
    summarize(metrics, tmp_path)
    assert (tmp_path / "summary.md").read_text() == (metrics / "summary.md").read_text()


def test_elmo_runs_of_an_earlier_bilm_are_left_out_of_the_summary(smoke_project, tmp_path):
    """Each ELMo run and the probe record the fingerprint of their biLM; after the biLM changes, the
    summary leaves them out (and says so) instead of mixing two biLMs in one table."""
    metrics = tmp_path / "metrics"
    shutil.copytree(smoke_project / SMOKE_METRICS, metrics)
    bilm = json.loads((metrics / "bilm.json").read_text())
    elmo_runs = [json.loads(p.read_text()) for p in (metrics / "runs").glob("*-elmo-*.json")]
    assert elmo_runs and all(r["bilm_fingerprint"] == bilm["fingerprint"] for r in elmo_runs)
    assert (
        json.loads((metrics / "probe.json").read_text())["bilm_fingerprint"] == bilm["fingerprint"]
    )
    (metrics / "bilm.json").write_text(json.dumps({**bilm, "fingerprint": "0" * 64}))
    summarize(metrics, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    note = next(
        line for line in summary.splitlines() if line.startswith("Made with an earlier biLM")
    )
    # one entry per task, data set and system, with its fractions and its number of runs
    assert "pos-elmo (" in note and "ner-uner-elmo (" in note and "the layer probe" in note
    assert "pos-elmo-tuned (" in note
    assert "-s0" not in note and "-s1" not in note
    assert re.search(r"pos-elmo \(\d+ runs at [\d%, ]+\)", note)
    assert "Linear POS probe" not in summary
    assert "| ELMo |" not in summary.split("## The claims")[0]


def test_the_gain_claim_needs_a_gain():
    """ "The gain grows as the data shrinks" holds for gains that shrink as data grows, not for
    losses that do."""
    assert gain_grows([5.9, 1.3, 0.5]) is True
    assert gain_grows([-0.4, -0.9, -1.5]) is False  # ordered, but a loss everywhere
    assert gain_grows([1.0, 2.0]) is False and gain_grows([3.0]) is None


def test_the_ner_data_sets_keep_their_own_runs(tmp_path):
    """Runs on UNER and on CoNLL-2003 have their own names, run folders and corpus folders (neither
    replaces the other); a record whose data is not its task's is stale, so the steps redo it."""
    study, conll = Study(SCALES["smoke"], None, "uner"), Study(SCALES["smoke"], None, "conll2003")
    ner, conll_ner = study.tasks[1], conll.tasks[1]
    assert study.run_id(ner, "elmo", 1.0, 0) == "ner-uner-elmo-f1-s0"
    assert conll.run_id(conll_ner, "elmo", 1.0, 0) == "ner-conll2003-elmo-f1-s0"
    assert study.run_id(study.tasks[0], "elmo", 0.1, 2) == "pos-elmo-f0.1-s2"
    assert study.run_dir(ner, "base", 1.0, 0) != conll.run_dir(conll_ner, "base", 1.0, 0)
    record = tmp_path / "train.json"
    record.write_text(
        json.dumps({"task": "ner", "system": "base", "data": TASKS["conll2003"].data})
    )
    assert study.stale(record, ner)
    record.write_text(json.dumps({"task": "ner", "system": "base", "data": TASKS["uner"].data}))
    assert not study.stale(record, ner)
    assert study.split_path(ner, "train") != conll.split_path(conll_ner, "train")


def test_a_data_set_the_assets_step_has_not_fetched_stops_the_corpus_step_naming_it(tmp_path):
    """`corpus --vars.ner_data conll2003` before `assets` with it ended in a FileNotFoundError;
    now one line names the missing files and the step that fetches them."""
    study = Study(SCALES["smoke"], None, "conll2003", tasks=["ner"])
    study.assets, study.corpus = tmp_path / "assets", tmp_path / "corpus"
    with pytest.raises(SystemExit) as stop:
        study.corpus_step()
    message = str(stop.value)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "conll2003/eng.train" in message and "`python -m spacy project run assets`" in message
    assert not study.corpus.exists()


def test_a_summary_gives_each_ner_data_set_its_rows(tmp_path):
    """NER runs on UNER beside the committed CoNLL-2003 ones: the CoNLL rows stay as they were,
    labelled with their data, and the UNER runs get rows and claims of their own (no cell mixes the
    two)."""
    metrics = tmp_path / "metrics"
    shutil.copytree(REPO / "project" / "metrics", metrics)
    for path in [
        p
        for p in (metrics / "runs").glob("ner-conll2003-*.json")
        if p.stem.split("-")[2] in ("base", "elmo")
    ]:
        run = json.loads(path.read_text())
        run.update(
            data="UNER (test)", test={**run["test"], "ents_f": run["test"]["ents_f"] - 0.005}
        )
        path.with_name(path.name.replace("conll2003", "uner")).write_text(json.dumps(run))
    summarize(metrics, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    committed = (REPO / "project" / "metrics" / "summary.md").read_text()
    conll_rows = [line for line in committed.splitlines() if "| CoNLL-2003 English |" in line]
    assert conll_rows and all(line in summary for line in conll_rows)
    uner_rows = [line for line in summary.splitlines() if "| UNER (test) |" in line]
    f1_at = {
        line.split(" | ")[2]: line for line in uner_rows if line.startswith("| ner (entity F1)")
    }
    assert sorted(f1_at) == ["1%", "10%", "100%"]
    conll = [
        100 * json.loads(path.read_text())["test"]["ents_f"]
        for path in (REPO / "project" / "metrics" / "runs").glob("ner-conll2003-elmo-f1-s*.json")
    ]
    # 0.5 points below CoNLL's
    own = f"| {statistics.fmean(conll) - 0.5:.2f} ± {statistics.stdev(conll):.2f} |"
    assert own in f1_at["100%"]
    assert sum("| ELMo beats the baseline at" in line for line in uner_rows) == 3
