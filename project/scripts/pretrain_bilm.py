"""Pretrain the project's English biLM on cased, punctuated raw text (the `pretrain` step).

    python -m project.scripts.pretrain_bilm --scale full --minutes 60 --threads 2
    python -m project.scripts.pretrain_bilm --scale full --weights PATH_OR_NAME   # given weights

Text: WikiText-2 train plus the 1B Word Benchmark held-out shards 10-13 (already tokenized, so
whitespace-split); dev perplexity on WikiText-2 valid, at half time and at the end (each evaluation
of the full valid set costs several minutes on one thread). PTB is not used: it is lowercased and
has no punctuation. Config: the built-in default of `python -m spacy_elmo pretrain` (seed 0) with a
time budget and `training.precision` "auto" (bfloat16 products where the CPU has them natively: more
steps in the same time, see bench/README.md; float32 elsewhere); `--section.key value` overrides may
follow. An interrupted run continues from its checkpoint.

Writes project/training/<scale>/bilm/model (the biLM the later steps use) and bilm.json in the
scale's metrics directory (project/metrics for the full study): the biLM's path, sha256 and, when
trained here, its training record (config, seed, corpus sha256s, time, dev perplexity). With
--weights nothing is trained: bilm.json points at the given weights. A biLM already trained is
kept where it was trained as asked (settings, budget and training text); where it was trained
otherwise the step stops, naming what changed: it never trains one again unasked (remove its
directory to do so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import List

from thinc.api import Config

from spacy_elmo.files import sha256_file, write_atomic

from .study import ASSETS, LM_TEXT, ROOT, SCALES, bilm_record, errors, metrics_dir, shown

LM = ASSETS / "lm"
DEV_TEXT = "wikitext2.valid.txt"


def record_given_weights(weights: str, record_path: Path) -> None:
    """bilm.json for given weights (a path or a published name): nothing is trained."""
    from spacy_elmo import load_bilm

    bilm = load_bilm(weights)  # fails here, clearly, if the weights do not load
    record = {
        "path": str(weights),
        "trained_here": False,
        "fingerprint": bilm.fingerprint(),
        "sha256": {p.name: sha256_file(p) for p in sorted(Path(weights).glob("*")) if p.is_file()}
        if Path(weights).is_dir()
        else {},
    }
    record_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(record_path, json.dumps(record, indent=2))
    print(f"using the given biLM {weights}; nothing to train")


def trained_otherwise(config: Config, bilm_dir: Path) -> List[str]:
    """How the biLM trained in `bilm_dir` (its config.cfg and corpus.json) differs from the one
    `config` asks for: each setting, budget included (not those that only say when to report or
    checkpoint), and each training file whose sha256 differs."""
    from spacy_elmo.pretrain.outputs import (
        CONFIG_FILE,
        CORPUS_RECORD,
        DEFAULTS_BEFORE,
        RESUMABLE_CHANGES,
        resolved_paths,
    )
    from spacy_elmo.pretrain.text import corpus_sha256

    saved = Config().from_disk(bilm_dir / CONFIG_FILE, interpolate=False)
    budget = {"max_steps", "max_epochs", "max_minutes"}
    changes = []
    for section in ("corpus", "vocab", "model", "softmax", "training"):
        for key, value in config[section].items():
            if section == "training" and key in RESUMABLE_CHANGES - budget:
                continue
            old = saved.get(section, {}).get(key, DEFAULTS_BEFORE.get((section, key)))
            if section == "corpus" and key in ("train", "dev"):
                old, value = resolved_paths(old), resolved_paths(value)
            if old != value:
                changes.append(f"{section}.{key} was {old!r}, now {value!r}")
    recorded = json.loads((bilm_dir / CORPUS_RECORD).read_text(encoding="utf-8"))
    recorded = {os.path.realpath(k): v for k, v in recorded.items()}
    now = {
        os.path.realpath(k): v for k, v in corpus_sha256(config["corpus"]["train"], "train").items()
    }
    for name in sorted(recorded.keys() | now.keys()):
        if recorded.get(name) != now.get(name):
            what = "is new" if name not in recorded else "is gone" if name not in now else "changed"
            changes.append(f"the training text {shown(name)} {what}")
    return changes


def check_trained(config: Config, bilm_dir: Path) -> None:
    """SystemExit naming what changed where the biLM in `bilm_dir` was trained otherwise than
    `config` asks: it is kept, never trained again unasked."""
    changes = trained_otherwise(config, bilm_dir)
    if changes:
        raise SystemExit(
            f"error: the biLM in {shown(bilm_dir)} was trained otherwise than this step asks: "
            f"{'; '.join(changes)}. It is kept (the ELMo runs, the tunings and the probe read it, "
            "and a biLM trained again does not come out bit for bit the same): to train one as "
            f"asked, remove {shown(bilm_dir)} (or move it away) and run the step again; to keep "
            "it, run the step with the settings and text it was trained with"
        )


@errors()
def main() -> None:
    from spacy_elmo.cli.pretrain import parse_overrides, split_overrides
    from spacy_elmo.pretrain import load_config, train

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--minutes", type=float, default=60.0, help="training minutes (evaluation excluded)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--weights",
        default="",
        help="use these weights instead of training (path or published name)",
    )
    rest, overrides = split_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    scale = SCALES[args.scale]
    out = ROOT / "project" / "training" / args.scale
    record_path = metrics_dir(args.scale) / "bilm.json"
    if args.weights:
        record_given_weights(args.weights, record_path)
        return
    import torch

    torch.set_num_threads(args.threads)
    train_files = [str(scale.slice_text(LM / name, out / "text")) for name in LM_TEXT]
    dev_file = str(scale.slice_text(LM / DEV_TEXT, out / "text", dev=True))
    values = {
        "paths.train": train_files,
        "paths.dev": dev_file,
        "corpus.tokenizer": "whitespace",
        "training.precision": "auto",
        "training.max_minutes": args.minutes,
        "training.max_epochs": None,
        "training.eval_every": None,
        "training.eval_every_minutes": max(args.minutes / 2, 0.1),
        **scale.pretrain_overrides,
        **parse_overrides(overrides),
    }
    config = load_config(None, values)
    bilm_dir = out / "bilm"
    if (bilm_dir / "model" / "training.json").is_file():
        check_trained(config, bilm_dir)
        print(f"{shown(bilm_dir / 'model')} is already trained with these settings and text")
    else:
        resume = (bilm_dir / "checkpoint" / "checkpoint.json").is_file()
        train(config, bilm_dir, resume=resume, log=lambda msg: print(msg, file=sys.stderr))
    record_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(record_path, json.dumps(bilm_record(bilm_dir / "model"), indent=2))
    print(f"wrote {record_path}")


if __name__ == "__main__":
    main()
