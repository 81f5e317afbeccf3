"""Tune the biLM on a task's text, labels dropped (the `tune` step; Peters et al. 2018, sec. 3.4).

    python -m project.scripts.tune_bilm --scale full [--ner-data uner|conll2003] [--bilm PATH]

For each task the study runs (pos on UD English-EWT; ner on `--ner-data`) and each of its training
sets (the whole train split, and the 1% and 10% subset of every seed that the `corpus` step wrote),
the sentences of that set (tokens joined by spaces, one sentence a line) continue the training of
the biLM for one epoch: `spacy_elmo.pretrain.train` with `init_from` the biLM, its own config (the
whitespace tokenizer, no time budget; `Scale.tune_overrides` on top), into
project/training/<scale>/tuned/<task>/f<fraction>[-s<seed>]/model. Dev perplexity is measured on the
dev split's text, before (the untuned biLM, with the trainer's own `dev_nll`) and after.

Writes tuned.json in the scale's metrics directory: one record per task, fraction and subset seed
(perplexities, tuning seconds, the text's sentences, tokens and sha256). A finished tuning is
skipped, an interrupted one continues from its checkpoint, and one made from another biLM or text
is done again. Given weights (`--bilm`) are tuned when they are a model `pretrain` saved, with its
softmax; for other weights the records say that tuning was skipped and why.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from spacy_elmo.files import sha256_file, write_atomic

from .run_study import Study
from .study import (
    SCALES,
    STAMP,
    Task,
    machine_line,
    read_json,
    shown,
    tunable_model,
)

# One epoch over the task's text, evaluated once at the end, checkpointed on the way.
TUNE_SETTINGS = {
    "corpus.tokenizer": "whitespace",
    "training.max_epochs": 1,
    "training.max_steps": None,
    "training.max_minutes": None,
    "training.eval_every": None,
    "training.eval_every_minutes": None,
    "training.checkpoint_every": 100,
}


def write_text(docs: Path, target: Path) -> Dict[str, Any]:
    """The sentences of the .spacy file `docs` as text, tokens joined by spaces, one sentence a
    line, written to `target` (only where it differs, so that a resumed tuning finds its text
    unchanged) -> its file, sentences, tokens and sha256."""
    import spacy
    from spacy.tokens import DocBin

    lines = []
    for doc in DocBin().from_disk(docs).get_docs(spacy.blank("en").vocab):
        words = [word for token in doc for word in token.text.split()]
        if words:
            lines.append(" ".join(words) + "\n")
    text = "".join(lines)
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)
    return {
        "file": shown(target),
        "sentences": len(lines),
        "tokens": sum(len(line.split()) for line in lines),
        "sha256": sha256_file(target),
    }


def tuning_config(base: Path, train: Path, dev: Path, overrides: Dict[str, Any]):
    """The config the biLM in `base` was trained with, set to read `train` for one epoch and
    evaluate on `dev` (TUNE_SETTINGS, then `overrides`)."""
    from spacy_elmo.pretrain import load_config

    summary = json.loads((base / "training.json").read_text(encoding="utf-8"))
    values = {
        "paths.train": str(train),
        "paths.dev": str(dev),
        "corpus.train": str(train),
        "corpus.dev": str(dev),
        **TUNE_SETTINGS,
        **overrides,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.cfg"
        path.write_text(summary["config"], encoding="utf-8")
        return load_config(path, values)


def perplexity_before(base: Path, config) -> Dict[str, Any]:
    """Dev perplexity of the untuned biLM in `base` on `config`'s dev text, as the trainer measures
    it (its policy, `dev_nll`, `perplexities`)."""
    from spacy_elmo.pretrain import dev_nll, load_trained, perplexities
    from spacy_elmo.pretrain.config import model_policy
    from spacy_elmo.pretrain.corpus import corpus_tokenizer, load_dev

    bilm, head, vocab, _ = load_trained(base)
    c = config["corpus"]
    dev = load_dev(c["dev"], corpus_tokenizer(c), c["max_sentence_length"], vocab, c["unk_token"])
    policy = model_policy(config)
    nll = dev_nll(bilm, head, dev, policy, config["training"]["eval_batch_size"])
    return {"policy": str(policy), **perplexities(nll, dev.n_predicted)}


def tune(config, out: Path, base: Path, stamp: Dict[str, Any]) -> Dict[str, Any]:
    """Train `config` from the biLM in `base` into `out`, unless it is trained already; continue an
    interrupted tuning from its checkpoint; start again where `out` holds a tuning of another biLM
    or text (`stamp`) -> the tuned model's training summary."""
    from spacy_elmo.pretrain import train

    model = out / "model" / "training.json"
    if out.exists() and read_json(out / STAMP) != stamp:
        print(f"{shown(out)}: made from another biLM or text; tuning again", flush=True)
        shutil.rmtree(out)
    if model.is_file():
        print(f"{shown(out)} is already tuned", flush=True)
    else:
        resume = (out / "checkpoint" / "checkpoint.json").is_file()
        print(f"{'continuing' if resume else 'tuning'} {shown(out)}", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / STAMP, json.dumps(stamp, indent=2))
        train(
            config,
            out,
            resume=resume,
            init_from=str(base),
            log=lambda msg: print(msg, file=sys.stderr),
        )
    return json.loads(model.read_text(encoding="utf-8"))


class Tuner:
    """The tunings of one study: its tasks' training sets, the biLM they start from, the records."""

    def __init__(self, study: Study, bilm: str):
        self.study, self.bilm = study, bilm
        self.base, self.reason = tunable_model(bilm)
        self.root = study.training / "tuned"
        self.record_path = study.metrics / "tuned.json"
        self.old = (read_json(self.record_path) or {"records": []})["records"]
        # dev text sha256 -> perplexity of the untuned biLM on it
        self.before: Dict[str, Dict[str, Any]] = {}

    @cached_property
    def fingerprint(self) -> str:
        """The fingerprint of the biLM the tunings start from."""
        from spacy_elmo import load_bilm

        return load_bilm(self.base).fingerprint()

    def training_sets(self, task: Task) -> Iterator[Tuple[float, Optional[int], str]]:
        """(fraction, subset seed or None for the whole split, name) of each training set."""
        yield 1.0, None, "f1"
        for fraction in (f for f in self.study.scale.fractions if f < 1.0):
            for seed in self.study.scale.seeds:
                yield fraction, seed, f"f{fraction:g}-s{seed}"

    def run(self) -> None:
        """Tune on every training set of every task (or record why not), then write tuned.json."""
        records = [r for r in self.old if r["data"] not in {t.data for t in self.study.tasks}]
        for task in self.study.tasks:
            for fraction, seed, name in self.training_sets(task):
                head = {"task": task.name, "data": task.data, "fraction": fraction, "seed": seed}
                if self.base is None:
                    records.append({**head, "bilm": {"path": self.bilm}, "skipped": self.reason})
                else:
                    records.append({**head, **self.tune_one(task, fraction, seed, name)})
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.record_path, json.dumps({"records": records}, indent=2) + "\n")
        print(f"wrote {shown(self.record_path)} ({len(records)} record(s))")
        if self.reason:
            print(f"tuning skipped: {self.reason}")

    def tune_one(
        self, task: Task, fraction: float, seed: Optional[int], name: str
    ) -> Dict[str, Any]:
        """Tune the biLM on one training set -> the record's fields (the earlier record where it
        describes the same tuning)."""
        texts = self.root / task.run_name / "text"
        split = self.study.split(task, "train", fraction, seed or 0)
        text = {
            "train": write_text(split, texts / f"{name}.txt"),
            "dev": write_text(self.study.split(task, "dev"), texts / "dev.txt"),
        }
        stamp = {"bilm_fingerprint": self.fingerprint, **{k: v["sha256"] for k, v in text.items()}}
        config = tuning_config(
            self.base, texts / f"{name}.txt", texts / "dev.txt", self.study.scale.tune_overrides
        )
        out = self.root / task.run_name / name
        summary = tune(config, out, self.base, stamp)
        record = {
            "path": shown(out / "model"),
            "bilm": {"path": shown(self.base), "fingerprint": self.fingerprint},
            "fingerprint": summary["fingerprint"],
            "text": text,
        }
        for old in self.old:
            if all(old.get(k) == v for k, v in record.items()):
                return old
        key = text["dev"]["sha256"]
        if key not in self.before:
            self.before[key] = perplexity_before(self.base, config)
        return {
            **record,
            "dev_perplexity": {"before": self.before[key], "after": summary["dev"]},
            "tune_seconds": summary["train_minutes"] * 60,
            "steps": summary["steps"],
            "tokens": summary["tokens"],
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine_line(),
        }


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--ner-data", choices=["uner", "conll2003"], default="uner")
    parser.add_argument(
        "--bilm", default="", help="the biLM (default: the one the pretrain step trained)"
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    study = Study(SCALES[args.scale], args.bilm, args.ner_data)
    Tuner(study, study.bilm).run()


if __name__ == "__main__":
    main()
