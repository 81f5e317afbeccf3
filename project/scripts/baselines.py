"""The two baselines that read the biLM's pretraining text (the `baselines` step): `spacy pretrain`
of the tok2vec and floret vectors. baselines.json in the scale's metrics directory keeps the cost of
each. Each baseline is done once its record (pretrain.json, floret.json) is written, last; a
directory without it (a step stopped midway) is removed and the baseline redone."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from .study import ASSETS, CONFIGS, LM_TEXT, Scale, run, shown


def pretrain_baselines(
    scale: Scale, training: Path, metrics: Path, systems: Optional[Sequence[str]], threads: int
) -> None:
    """Both baselines (with `systems`, only those named), each skipped where it is done, under
    `training`/baselines; their costs recorded in `metrics`/baselines.json."""
    out = training / "baselines"
    out.mkdir(parents=True, exist_ok=True)
    jsonl = raw_text_jsonl(scale, training / "text", out / "raw_text.jsonl")
    record = metrics / "baselines.json"
    costs = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    if systems is None or "spacy-pretrain" in systems:
        spacy_pretrain(scale, jsonl, out / "tok2vec")
        costs["spacy-pretrain"] = json.loads(
            (out / "tok2vec" / "pretrain.json").read_text(encoding="utf-8")
        )
    if systems is None or "floret" in systems:
        floret_vectors(scale, jsonl, out / "floret", threads)
        costs["floret"] = json.loads((out / "floret" / "floret.json").read_text(encoding="utf-8"))
    metrics.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(costs, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def raw_text_jsonl(scale: Scale, text_dir: Path, jsonl: Path) -> Path:
    """The pretraining text (the scale's slice of it) as `spacy pretrain` reads it: one
    `{"text": ...}` line per non-blank line, whitespace normalized; written once."""
    texts = [scale.slice_text(ASSETS / "lm" / name, text_dir) for name in LM_TEXT]
    if not jsonl.exists():
        with open(jsonl.with_suffix(".part"), "w", encoding="utf-8") as f:
            for path in texts:
                with open(path, encoding="utf-8") as src:
                    for line in src:
                        if line.split():
                            f.write(json.dumps({"text": " ".join(line.split())}) + "\n")
        jsonl.with_suffix(".part").replace(jsonl)
    return jsonl


def fresh(out: Path, record: Path) -> bool:
    """Whether the baseline in `out` is still to do: its record is missing. What a stopped step
    left there is removed."""
    if record.is_file():
        return False
    if out.exists():
        shutil.rmtree(out)
    return True


def write_record(path: Path, record: dict) -> None:
    """The baseline's record, written whole or not at all: it marks the baseline done."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(record), encoding="utf-8")
    part.replace(path)


def spacy_pretrain(scale: Scale, jsonl: Path, out: Path) -> None:
    """The tok2vec pretrained by `spacy pretrain` in `out` (model-last.bin), then pretrain.json."""
    if not fresh(out, out / "pretrain.json"):
        return
    overrides = [
        f"--{k}={json.dumps(v)}"
        for k, v in scale.baseline_overrides.items()
        if k.startswith("pretraining.")
    ]
    start = time.perf_counter()
    run(
        [
            sys.executable,
            "-m",
            "spacy",
            "pretrain",
            str(CONFIGS / "pretrain_tok2vec.cfg"),
            str(out),
            "--paths.raw_text",
            str(jsonl),
            *overrides,
        ]
    )
    record = {"seconds": time.perf_counter() - start, "text": shown(jsonl)}
    write_record(out / "pretrain.json", record)


def floret_vectors(scale: Scale, jsonl: Path, out: Path, threads: int) -> None:
    """floret vectors trained on the text, as spaCy vectors in `out`/vectors, then floret.json."""
    vectors = out / "vectors"
    if not fresh(out, out / "floret.json"):
        return
    import floret

    out.mkdir(parents=True, exist_ok=True)
    text = out / "text.txt"
    with open(jsonl, encoding="utf-8") as src, open(text, "w", encoding="utf-8") as dst:
        for line in src:
            dst.write(json.loads(line)["text"] + "\n")
    epochs = scale.baseline_overrides.get("pretraining.max_epochs", 1) * 2
    bucket = scale.baseline_overrides.get("floret.bucket", 50000)  # rows of the vector table
    start = time.perf_counter()
    model = floret.train_unsupervised(
        str(text),
        model="cbow",
        mode="floret",
        hashCount=2,
        bucket=bucket,
        minn=3,
        maxn=5,
        minCount=2,
        dim=100,
        epoch=epochs,
        thread=threads,
    )
    model.save_floret_vectors(str(out / "vectors.floret"))
    seconds = time.perf_counter() - start
    run(
        [
            sys.executable,
            "-m",
            "spacy",
            "init",
            "vectors",
            "en",
            str(out / "vectors.floret"),
            str(vectors),
            "--mode",
            "floret",
        ]
    )
    write_record(out / "floret.json", {"seconds": seconds, "dim": 100, "epochs": epochs})
