"""The study's metrics files read into what the summary and its plots show: runs grouped by task and
data set, scores per (group, system, fraction) as mean ± sd over seeds, the placement chosen on dev,
and the learned layer mixes."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

from .study import ELMO_SYSTEMS, TASKS, TUNED_AT, TUNED_SYSTEMS, chosen_placement

SYSTEM_NAMES = {
    "base": "baseline",
    "spacy-pretrain": "spacy pretrain",
    "floret": "floret vectors",
    "elmo": "ELMo",
    "elmo-tuned": "ELMo, tuned biLM",
    "elmo-output": "ELMo at output",
    "elmo-both": "ELMo at input + output",
    "elmo-layers01": "ELMo layers [0, 1]",
    "elmo-tuned-output": "ELMo, tuned biLM, at output",
    "elmo-tuned-both": "ELMo, tuned biLM, at input + output",
    "elmo-tuned-layers01": "ELMo, tuned biLM, layers [0, 1]",
}
# the scores table; the others are placements
MAIN_SYSTEMS = [
    "base",
    "spacy-pretrain",
    "floret",
    "elmo",
    "elmo-tuned",
]
# the columns of "Where ELMo goes"
PLACEMENTS = {
    "base": "baseline",
    "elmo": "input",
    "elmo-output": "output",
    "elmo-both": "input + output",
    "elmo-layers01": "input, layers [0, 1]",
}
# where the `elmo` configs mix, for records of layer_weights only
INPUT_MIX = "components.tok2vec.model.embed.elmo"
METRIC_NAMES = {"pos": ("tag_acc", "UPOS accuracy"), "ner": ("ents_f", "entity F1")}


class Group(NamedTuple):
    """The runs of one task on one data set: a row group of every table."""

    task: str  # "pos" or "ner"
    data: str  # the data set, as the run records name it

    def label(self) -> str:
        return f"{self.task} ({METRIC_NAMES[self.task][1]})"


def group_of(run: Dict) -> Group:
    return Group(run["task"], run["data"])


def fraction_label(fraction: float) -> str:
    """A training fraction as the tables and claims name it: 1%, 10%, 100%."""
    return f"{100 * fraction:g}%"


def runs_by_kind(named: List[Tuple[str, Dict]]) -> List[str]:
    """Run records named by file stem (`pos-elmo-f0.1-s2`), listed once per task, data set and
    system: `pos-elmo (6 runs at 10%, 100%)`."""
    kinds: Dict[str, List[Dict]] = defaultdict(list)
    for name, record in named:
        kinds[re.sub(r"-f[^-]+-s\d+$", "", name)].append(record)
    return [
        f"{kind} ({len(records)} run{'s' if len(records) > 1 else ''} at "
        + ", ".join(fraction_label(f) for f in sorted({r["fraction"] for r in records}))
        + ")"
        for kind, records in sorted(kinds.items())
    ]


class Cell:
    """Scores (in %) of one task/system/fraction over its seeds."""

    def __init__(self, values: List[float]):
        self.values = values
        self.mean = statistics.fmean(values)
        self.sd = statistics.stdev(values) if len(values) > 1 else 0.0

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.sd:.2f}" if len(self.values) > 1 else f"{self.mean:.2f}"


class Metrics(NamedTuple):
    """Everything the summary and the plots read, loaded once: the run records, the other files,
    the scores per (group, system, fraction), and the groups present (pos first, then NER by data
    set)."""

    runs: List[Dict]
    bilm: Dict
    baselines: Dict
    probe: Dict  # under "tuned", the probe of the biLM tuned on the POS training split, if any
    tuned: List[Dict]  # the records of tuned.json: one per task, data set and training set
    table: Dict[Tuple[Group, str, float], Cell]
    # the same on the dev set (the score each run's training kept)
    dev: Dict[Tuple[Group, str, float], Cell]
    groups: List[Group]
    left_out: List[str]  # ELMo runs by kind (and the probes) made with an earlier biLM or tuning


def read_record(path: Path, redo: str) -> Dict:
    """The JSON record in `path`; SystemExit naming it where it is not whole JSON (a write cut
    short), and `redo`: what writes it again."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise SystemExit(
            f"error: {path} is not whole JSON ({err}): a write cut short? {redo}"
        ) from None


def load(metrics: Path) -> Metrics:
    evaluate = "run the evaluate step again, which evaluates the run again and writes it whole"
    named = [(p.stem, read_record(p, evaluate)) for p in sorted((metrics / "runs").glob("*.json"))]
    if not named:
        raise SystemExit(
            f"error: no run metrics in {metrics / 'runs'}; run the train and evaluate steps first"
        )

    def optional(name: str) -> Dict:
        path = metrics / name
        return read_record(path, "run the step that writes it again") if path.exists() else {}

    bilm, probe = optional("bilm.json"), optional("probe.json")
    tuned = optional("tuned.json").get("records", [])
    current = bilm.get("fingerprint")
    tunings = {tuning_key(r): r.get("fingerprint") for r in tuned}

    def other_bilm(record: Dict) -> bool:
        if current is not None and record.get("bilm_fingerprint") != current:
            return True
        return (
            record.get("system") in TUNED_SYSTEMS
            and bool(tunings)
            and record.get("tuned_bilm_fingerprint") != tunings.get(tuning_key(record))
        )

    earlier, runs = [], []
    for name, r in named:
        if r["system"] in ELMO_SYSTEMS and other_bilm(r):
            earlier.append((name, r))
        else:
            runs.append(r)
    left_out = runs_by_kind(earlier)
    if probe and other_bilm(probe):
        left_out.append("the layer probe")
        probe = {}
    tuned_probe = probe.get("tuned", {})
    if (
        "fingerprint" in tuned_probe
        and tunings
        and tuned_probe["fingerprint"] != tunings.get((TASKS["pos"].data, 1.0, None))
    ):
        left_out.append("the layer probe of the tuned biLM")
        probe = {k: v for k, v in probe.items() if k != "tuned"}
    groups = sorted(
        {group_of(r) for r in runs}, key=lambda g: (("pos", "ner").index(g.task), g.data)
    )
    return Metrics(
        runs,
        bilm,
        optional("baselines.json"),
        probe,
        tuned,
        cells(runs),
        cells(runs, dev=True),
        groups,
        left_out,
    )


def tuning_key(record: Dict) -> Tuple[str, float, Optional[int]]:
    """(data set, fraction, subset seed) of the training set that a record of tuned.json, or of a
    run of the tuned biLM, is of; the whole split has no seed."""
    fraction = record["fraction"]
    return record["data"], fraction, None if fraction >= 1.0 else record["seed"]


def whole_split_tuning(m: Metrics, g: Group) -> Optional[Dict]:
    """The record of tuned.json of the biLM tuned on a group's whole training split; None where the
    biLM was not tuned on it."""
    return next(
        (
            r
            for r in m.tuned
            if "tune_seconds" in r
            and (r["task"], r["data"], r["fraction"]) == (g.task, g.data, 1.0)
        ),
        None,
    )


def cells(runs: List[Dict], dev: bool = False) -> Dict[Tuple[Group, str, float], Cell]:
    """Test scores (or, with `dev`, the dev score of the model each run kept) per (group, system,
    fraction)."""
    scores = defaultdict(list)
    for run in runs:
        score = run["dev"] if dev else run["test"][METRIC_NAMES[run["task"]][0]]
        scores[group_of(run), run["system"], run["fraction"]].append(100 * score)
    return {key: Cell(values) for key, values in scores.items()}


def chosen_on_dev(m: Metrics, g: Group, fraction: float) -> Optional[str]:
    """The ELMo placement with the best mean dev score for this group and fraction; None without
    placement runs."""
    placed = {
        s: m.dev[g, s, fraction].mean
        for s in PLACEMENTS
        if s != "base" and (g, s, fraction) in m.dev
    }
    if not any(s not in MAIN_SYSTEMS for s in placed):
        return None
    return chosen_placement(placed)


def tuned_placement(m: Metrics, g: Group, fraction: float) -> str:
    """Where the row "ELMo, tuned biLM" has ELMo for this group and fraction: the placement chosen
    on dev, else (no placement runs) the input."""
    return chosen_on_dev(m, g, fraction) or "elmo"


def tuned_cell(m: Metrics, g: Group, fraction: float) -> Optional[Cell]:
    """The scores of ELMo with the tuned biLM at `tuned_placement`; None where not run."""
    return m.table.get((g, TUNED_AT[tuned_placement(m, g, fraction)], fraction))


def run_mixes(run: Dict) -> List[Dict]:
    """A run's learned mixes; a record of `layer_weights` alone (before gamma was kept) is one input
    mix."""
    if "layer_weights" in run:
        weights = run["layer_weights"]
        return [{"path": INPUT_MIX, "layers": list(range(len(weights))), "weights": weights}]
    return run.get("mixes", [])


class Mix(NamedTuple):
    """A learned mix, averaged over seeds: softmax(s) over all the biLM's layers, the layers it
    reads, gamma."""

    weights: List[float]
    layers: List[int]
    gamma: Optional[float]


def learned_mixes(runs: List[Dict]) -> Dict[Tuple[Group, str, str], Mix]:
    """The mean learned mix per (group, system, config path), over the runs on 100% of the data."""
    group = defaultdict(list)
    for run in runs:
        if run["fraction"] == 1.0:
            for mix in run_mixes(run):
                group[group_of(run), run["system"], mix["path"]].append(mix)
    return {
        key: Mix(
            [statistics.fmean(ws) for ws in zip(*(m["weights"] for m in mixes))],
            mixes[0]["layers"],
            statistics.fmean(m["gamma"] for m in mixes)
            if all("gamma" in m for m in mixes)
            else None,
        )
        for key, mixes in group.items()
    }
