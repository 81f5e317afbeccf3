"""The two baselines that read the biLM's pretraining text (the `baselines` step): `spacy pretrain`
of the tok2vec and floret vectors. baselines.json in the scale's metrics directory keeps the cost of
each. Each baseline is done once its record (pretrain.json, floret.json) is written, last; a
directory without it (a step stopped midway) is removed and the baseline redone, and so is one whose
record says it was made from other text or settings than the step's now (saying which)."""

from __future__ import annotations

import filecmp
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from spacy_elmo.files import write_atomic

from .fetch_assets import sha256_file
from .study import ASSETS, CONFIGS, LM_TEXT, Scale, run, shown


def pretrain_baselines(
    scale: Scale, training: Path, metrics: Path, systems: Optional[Sequence[str]], threads: int
) -> None:
    """Both baselines (with `systems`, only those named), each skipped where it is done, under
    `training`/baselines; their costs recorded in `metrics`/baselines.json."""
    out = training / "baselines"
    out.mkdir(parents=True, exist_ok=True)
    texts = [scale.slice_text(ASSETS / "lm" / name, training / "text") for name in LM_TEXT]
    jsonl = raw_text_jsonl(texts, out / "raw_text.jsonl")
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
    write_atomic(record, json.dumps(costs, indent=2, sort_keys=True) + "\n")


def raw_text_jsonl(texts: List[Path], jsonl: Path) -> Path:
    """The pretraining text (the scale's slice of it: `texts`) as `spacy pretrain` reads it: one
    `{"text": ...}` line per non-blank line, whitespace normalized; written again where the text
    changed."""
    part = jsonl.with_suffix(".part")
    with open(part, "w", encoding="utf-8") as f:
        for path in texts:
            with open(path, encoding="utf-8") as src:
                for line in src:
                    if line.split():
                        f.write(json.dumps({"text": " ".join(line.split())}) + "\n")
    if jsonl.is_file() and filecmp.cmp(part, jsonl, shallow=False):
        part.unlink()
    else:
        if jsonl.exists():
            print(f"{shown(jsonl)}: the pretraining text changed: written again")
        part.replace(jsonl)
    return jsonl


def fresh(out: Path, record: Path, made_from: Dict) -> bool:
    """Whether the baseline in `out` is still to do: its record is missing, or says it was made
    from other text or settings than `made_from` (a record from before baselines recorded them is
    trusted). What a stopped step or another baseline left there is removed."""
    if record.is_file():
        recorded = json.loads(record.read_text(encoding="utf-8")).get("made_from")
        if recorded is None or recorded == made_from:
            return False
        changed = sorted(
            k for k in recorded.keys() | made_from.keys() if recorded.get(k) != made_from.get(k)
        )
        print(f"{shown(out)} was made from another {', '.join(changed)}: made again")
    if out.exists():
        shutil.rmtree(out)
    return True


def write_record(path: Path, record: dict) -> None:
    """The baseline's record, written whole or not at all: it marks the baseline done."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(record), encoding="utf-8")
    part.replace(path)


def spacy_pretrain(
    scale: Scale, jsonl: Path, out: Path, config: Path = CONFIGS / "pretrain_tok2vec.cfg"
) -> None:
    """The tok2vec pretrained by `spacy pretrain` with `config` in `out` (model-last.bin), then
    pretrain.json."""
    settings = {k: v for k, v in scale.baseline_overrides.items() if k.startswith("pretraining.")}
    made_from = {
        "text_sha256": sha256_file(jsonl),
        "settings": settings,
        "config_sha256": sha256_file(config),
    }
    if not fresh(out, out / "pretrain.json", made_from):
        return
    overrides = [f"--{k}={json.dumps(v)}" for k, v in settings.items()]
    start = time.perf_counter()
    run(
        [
            sys.executable,
            "-m",
            "spacy",
            "pretrain",
            str(config),
            str(out),
            "--paths.raw_text",
            str(jsonl),
            *overrides,
        ]
    )
    record = {"seconds": time.perf_counter() - start, "text": shown(jsonl), "made_from": made_from}
    write_record(out / "pretrain.json", record)


def floret_vectors(scale: Scale, jsonl: Path, out: Path, threads: int) -> None:
    """floret vectors trained on the text, as spaCy vectors in `out`/vectors, then floret.json."""
    vectors = out / "vectors"
    epochs = scale.baseline_overrides.get("pretraining.max_epochs", 1) * 2
    bucket = scale.baseline_overrides.get("floret.bucket", 50000)  # rows of the vector table
    settings = {"epochs": epochs, "bucket": bucket, "dim": 100}
    made_from = {"text_sha256": sha256_file(jsonl), "settings": settings}
    if not fresh(out, out / "floret.json", made_from):
        return
    import floret

    out.mkdir(parents=True, exist_ok=True)
    text = out / "text.txt"
    with open(jsonl, encoding="utf-8") as src, open(text, "w", encoding="utf-8") as dst:
        for line in src:
            dst.write(json.loads(line)["text"] + "\n")
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
        dim=settings["dim"],
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
    record = {"seconds": seconds, "dim": settings["dim"], "epochs": epochs, "made_from": made_from}
    write_record(out / "floret.json", record)
