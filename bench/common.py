"""Shared helpers of the benchmarks: data and weights, machine facts, arithmetic rate, FLOPs per
token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import torch

from spacy_elmo.bilm import BiLMOptions

REPO = Path(__file__).resolve().parent.parent
# A benchmark runs as a file (`python bench/NAME.py`), so only bench/ is on its path: the study's
# package, which holds what the benchmarks share with it, is reached from the repository root.
sys.path.insert(0, str(REPO))
# the study's CoNLL-U reader, machine description and pipeline scores (the benchmarks import them
# from here)
from project.scripts.corpora import read_conllu  # noqa: E402
from project.scripts.machine import machine  # noqa: E402, F401
from project.scripts.scoring import evaluate  # noqa: E402, F401

DATA = Path(os.environ.get("SPACY_ELMO_DATA", REPO.parent / "shared" / "data"))


def read_conllu_sentences(path: Path) -> List[List[str]]:
    """The words of every sentence of a CoNLL-U file."""
    return [sentence.words for sentence in read_conllu(path)]


def weights_dir(size: str) -> Path:
    """Random weights at a published size, written once under bench/out/ by the shared tool."""
    out = REPO / "bench" / "out" / f"weights_{size}"
    if not (out / "weights.hdf5").exists():
        tool = REPO.parent / "shared" / "tools" / "make_elmo_weights.py"
        subprocess.run(
            [sys.executable, str(tool), size, str(out)], check=True, stdout=subprocess.DEVNULL
        )
    return out


def matmul_gflops(n: int = 2048, repeats: int = 10) -> float:
    """The machine's float32 arithmetic rate (GFLOP/s) on large matrix products, at the current
    thread count."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def train_flops_per_token(
    options: BiLMOptions, vocab_size: int, softmax: str = "full", n_samples: int = 8192
) -> float:
    """Multiply-adds x 2 of one training token (both directions, forward + backward pass = 3x
    forward) in the LSTM layers and the softmax. The token encoder runs once per distinct word of a
    batch and is left out, so this is a lower bound."""
    P, D = options.projection_dim, options.lstm_dim
    lstm = options.n_layers * 2 * (2 * P * 4 * D + D * P)
    classes = vocab_size if softmax == "full" else min(n_samples, vocab_size)
    per_direction = lstm + 2 * P * classes
    return 3 * 2 * per_direction


def read_metrics(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def write_curve(metrics: List[Dict[str, Any]], path: Path) -> None:
    """perplexity against training minutes, as CSV."""
    rows = ["train_minutes,step,tokens,train_loss,dev_forward,dev_backward,dev_mean,policy"]
    for m in metrics:
        d = m["dev"] or {}
        rows.append(
            f"{m['train_minutes']:.3f},{m['step']},{m['tokens']},{m['train_loss']:.4f},"
            f"{d.get('forward', float('nan')):.2f},{d.get('backward', float('nan')):.2f},"
            f"{d.get('mean', float('nan')):.2f},{d.get('policy', '')}"
        )
    Path(path).write_text("\n".join(rows) + "\n", encoding="utf-8")
