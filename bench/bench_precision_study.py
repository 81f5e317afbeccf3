"""The study's trained ELMo pipelines evaluated with their features in each precision, against the
seeds' spread.

    python bench/bench_precision_study.py [--runs project/training/full/runs] [--precisions
    float32,bfloat16,int8]
                                          [--fraction 1] [--systems elmo elmo-output] [--threads 2]

Each pipeline the study trained (in float32) on 100% of its data, per task, data set and seed, is
loaded once per precision (`[components.elmo.model] precision`, the only change) and scored on that
task's test set (`project/corpus/full/<data>/test.spacy`): the tagger's accuracy, NER's F1, in
points. Reports per run the score in each precision, per task and system the largest change from
float32 over the seeds, and the spread (max - min) of the float32 scores over the seeds. Precisions
this CPU cannot run natively ("bfloat16" without native support) are left out. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

import torch
from common import REPO, evaluate, machine

RUN = re.compile(
    r"^(?P<task>pos|ner-(?P<data>uner|conll2003))-(?P<system>elmo(-[a-z0-9]+)?)-f(?P<fraction>[0-9.]+)"
    r"-s(?P<seed>\d+)$"
)


def score(model: Path, test: Path, metric: str, precision: str) -> float:
    record = evaluate(
        model, test, metric, config={"components": {"elmo": {"model": {"precision": precision}}}}
    )
    return round(100 * record["test"][metric], 2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=str(REPO / "project" / "training" / "full" / "runs"))
    parser.add_argument("--corpus", default=str(REPO / "project" / "corpus" / "full"))
    parser.add_argument("--precisions", default="float32,bfloat16,int8")
    parser.add_argument("--fraction", default="1")
    parser.add_argument("--systems", nargs="+", default=["elmo"])
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    from spacy_elmo.bilm.precision import native_bfloat16

    precisions = [
        p
        for p in args.precisions.split(",")
        if p != "bfloat16" or native_bfloat16(torch.device("cpu"))
    ]
    runs = [
        (m, d)
        for d in sorted(Path(args.runs).iterdir())
        if (m := RUN.match(d.name))
        and m["fraction"] == args.fraction
        and m["system"] in args.systems
        and (d / "model-best").is_dir()
    ]
    if not runs:
        raise SystemExit(
            f"error: no ELMo runs at fraction {args.fraction} of systems {args.systems} in "
            f"{args.runs}"
        )
    scores: dict = {}
    start = time.perf_counter()
    for match, run in runs:
        test = Path(args.corpus) / (match["data"] or "ud") / "test.spacy"
        metric = "tag_acc" if match["task"] == "pos" else "ents_f"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores[run.name] = {p: score(run / "model-best", test, metric, p) for p in precisions}
        print(run.name, scores[run.name], file=sys.stderr, flush=True)
    groups: dict = {}
    for name, by_precision in scores.items():
        groups.setdefault(RUN.match(name)["task"] + " " + RUN.match(name)["system"], []).append(
            by_precision
        )
    summary = {}
    for group, seeds in groups.items():
        float32 = [s["float32"] for s in seeds]
        summary[group] = {
            "seeds": len(seeds),
            "float32_spread": round(max(float32) - min(float32), 2),
            **{
                f"largest_change_{p}": round(max((s[p] - s["float32"] for s in seeds), key=abs), 2)
                for p in precisions
                if p != "float32"
            },
        }
    print(
        json.dumps(
            {
                "scores": scores,
                "summary": summary,
                "threads": args.threads,
                "minutes": round((time.perf_counter() - start) / 60, 1),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
