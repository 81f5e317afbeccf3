"""The summary's claims table: for each task on each data set, whether ELMo beats the baselines
and whether its gain grows as the data shrinks, the same for the placement chosen on dev and for
ELMo with the tuned biLM, and whether ELMo on less data matches the baseline on more. A claim
"holds" when the mean difference exceeds the larger of the two sds, is "within the spread" when its
size does not, and "does not hold" otherwise."""

from __future__ import annotations

from typing import Dict, List, Optional

from .results import (
    PLACEMENTS,
    SYSTEM_NAMES,
    Cell,
    Group,
    Metrics,
    chosen_on_dev,
    fraction_label,
    tuned_cell,
    tuned_placement,
)


def claims_section(m: Metrics, fractions: List[float]) -> List[str]:
    lines = [
        "",
        "## The claims",
        "",
        "| claim | task | data | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for g in m.groups:
        lines += group_claims(m, g, fractions)
    return lines


def group_claims(m: Metrics, g: Group, fractions: List[float]) -> List[str]:
    """The rows of the claims table for one task on one data set: ELMo's, those of the placement
    chosen on dev, then, where the group has runs of it, those of ELMo with the tuned biLM (at the
    placement chosen on dev) and whether tuning beats the untuned biLM at the same placement."""
    table, on = m.table, f"{g.task} | {g.data}"
    lines = gain_claims(m, g, "elmo", fractions)
    chosen = chosen_on_dev(m, g, 1.0)
    if chosen and chosen != "elmo":  # ELMo at the input has its claims above
        for other in ("base", "spacy-pretrain", "floret"):
            name = "the baseline" if other == "base" else SYSTEM_NAMES[other]
            lines.append(
                f"| ELMo placed by dev ({PLACEMENTS[chosen]}) beats {name} at 100% | {on} | "
                f"{verdict(table.get((g, chosen, 1.0)), table.get((g, other, 1.0)))} |"
            )
    lines += match_claims(m, g, "elmo")
    tuned_cells = {f: tuned_cell(m, g, f) for f in fractions}
    if any(tuned_cells.values()):
        lines += gain_claims(m, g, "elmo-tuned", fractions, tuned_cells)
        for fraction in fractions:
            placement = tuned_placement(m, g, fraction)
            where = "" if placement == "elmo" else f", both {PLACEMENTS[placement]} (chosen on dev)"
            lines.append(
                f"| {SYSTEM_NAMES['elmo-tuned']} beats ELMo at {fraction_label(fraction)}{where} | "
                f"{on} | {verdict(tuned_cells[fraction], table.get((g, placement, fraction)))} |"
            )
        lines += match_claims(m, g, "elmo-tuned", tuned_cells)
    return lines


def gain_claims(
    m: Metrics,
    g: Group,
    system: str,
    fractions: List[float],
    cells: Optional[Dict[float, Optional[Cell]]] = None,
) -> List[str]:
    """Whether `system` (its scores per fraction: `cells`, else its own) beats the baseline at each
    fraction and the two other baselines at 100%, and whether its gain over the baseline grows as
    the data shrinks."""
    table, on, name = m.table, f"{g.task} | {g.data}", SYSTEM_NAMES[system]
    system_cells = cells or {f: table.get((g, system, f)) for f in fractions}
    lines = [
        f"| {name} beats the baseline at {fraction_label(fraction)} | {on} | "
        f"{verdict(system_cells[fraction], table.get((g, 'base', fraction)))} |"
        for fraction in fractions
    ]
    for other in ("spacy-pretrain", "floret"):
        lines.append(
            f"| {name} beats {SYSTEM_NAMES[other]} at 100% | {on} | "
            f"{verdict(system_cells.get(1.0), table.get((g, other, 1.0)))} |"
        )
    gains = [
        (f, system_cells[f].mean - table[g, "base", f].mean)
        for f in fractions
        if system_cells[f] and (g, "base", f) in table
    ]
    grows = gain_grows([gain for _, gain in gains])
    gain_text = ", ".join(f"{fraction_label(f)}: {gain:+.2f}" for f, gain in gains)
    subject = "the gain" if system == "elmo" else f"the gain of {name}"
    lines.append(
        f"| {subject} grows as the data shrinks | {on} | "
        + ("not run" if grows is None else ("holds" if grows else "does not hold"))
        + (f" ({gain_text})" if gains else "")
        + " |"
    )
    return lines


def match_claims(
    m: Metrics, g: Group, system: str, cells: Optional[Dict[float, Optional[Cell]]] = None
) -> List[str]:
    """Whether `system` (its scores per fraction: `cells`, else its own) on 1% of the data matches
    the baseline on 10% (and, for the tagger, on 10% the baseline on 100%)."""
    table, on, name = m.table, f"{g.task} | {g.data}", SYSTEM_NAMES[system]
    system_cells = cells or {f: table.get((g, system, f)) for f in (0.01, 0.1)}
    lines = [
        f"| {name} on 1% matches the baseline on 10% | {on} | "
        f"{match(system_cells.get(0.01), table.get((g, 'base', 0.1)))} |"
    ]
    if g.task == "pos":
        lines.append(
            f"| {name} on 10% matches the baseline on 100% | {on} | "
            f"{match(system_cells.get(0.1), table.get((g, 'base', 1.0)))} |"
        )
    return lines


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


def match(better: Optional[Cell], reference: Optional[Cell]) -> str:
    """`better` reaches `reference` when its mean is at least reference's mean minus the larger
    sd."""
    if better is None or reference is None:
        return "not run"
    spread = max(better.sd, reference.sd)
    diff = better.mean - reference.mean
    return f"{'holds' if diff >= -spread else 'does not hold'} ({better} vs {reference})"


def gain_grows(gains: List[float]) -> Optional[bool]:
    """Whether ELMo's gain over the baseline, by training fraction from the smallest, is a gain
    where data is scarcest and no smaller where data is scarcer; None with fewer than two
    fractions."""
    if len(gains) < 2:
        return None
    return gains[0] > 0 and all(a >= b for a, b in zip(gains, gains[1:]))
