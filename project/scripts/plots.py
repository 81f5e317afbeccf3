"""The summary's two plots: test score against training data, and the learned layer weights."""

from __future__ import annotations

from pathlib import Path
from typing import List

from .results import METRIC_NAMES, PLACEMENTS, SYSTEM_NAMES, Metrics, learned_mixes


def plot(m: Metrics, out_dir: Path) -> List[Path]:
    """accuracy_by_fraction.png and layer_weights.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, probe, table, groups = m.runs, m.probe, m.table, m.groups
    machines = "; ".join(sorted({r["machine"] for r in runs}))
    stamp = f"{sorted({r['date'] for r in runs})[-1]}, {machines}"
    # ELMo with the tuned biLM beside ELMo, then the other placements
    systems = [s for s in SYSTEM_NAMES if s in PLACEMENTS or s == "elmo-tuned"]
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, g in zip(axes[0], groups):
        for system in systems:
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
        if ax.get_legend_handles_labels()[1]:  # a panel of other systems only has none
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
