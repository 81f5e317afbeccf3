"""Tiny corpora and configs for the pretraining tests."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict, List

from spacy_elmo.pretrain import load_config

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the company", "a small bird", "John", "the teacher"]
VERBS = ["saw", "liked", "found", "sold", "painted", "followed", "visited", "ignored"]
OBJECTS = ["the house", "a red car", "the river", "two books", "the market", "an apple", "the garden", "her friend"]
ENDINGS = [".", "yesterday .", "on Monday .", "again .", "in the morning .", "!"]


def toy_sentences(n: int, seed: int = 0) -> List[str]:
    """`n` sentences of a small grammar: structured enough for an LM to learn quickly."""
    rng = random.Random(seed)
    return [" ".join([rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(ENDINGS)])
            for _ in range(n)]


def write_corpus(path: Path, lines: List[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


TINY = {
    "corpus.tokenizer": "whitespace",
    "vocab.size": None,
    "model.char_dim": 4,
    "model.filters": [[1, 8], [2, 8], [3, 16]],
    "model.n_highway": 1,
    "model.projection_dim": 16,
    "model.lstm_dim": 32,
    "model.n_layers": 2,
    "softmax.type": "full",
    "training.batch_tokens": 80,
    "training.window": 10,
    "training.max_epochs": None,
    "training.max_steps": 20,
    "training.optimizer": "adam",
    "training.learning_rate": 0.01,
    "training.dropout": 0.0,
    "training.eval_every": None,
    "training.checkpoint_every": 1000,
    "training.eval_batch_size": 16,
}


def tiny_config(train: Path, dev: Path = None, **overrides: Any):
    """The built-in config with tiny sizes; `overrides` use `section__key` names."""
    values: Dict[str, Any] = {**TINY, "paths.train": str(train), "paths.dev": str(dev) if dev else None}
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return load_config(None, values)


def override_args(train: Path, dev: Path = None, **overrides: Any) -> List[str]:
    """The same tiny config as CLI arguments (`--section.key value`)."""
    import json

    values: Dict[str, Any] = {**TINY, "paths.train": str(train), "paths.dev": str(dev) if dev else None}
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    args: List[str] = []
    for key, value in values.items():
        args += [f"--{key}", json.dumps(value) if not isinstance(value, str) else value]
    return args
