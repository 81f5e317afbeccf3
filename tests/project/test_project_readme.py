"""project/README.md quotes the committed metrics: the biLM's record, the tunings' dev perplexity
and time, and the summary's scores and claims. Each figure it gives is checked against the file it
comes from, so a rerun that changes them cannot leave the README behind."""

import json
import re

import pytest

from ..helpers import REPO

PROJECT_README = REPO / "project" / "README.md"
METRICS = REPO / "project" / "metrics"
# the tuning table's first column: how each data set's name in tuned.json begins
TUNED_DATA = ("UD English-EWT", "Universal NER English-EWT", "CoNLL-2003")


def readme() -> str:
    return PROJECT_README.read_text(encoding="utf-8")


def section(text: str, start: str, end: str) -> str:
    """The part of `text` from the line that starts with `start` up to the one that starts with
    `end`."""
    begin = text.index("\n" + start)
    return text[begin : text.index("\n" + end, begin + 1)]


def test_the_bilm_table_quotes_bilm_json():
    bilm = json.loads((METRICS / "bilm.json").read_text(encoding="utf-8"))
    text = section(readme(), "The biLM the committed results use", "Two earlier biLMs")
    training = bilm["training"]
    assert f"`{bilm['sha256']['weights.pt']}`" in text
    assert f"**{training['dev']['mean']:.1f}** at the end" in text
    assert f"fwd {training['dev']['forward']:.1f}, bwd {training['dev']['backward']:.1f}" in text
    assert f"{training['steps']:,} steps" in text
    assert f"{training['train_minutes']:.1f} min" in text


def after(records, fraction):
    """Dev perplexity after tuning of the `records` of a fraction, by seed: `243.6 / 246.0`."""
    mine = sorted((r for r in records if r["fraction"] == fraction), key=lambda r: r["seed"] or 0)
    return " / ".join(f"{r['dev_perplexity']['after']['mean']:.1f}" for r in mine)


def test_the_tuning_table_quotes_tuned_json():
    path = METRICS / "tuned.json"
    if not path.exists():
        pytest.fail("project/metrics/tuned.json is missing: run the `tune` step and commit it")
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    text = section(readme(), "The committed tunings", "The system `elmo-tuned`")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "->" in line]
    assert len(rows) == len(TUNED_DATA)
    for row in rows:
        name, whole, tenth, hundredth, cost = [c.strip() for c in row.strip("|").split("|")]
        assert name in TUNED_DATA
        mine = [r for r in records if r["data"].startswith(name)]
        [f1] = [r for r in mine if r["fraction"] == 1.0]
        before = f1["dev_perplexity"]["before"]["mean"]
        assert whole == f"{before:.1f} -> {after(mine, 1.0)}", name
        assert (tenth, hundredth) == (after(mine, 0.1), after(mine, 0.01)), name
        assert cost.rstrip("*") == f"{f1['steps']} steps, {f1['tune_seconds'] / 60:.1f} min", name


@pytest.mark.parametrize(
    "start, end",
    [
        ("What the summary shows", "A better language model"),
        ("What the placement runs show with the current biLM", "With the earlier biLM"),
    ],
)
def test_the_findings_quote_the_summary(start, end):
    """Every score (mean ± sd) and every signed difference the findings (and those of the placement
    runs) give is one the summary shows."""
    summary = (METRICS / "summary.md").read_text(encoding="utf-8")
    findings = section(readme(), start, end)
    quoted = re.findall(r"\d+\.\d\d ± \d+\.\d\d|[+-]\d+\.\d\d\b", findings)
    assert quoted, "the findings quote no figure of the summary"
    missing = [figure for figure in quoted if figure not in summary]
    assert not missing, f"project/README.md quotes figures the summary does not show: {missing}"


def test_the_readmes_verdict_on_tuning_is_the_summarys():
    """README.md's one line on what tuning the biLM buys in the study is the summary's verdict on
    each claim "ELMo, tuned biLM beats ELMo at 100%": the tagger's and both NER data sets'."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    verdict = re.search(
        r"\[in the study\]\([^)]*\): ([a-z ]+) of the untuned biLM at 100% of the data, for "
        r"([^;)]+)",
        text,
    )
    assert verdict, "README.md gives no verdict of the study on tuning the biLM"
    summary = (METRICS / "summary.md").read_text(encoding="utf-8")
    tuned_vs_elmo = [
        line for line in summary.splitlines() if "| ELMo, tuned biLM beats ELMo at 100%" in line
    ]
    assert [line.split(" | ")[1] for line in tuned_vs_elmo] == ["pos", "ner", "ner"]
    judged = {"pos": "the tagger"}
    for line in tuned_vs_elmo:
        task, data = line.split(" | ")[1:3]
        name = judged.get(task, data.split(" English")[0])
        if "| not run |" in line:
            assert f"{name} at the placement dev chose: not run" in text, line
        else:
            assert name in verdict.group(2) and f"| {verdict.group(1)} (" in line, line


def mean_dev(run: str) -> float:
    """The mean dev score, in points, of the committed seeds of `run` (e.g. "pos-elmo-both-f1")."""
    scores = [
        json.loads(p.read_text(encoding="utf-8"))["dev"]
        for p in sorted((METRICS / "runs").glob(f"{run}-s*.json"))
    ]
    assert scores, run
    return 100 * sum(scores) / len(scores)


@pytest.mark.parametrize(
    "claim, chosen, other",
    [
        (
            "a few hundredths of a point of dev accuracy at 10%",
            "pos-elmo-both-f0.1",
            "pos-elmo-f0.1",
        ),
        ("six hundredths at 100%", "pos-elmo-both-f1", "pos-elmo-f1"),
        (
            "by 0.16 points of\ndev F1 over the input and output",
            "ner-uner-elmo-layers01-f1",
            "ner-uner-elmo-both-f1",
        ),
        (
            "by 0.23 points\nof dev F1 over the input's",
            "ner-conll2003-elmo-layers01-f0.1",
            "ner-conll2003-elmo-f0.1",
        ),
        (
            "by 0.16 points of dev F1 over the input's",
            "ner-conll2003-elmo-output-f1",
            "ner-conll2003-elmo-f1",
        ),
    ],
)
def test_the_dev_margins_quote_the_runs(claim, chosen, other):
    """The margins by which dev chose a placement, which the summary does not give: each claim's
    figure against the committed runs' mean dev scores."""
    assert claim in readme()
    margin = mean_dev(chosen) - mean_dev(other)
    words = {"a few hundredths": (0.015, 0.05), "six hundredths": (0.055, 0.065)}
    low, high = next(
        (bounds for text, bounds in words.items() if claim.startswith(text)),
        (None, None),
    )
    if low is None:
        quoted = float(re.search(r"by (\d+\.\d+) points", claim).group(1))
        low, high = quoted - 0.005, quoted + 0.005
    assert low <= margin < high, (claim, margin)
