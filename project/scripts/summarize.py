"""Render the study's summary from its metrics files: summary.md and two PNG plots.

    python project/scripts/summarize.py --scale full      # project/metrics/*.json ->
    project/metrics/summary.md, *.png

Reads runs/*.json (one per trained pipeline: test scores, words/s, size, training time, learned
layer mixes), bilm.json (the biLM and its sha256), baselines.json (cost of the baselines'
pretraining) and probe.json (the layer probe). Runs of any ELMo system and a probe made with another
biLM than the one bilm.json names (their `bilm_fingerprint` differs) are left out, and the summary
says so. Each task on each data set (NER on CoNLL-2003 and on Universal NER, say) has rows and
claims of its own. The runs that put ELMo elsewhere than the encoder's input (the `placement` step)
get a table of their own. Each cell is the mean ± sample sd over seeds (and, below 100% of the data,
over random training subsets). A claim "holds" when the mean difference
exceeds the larger of the two sds, is "within the spread" when its size does not, and "does not
hold" otherwise. The output depends only on the metrics files, so re-rendering is reproducible.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

from study import ELMO_SYSTEMS, SCALES, metrics_dir

SYSTEM_NAMES = {
    "base": "baseline",
    "spacy-pretrain": "spacy pretrain",
    "floret": "floret vectors",
    "elmo": "ELMo",
    "elmo-output": "ELMo at output",
    "elmo-both": "ELMo at input + output",
    "elmo-layers01": "ELMo layers [0, 1]",
}
MAIN_SYSTEMS = [
    "base",
    "spacy-pretrain",
    "floret",
    "elmo",
]  # the scores table; the others are placements
PLACEMENTS = {
    "base": "baseline",
    "elmo": "input",
    "elmo-output": "output",
    "elmo-both": "input + output",
    "elmo-layers01": "input, layers [0, 1]",
}  # the columns of "Where ELMo goes"
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
    probe: Dict
    table: Dict[Tuple[Group, str, float], Cell]
    dev: Dict[
        Tuple[Group, str, float], Cell
    ]  # the same on the dev set (the score each run's training kept)
    groups: List[Group]
    left_out: List[str]  # ELMo runs (and the probe) made with an earlier biLM


def load(metrics: Path) -> Metrics:
    named = [
        (p.stem, json.loads(p.read_text(encoding="utf-8")))
        for p in sorted((metrics / "runs").glob("*.json"))
    ]
    if not named:
        raise SystemExit(
            f"error: no run metrics in {metrics / 'runs'}; run the train and evaluate steps first"
        )

    def optional(name: str) -> Dict:
        path = metrics / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    bilm, probe = optional("bilm.json"), optional("probe.json")
    current = bilm.get("fingerprint")

    def other_bilm(record: Dict) -> bool:
        return current is not None and record.get("bilm_fingerprint") != current

    left_out = [name for name, r in named if r["system"] in ELMO_SYSTEMS and other_bilm(r)]
    runs = [r for _, r in named if not (r["system"] in ELMO_SYSTEMS and other_bilm(r))]
    if probe and other_bilm(probe):
        left_out.append("the layer probe")
        probe = {}
    groups = sorted(
        {group_of(r) for r in runs}, key=lambda g: (("pos", "ner").index(g.task), g.data)
    )
    return Metrics(
        runs,
        bilm,
        optional("baselines.json"),
        probe,
        cells(runs),
        cells(runs, dev=True),
        groups,
        left_out,
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
    placed = [s for s in PLACEMENTS if s != "base" and (g, s, fraction) in m.dev]
    if not any(s not in MAIN_SYSTEMS for s in placed):
        return None
    return max(placed, key=lambda s: m.dev[g, s, fraction].mean)


def verdict(better: Optional[Cell], worse: Optional[Cell]) -> str:
    if better is None or worse is None:
        return "not run"
    diff = better.mean - worse.mean
    spread = max(better.sd, worse.sd)
    if diff > spread:
        return f"holds ({diff:+.2f})"
    if abs(diff) <= spread:
        return f"within the spread ({diff:+.2f}, sd {spread:.2f})"
    return f"does not hold ({diff:+.2f})"


def gain_grows(gains: List[float]) -> Optional[bool]:
    """Whether ELMo's gain over the baseline, by training fraction from the smallest, is a gain
    where data is scarcest and no smaller where data is scarcer; None with fewer than two
    fractions."""
    if len(gains) < 2:
        return None
    return gains[0] > 0 and all(a >= b for a, b in zip(gains, gains[1:]))


def fraction_label(fraction: float) -> str:
    return f"{100 * fraction:g}%"


def render(m: Metrics) -> str:
    runs, bilm, baselines, probe, table, groups, left_out = (
        m.runs,
        m.bilm,
        m.baselines,
        m.probe,
        m.table,
        m.groups,
        m.left_out,
    )
    fractions = sorted({r["fraction"] for r in runs})
    systems = [s for s in SYSTEM_NAMES if any(r["system"] == s for r in runs)]
    scored = [s for s in systems if s in MAIN_SYSTEMS]
    dates = sorted({r["date"] for r in runs})
    machines = sorted({r["machine"] for r in runs})
    bilm_sha = (
        ", ".join(f"{name} `{digest}`" for name, digest in bilm.get("sha256", {}).items())
        or "unknown"
    )
    n_seeds = max(len(c.values) for c in table.values())
    lines = [
        "# ELMo features for a spaCy tagger and NER: results",
        "",
        f"Runs of {dates[0]}"
        + (f" to {dates[-1]}" if len(dates) > 1 else "")
        + f" on {'; '.join(machines)}. "
        f"biLM: `{bilm.get('path', 'unknown')}` ({bilm_sha}).",
        f"Test-set scores in %, mean ± sd over up to {n_seeds} seed(s) (below 100% of the data "
        f"each seed also "
        "draws its own random training subset). Generated by `project/scripts/summarize.py` from "
        "`metrics/*.json`.",
        *(
            ["", f"Made with an earlier biLM and left out until rerun: {', '.join(left_out)}."]
            if left_out
            else []
        ),
        "",
        "## Scores",
        "",
        "| task | data | fraction | "
        + " | ".join(SYSTEM_NAMES[s] for s in scored)
        + " | ELMo − baseline |",
        "| --- | --- | --- | " + " | ".join("---" for _ in scored) + " | --- |",
    ]
    for g in groups:
        for fraction in fractions:
            row = [table.get((g, s, fraction)) for s in scored]
            if not any(row):
                continue
            base, elmo = table.get((g, "base", fraction)), table.get((g, "elmo", fraction))
            diff = f"{elmo.mean - base.mean:+.2f}" if base and elmo else "–"
            lines.append(
                f"| {g.label()} | {g.data} | {fraction_label(fraction)} | "
                + " | ".join(str(c) if c else "–" for c in row)
                + f" | {diff} |"
            )
    lines += placement_section(m, fractions)
    lines += [
        "",
        "## The claims",
        "",
        "| claim | task | data | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for g in groups:
        on = f"{g.task} | {g.data}"
        elmo_cells = {f: table.get((g, "elmo", f)) for f in fractions}
        for fraction in fractions:
            lines.append(
                f"| ELMo beats the baseline at {fraction_label(fraction)} | {on} | "
                f"{verdict(elmo_cells[fraction], table.get((g, 'base', fraction)))} |"
            )
        for other in ("spacy-pretrain", "floret"):
            lines.append(
                f"| ELMo beats {SYSTEM_NAMES[other]} at 100% | {on} | "
                f"{verdict(elmo_cells.get(1.0), table.get((g, other, 1.0)))} |"
            )
        gains = [
            (f, elmo_cells[f].mean - table[g, "base", f].mean)
            for f in fractions
            if elmo_cells[f] and (g, "base", f) in table
        ]
        grows = gain_grows([g for _, g in gains])
        gain_text = ", ".join(f"{fraction_label(f)}: {g:+.2f}" for f, g in gains)
        lines.append(
            f"| the gain grows as the data shrinks | {on} | "
            + ("not run" if grows is None else ("holds" if grows else "does not hold"))
            + f" ({gain_text}) |"
        )
        chosen = chosen_on_dev(m, g, 1.0)
        if chosen and chosen != "elmo":  # ELMo at the input has its claims above
            for other in ("base", "spacy-pretrain", "floret"):
                name = "the baseline" if other == "base" else SYSTEM_NAMES[other]
                lines.append(
                    f"| ELMo placed by dev ({PLACEMENTS[chosen]}) beats {name} at 100% | {on} | "
                    f"{verdict(table.get((g, chosen, 1.0)), table.get((g, other, 1.0)))} |"
                )
        lines.append(
            f"| ELMo on 1% matches the baseline on 10% | {on} | "
            f"{match(elmo_cells.get(0.01), table.get((g, 'base', 0.1)))} |"
        )
        if g.task == "pos":
            lines.append(
                f"| ELMo on 10% matches the baseline on 100% | {on} | "
                f"{match(elmo_cells.get(0.1), table.get((g, 'base', 1.0)))} |"
            )
    lines += [
        "",
        "## Cost (100% of the data)",
        "",
        "Speed and time are of the machine each run was made on "
        "(compare rows of one machine only).",
        "",
        "| task | data | system | words/s (test set, whole pipeline) | pipeline size (MB) | "
        "training time (min) "
        "| machine |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for g in groups:
        for system in systems:
            group = [
                r
                for r in runs
                if group_of(r) == g and r["system"] == system and r["fraction"] == 1.0
            ]
            if group:
                lines.append(
                    f"| {g.task} | {g.data} | {SYSTEM_NAMES[system]} | "
                    f"{statistics.fmean(r['words_per_s'] for r in group):,.0f} | "
                    f"{statistics.fmean(r['pipeline_mb'] for r in group):.1f} | "
                    f"{statistics.fmean(r['train_seconds'] for r in group) / 60:.1f} | "
                    f"{'; '.join(sorted({r['machine'] for r in group}))} |"
                )
    pretraining = []
    if bilm.get("training"):
        t = bilm["training"]
        pretraining.append(
            f"biLM {t['train_minutes']:.0f} min ({t['tokens']:,} tokens, dev perplexity "
            f"{t['dev']['mean']:.1f} `{t['dev']['policy']}`)"
        )
    for name, cost in sorted(baselines.items()):
        pretraining.append(f"{SYSTEM_NAMES[name]} {cost['seconds'] / 60:.1f} min")
    if pretraining:
        lines += ["", "Pretraining on the same raw text: " + "; ".join(pretraining) + "."]
    lines += layer_section(runs, probe)
    return "\n".join(lines) + "\n"


def match(better: Optional[Cell], reference: Optional[Cell]) -> str:
    """`better` reaches `reference` when its mean is at least reference's mean minus the larger
    sd."""
    if better is None or reference is None:
        return "not run"
    spread = max(better.sd, reference.sd)
    diff = better.mean - reference.mean
    return f"{'holds' if diff >= -spread else 'does not hold'} ({better} vs {reference})"


def placement_section(m: Metrics, fractions: List[float]) -> List[str]:
    """The table "Where ELMo goes": each placement beside ELMo at the input and the baseline; none
    without a placement run."""
    placed = [s for s in PLACEMENTS if s not in MAIN_SYSTEMS]
    if not any(r["system"] in placed for r in m.runs):
        return []
    lines = [
        "",
        "## Where ELMo goes",
        "",
        "The task encoder's input `[x_k; ELMo_k]`, its output `[h_k; ELMo_k]`, both (two mixes), "
        "or the input "
        "mixing layers 0 and 1 only (Peters et al. 2018, sec. 3.3; Reimers and Gurevych 2019). "
        '"chosen on '
        'dev": the placement with the best mean dev score, and its test score; the claims below '
        "compare it with "
        "the baselines.",
        "",
        "| task | data | fraction | " + " | ".join(PLACEMENTS.values()) + " | chosen on dev |",
        "| --- | --- | --- | " + " | ".join("---" for _ in PLACEMENTS) + " | --- |",
    ]
    for g in m.groups:
        for fraction in fractions:
            row = [m.table.get((g, s, fraction)) for s in PLACEMENTS]
            chosen = chosen_on_dev(m, g, fraction)
            if chosen:
                lines.append(
                    f"| {g.label()} | {g.data} | {fraction_label(fraction)} | "
                    + " | ".join(str(c) if c else "–" for c in row)
                    + f" | {PLACEMENTS[chosen]}: {m.table[g, chosen, fraction]} |"
                )
    return lines


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


def layer_section(runs: List[Dict], probe: Dict) -> List[str]:
    lines = ["", "## Layers", ""]
    mixes = learned_mixes(runs)
    if mixes:
        n = max(len(mix.weights) for mix in mixes.values())
        gamma = any(mix.gamma is not None for mix in mixes.values())
        lines += [
            "Learned mix softmax(s) of the ELMo pipelines, one row per ElmoFeatures block (100% of "
            "the data, "
            "mean over seeds; –: a layer the block does not mix):",
            "",
            "| task | data | system | mix | "
            + " | ".join(f"layer {j}" for j in range(n))
            + (" | gamma |" if gamma else " |"),
            "| --- | --- | --- | --- | "
            + " | ".join("---" for _ in range(n))
            + (" | --- |" if gamma else " |"),
        ]
        # tasks and systems in the order of the other tables; a run's mixes in its pipeline's order
        for (g, system, path), mix in sorted(
            mixes.items(),
            key=lambda item: (
                ("pos", "ner").index(item[0][0].task),
                item[0][0].data,
                list(SYSTEM_NAMES).index(item[0][1]),
            ),
        ):
            cells = [f"{mix.weights[j]:.3f}" if j in mix.layers else "–" for j in range(n)]
            if gamma:
                cells.append("–" if mix.gamma is None else f"{mix.gamma:.3f}")
            lines.append(
                f"| {g.task} | {g.data} | {SYSTEM_NAMES[system]} | "
                f"`{path.removeprefix('components.')}` | " + " | ".join(cells) + " |"
            )
    if probe:
        layers = sorted(probe["layers"], key=int)
        best = max(layers, key=lambda j: probe["layers"][j])
        lines += [
            "",
            f"Linear POS probe on one frozen layer ({probe['train_tokens']:,} training tokens, "
            f"{probe['test_tokens']:,} test tokens, state `{probe['state_policy']}`); "
            f"best single layer: {best}.",
            "",
            "| features | " + " | ".join(f"layer {j}" for j in layers) + " | learned mix |",
            "| --- | " + " | ".join("---" for _ in layers) + " | --- |",
            "| UPOS accuracy (%) | "
            + " | ".join(f"{100 * probe['layers'][j]:.2f}" for j in layers)
            + f" | {100 * probe['mix']['accuracy']:.2f} |",
            "| mix weights | "
            + " | ".join(f"{w:.3f}" for w in probe["mix"]["mix_weights"])
            + " | |",
        ]
    return lines


def plot(m: Metrics, out_dir: Path) -> List[Path]:
    """accuracy_by_fraction.png and layer_weights.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, probe, table, groups = m.runs, m.probe, m.table, m.groups
    machines = "; ".join(sorted({r["machine"] for r in runs}))
    stamp = f"{sorted({r['date'] for r in runs})[-1]}, {machines}"
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, g in zip(axes[0], groups):
        for system in PLACEMENTS:
            points = sorted((f, c) for (t, s, f), c in table.items() if t == g and s == system)
            if points:
                ax.errorbar(
                    [100 * f for f, _ in points],
                    [c.mean for _, c in points],
                    yerr=[c.sd for _, c in points],
                    marker="o",
                    capsize=3,
                    label=SYSTEM_NAMES[system],
                )
        ax.set_xscale("log")
        ax.set_xlabel("training data (%)")
        ax.set_ylabel(METRIC_NAMES[g.task][1] + " (%)")
        ax.set_title(f"{g.task}: {g.data}", fontsize=8)
        ax.legend()
    fig.suptitle(f"Test score against training data ({stamp})", fontsize=9)
    fig.tight_layout()
    paths = [out_dir / "accuracy_by_fraction.png"]
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)
    mixes = learned_mixes(runs)
    weights = {
        f"{g.task} ({g.data})": mix.weights
        for g in groups
        for (t, system, _), mix in mixes.items()
        if t == g and system == "elmo"
    }
    if probe:
        weights["pos probe"] = probe["mix"]["mix_weights"]
    if weights:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        n = len(next(iter(weights.values())))
        width = 0.8 / len(weights)
        for i, (name, ws) in enumerate(weights.items()):
            ax.bar([j + i * width for j in range(n)], ws, width=width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(n)], [f"layer {j}" for j in range(n)])
        ax.set_ylabel("softmax(s)")
        ax.set_title(f"Learned layer weights ({stamp})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out_dir / "layer_weights.png")
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--metrics", type=Path, default=None, help="metrics directory (default: the scale's)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where to write (default: the metrics directory)"
    )
    args = parser.parse_args(argv)
    metrics = args.metrics or metrics_dir(args.scale)
    out = args.out or metrics
    out.mkdir(parents=True, exist_ok=True)
    loaded = load(metrics)
    (out / "summary.md").write_text(render(loaded), encoding="utf-8")
    for path in [out / "summary.md", *plot(loaded, out)]:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
