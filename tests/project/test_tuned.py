"""The study's system `elmo-tuned`: ELMo at the input, with the biLM the `tune` step tuned on the
run's own training set. Where it finds that biLM, a clear stop where it is missing, its runs redone
after a new tuning, its rows in the summary and its line in the plot. The layer probe of the biLM
tuned on the POS training split: made beside the untuned one, redone after a new tuning, and its
rows in the summary."""

import json
import warnings
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from matplotlib.figure import Figure

from project.scripts import layer_probe, summarize
from project.scripts.run_study import Study
from project.scripts.study import SCALES, TUNABLE_FILES, shown
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


def test_a_data_set_the_corpus_step_has_not_converted_stops_the_tune_step_naming_it(tmp_path):
    """`tune --vars.ner_data conll2003` before `corpus` with it ended in a FileNotFoundError from
    inside spaCy; now one line names the missing file and the step that writes it."""
    study = smoke_study(tmp_path)
    study.corpus = tmp_path / "corpus"
    with pytest.raises(SystemExit) as stop:
        Tuner(study, study.bilm).run()
    message = str(stop.value)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "ud/train.spacy" in message and "`python -m spacy project run corpus`" in message


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


def write_train_record(study, system, fraction, dev, fingerprint="current"):
    """A finished tagger run of seed 0, as the training step leaves it (`train.json`)."""
    out = study.run_dir(study.tasks[0], system, fraction, 0)
    out.mkdir(parents=True, exist_ok=True)
    record = {"task": "pos", "data": POS_DATA, "system": system, "fraction": fraction, "seed": 0}
    (out / "train.json").write_text(
        json.dumps({**record, "dev": dev, "bilm_fingerprint": fingerprint})
    )


class Trained(Exception):
    """Raised by the fake `spacy train` below: the arguments of the run it stopped."""


def test_the_placement_step_trains_the_tuned_bilm_where_dev_placed_elmo(
    tmp_path, monkeypatch, capsys
):
    """Once ELMo's runs at the input and at every other placement are done, the step trains the
    tuned biLM, with that placement's config, at the placement with the best mean dev score where it
    is not the input, and nothing where it is; a fraction whose runs are missing or of an earlier
    biLM waits, and the step says so."""
    study = smoke_study(tmp_path, systems=[])
    study.systems = None
    pos = study.tasks[0]
    dev = {
        0.1: {"elmo": 0.80, "elmo-output": 0.79, "elmo-both": 0.82, "elmo-layers01": 0.81},
        1.0: {"elmo": 0.90, "elmo-output": 0.85, "elmo-both": 0.89, "elmo-layers01": 0.88},
    }
    for fraction, scores in dev.items():
        for system, score in scores.items():
            write_train_record(study, system, fraction, score)
    write_tuning(study, 0.1, 0, "tuned-0.1")
    assert study.tuned_placed() == ([(pos, "elmo-tuned-both", 0.1, 0)], [])

    def fake_train(config, output, overrides):
        raise Trained(config, output, overrides)

    monkeypatch.setattr("project.scripts.run_study.spacy_train", fake_train)
    study.corpus = tmp_path / "corpus"
    for split, fraction in (("train", 0.1), ("dev", 1.0)):
        study.split_path(pos, split, fraction).parent.mkdir(parents=True, exist_ok=True)
        study.split_path(pos, split, fraction).touch()
    with pytest.raises(Trained) as trained:
        study.train_step("placement")
    config, output, overrides = trained.value.args
    assert str(config).endswith("configs/tagger_elmo_both.cfg")
    assert str(output).endswith("runs/pos-elmo-tuned-both-f0.1-s0")
    assert overrides["paths.elmo"] == str(study.tuned_bilm(pos, 0.1, 0))
    # dev prefers the input: the tuned biLM's run there is the `sample` step's
    write_train_record(study, "elmo", 0.1, 0.83)
    assert study.tuned_placed() == ([], [])
    write_train_record(study, "elmo-both", 0.1, 0.84, fingerprint="earlier")
    (study.run_dir(pos, "elmo-output", 1.0, 0) / "train.json").unlink()
    assert study.tuned_placed() == ([], ["pos at 10%", "pos at 100%"])
    monkeypatch.setattr(study, "train_runs", lambda which, runs: [])
    study.train_step("placement")
    assert "not chosen yet for pos at 10%, pos at 100%" in capsys.readouterr().out


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
    if system.startswith("elmo-tuned"):
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
    left_out = "Made with an earlier biLM and left out until rerun: pos-elmo-tuned (1 run at 100%)."
    assert left_out in summary
    for path in (metrics / "runs").glob("pos-elmo-tuned-*"):
        path.unlink()
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert "tuned biLM" not in summary and "Raw text" not in summary


def test_the_tuned_row_is_at_the_placement_dev_chose_and_is_compared_with_elmo_there(tmp_path):
    """Where dev places ELMo elsewhere than the input (here input + output at 10%), the row "ELMo,
    tuned biLM" and its claims are of the tuned biLM there, named in the cell, and it is compared
    with ELMo at the same placement; elsewhere it stays at the input. "Where ELMo goes" gives the
    tuned biLM a row of its own: at the input and at the chosen placement."""
    metrics = tuned_metrics(tmp_path / "metrics")
    for system, score in (("elmo-both", 0.85), ("elmo-tuned-both", 0.87)):
        for seed in (0, 1):
            (metrics / "runs" / f"pos-{system}-f0.1-s{seed}.json").write_text(
                json.dumps(run_record(system, 0.1, seed, score + seed / 100))
            )
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert (
        f"| pos (UPOS accuracy) | {POS_DATA} | 10% | 80.50 ± 0.71 | – | – | 83.50 ± 0.71 | "
        "87.50 ± 0.71 (input + output) | +3.00 |\n"
        f"| pos (UPOS accuracy) | {POS_DATA} | 100% | 90.50 ± 0.71 | 91.00 ± 0.71 | 90.00 ± 0.71 "
        "| 91.50 ± 0.71 | 92.50 ± 0.71 | +1.00 |\n"
    ) in summary
    assert (
        f"| pos (UPOS accuracy), tuned biLM | {POS_DATA} | 10% | – | 84.50 ± 0.71 | – | "
        "87.50 ± 0.71 | – | input + output: 87.50 ± 0.71 |\n" in summary
    )
    on = f"| pos | {POS_DATA} |"
    for claim in (
        f"| ELMo, tuned biLM beats the baseline at 10% {on} holds (+7.00) |",
        f"| ELMo, tuned biLM beats ELMo at 10%, both input + output (chosen on dev) {on} holds "
        "(+2.00) |",
        f"| ELMo, tuned biLM beats ELMo at 100% {on} holds (+1.00) |",
        f"| the gain of ELMo, tuned biLM grows as the data shrinks {on} holds "
        "(1%: +8.00, 10%: +7.00, 100%: +2.00) |",
        f"| ELMo, tuned biLM on 10% matches the baseline on 100% {on} does not hold "
        "(87.50 ± 0.71 vs 90.50 ± 0.71) |",
    ):
        assert claim in summary, claim
    assert (
        "ELMo, tuned biLM: the biLM tuned on the run's training set, ELMo at the input or, where "
        "named, at the placement chosen on dev ([Where ELMo goes](#where-elmo-goes))." in summary
    )


def test_a_task_without_elmo_runs_has_its_claims_marked_not_run_and_nothing_more(tmp_path):
    """The claims of a task whose ELMo runs are all missing (left out, or not trained yet) say "not
    run", with no empty list of gains after it."""
    metrics = tuned_metrics(tmp_path / "metrics")
    for path in (metrics / "runs").glob("pos-elmo*"):
        path.unlink()
    summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    summary = (tmp_path / "summary.md").read_text()
    assert f"| the gain grows as the data shrinks | pos | {POS_DATA} | not run |" in summary
    assert "()" not in summary


def test_the_plot_draws_the_tuned_bilm_and_no_empty_legend(tmp_path, monkeypatch):
    """The panel of a task with tuned runs draws a line for them beside ELMo's; a panel without a
    line of its own (NER here has floret runs only) gets no legend, and matplotlib no warning."""
    metrics = tuned_metrics(tmp_path / "metrics")
    ner = {**run_record("floret", 1.0, 0, 0.8), "task": "ner", "data": "Universal NER"}
    ner["test"] = {"ents_f": 0.8}
    (metrics / "runs" / "ner-uner-floret-f1-s0.json").write_text(json.dumps(ner))
    panels = {}
    savefig = Figure.savefig

    def spy(fig, path, *args, **kwargs):
        panels[Path(path).name] = [
            (ax.get_title(), ax.get_legend_handles_labels()[1], ax.get_legend() is not None)
            for ax in fig.axes
        ]
        return savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []
    assert panels["accuracy_by_fraction.png"] == [
        (f"pos: {POS_DATA}", ["baseline", "ELMo", "ELMo, tuned biLM"], True),
        ("ner: Universal NER", [], False),
    ]


def probe_record(layers, mix_weights, **extra):
    """A probe of probe.json: accuracy per layer, and the mix's."""
    return {
        "layers": {str(j): a for j, a in enumerate(layers)},
        "mix": {"accuracy": 0.9, "gamma": 2.0, "mix_weights": mix_weights},
        **extra,
    }


def test_the_summary_shows_the_probe_of_the_tuned_bilm_beside_the_untuned_one(tmp_path):
    """Rows of the tuned biLM under the untuned one's and a sentence on whether tuning moved the
    best layer; a probe of an earlier tuning left out (and said so); nothing of it where the biLM
    was not tuned."""
    metrics = tuned_metrics(tmp_path / "metrics")
    untuned = probe_record(
        [0.80, 0.86, 0.88],
        [0.1, 0.2, 0.7],
        bilm_fingerprint="current",
        task="pos",
        train_tokens=1000,
        test_tokens=500,
        state_policy="warm",
    )
    path = "project/training/full/tuned/pos/f1/model"

    def render(tuned):
        probe = untuned if tuned is None else {**untuned, "tuned": tuned}
        (metrics / "probe.json").write_text(json.dumps(probe))
        summarize.main(["--metrics", str(metrics), "--out", str(tmp_path)])
        return (tmp_path / "summary.md").read_text()

    table = (
        "| features | layer 0 | layer 1 | layer 2 | learned mix |\n"
        "| --- | --- | --- | --- | --- |\n"
        "| UPOS accuracy (%) | 80.00 | 86.00 | 88.00 | 90.00 |\n"
        "| mix weights | 0.100 | 0.200 | 0.700 | |\n"
    )
    summary = render(probe_record([0.80, 0.89, 0.87], [0.1, 0.5, 0.4], path=path, fingerprint="f1"))
    assert (
        table + "| UPOS accuracy (%), tuned biLM | 80.00 | 89.00 | 87.00 | 90.00 |\n"
        "| mix weights, tuned biLM | 0.100 | 0.500 | 0.400 | |\n\n"
        f"Best single layer of the biLM tuned on the POS training split (`{path}`): 1, against 2 "
        "untuned; tuning moved it from layer 2 to layer 1.\n"
    ) in summary
    summary = render(probe_record([0.80, 0.86, 0.90], [0.1, 0.2, 0.7], path=path, fingerprint="f1"))
    assert (
        f"(`{path}`): 2, against 2 untuned; tuning did not move it.\n" in summary
        and "| UPOS accuracy (%), tuned biLM | 80.00 | 86.00 | 90.00 | 90.00 |" in summary
    )
    # made with another tuning than tuned.json's: left out, the untuned probe kept
    summary = render(
        probe_record([0.80, 0.89, 0.87], [0.1, 0.5, 0.4], path=path, fingerprint="earlier")
    )
    assert (
        "left out until rerun: pos-elmo-tuned (1 run at 100%), the layer probe of the tuned biLM."
        in summary
    )
    assert summary.endswith(table) and "Best single layer of the biLM tuned" not in summary
    # not tuned, or a probe.json of before the tuned probe: the same summary
    skipped = render({"skipped": "the `tune` step has not tuned this biLM"})
    assert skipped == render(None) and skipped.endswith(table)
    assert "the layer probe" not in skipped


def fake_probe_inputs(monkeypatch):
    """The probe's data, features and biLMs made up, so that it runs in a moment: 3 layers of random
    features (fixed by whether the biLM is a tuned one and by the sentences, not by the temporary
    directory, whose name would make the two biLMs' accuracies equal by chance in some runs), two
    tags. -> the paths of the biLMs loaded."""
    loaded = []

    def load_bilm(path):
        loaded.append(str(path))
        return SimpleNamespace(path=str(path), state_policy="warm")

    def read_tagged(path, limit):
        n = 12 if "train" in str(path) else 6
        return [["a", "b", "c"]] * n, [["NOUN", "VERB", "NOUN"]] * n

    def features(bilm, sentences):
        seed = zlib.crc32(f"{'/tuned/' in bilm.path} {len(sentences)}".encode())
        n_tokens = sum(len(s) for s in sentences)
        return torch.randn(3, n_tokens, 4, generator=torch.Generator().manual_seed(seed))

    monkeypatch.setattr("spacy_elmo.load_bilm", load_bilm)
    monkeypatch.setattr(layer_probe, "read_tagged", read_tagged)
    monkeypatch.setattr(layer_probe, "features", features)
    return loaded


def test_the_probe_is_redone_when_a_tuned_bilm_appears_or_is_tuned_again(tmp_path, monkeypatch):
    """Without a tuned biLM, probe.json says why; once the `tune` step made one from this biLM,
    the probe is redone with it beside the untuned biLM (whose probe stays the same); a new tuning
    redoes it again, and a finished probe is not redone."""
    loaded = fake_probe_inputs(monkeypatch)
    study = smoke_study(tmp_path)
    study.metrics, study.corpus = tmp_path / "metrics", tmp_path / "corpus"
    for split in ("train", "test"):  # read_tagged is made up: the files need only exist
        study.split_path(study.tasks[0], split).parent.mkdir(parents=True, exist_ok=True)
        study.split_path(study.tasks[0], split).touch()
    target = study.metrics / "probe.json"

    def probe():
        loaded.clear()
        layer_probe.probe_step(study)
        return json.loads(target.read_text())

    first = probe()
    assert loaded == [study.bilm] and first["bilm_fingerprint"] == "current"
    assert "`tune` step" in first["tuned"]["skipped"] and set(first["layers"]) == {"0", "1", "2"}
    assert (first["train_tokens"], first["test_tokens"]) == (36, 18)
    assert probe() == first and loaded == []  # done already
    write_tuning(study, 1.0, 0, "tuned-1")
    tuned_path = study.tuned_bilm(study.tasks[0], 1.0, 0)
    second = probe()
    assert loaded == [study.bilm, str(tuned_path)]
    assert {k: v for k, v in second.items() if k != "tuned"} == {
        k: v for k, v in first.items() if k != "tuned"
    }
    tuned = second["tuned"]
    assert (tuned["path"], tuned["fingerprint"]) == (shown(tuned_path), "tuned-1")
    assert set(tuned["layers"]) == {"0", "1", "2"} and tuned["layers"] != second["layers"]
    assert abs(sum(tuned["mix"]["mix_weights"]) - 1) < 1e-5 and tuned["mix"]["gamma"] > 0
    assert probe() == second and loaded == []
    write_tuning(study, 1.0, 0, "tuned-2")
    assert probe()["tuned"]["fingerprint"] == "tuned-2" and len(loaded) == 2
    # weights that cannot be tuned: probe.json says why
    untunable = smoke_study(tmp_path / "published", bilm="small")
    untunable.metrics, untunable.corpus = tmp_path / "published" / "metrics", study.corpus
    layer_probe.probe_step(untunable)
    skipped = json.loads((untunable.metrics / "probe.json").read_text())["tuned"]["skipped"]
    assert "small is not a model saved by `pretrain`" in skipped
