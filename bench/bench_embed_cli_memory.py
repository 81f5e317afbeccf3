"""Peak memory of `python -m spacy_elmo embed` on a long generated file: it must stay flat.

Writes `--lines` random sentences (Zipf-distributed pseudo-words, 0 to 30 tokens) to
bench/out/embed_lines_N.txt (once), runs the embed command on them in a child process with the
given weights (default: AllenNLP's tiny fixture), samples the child's resident set size from
/proc every 0.2 s, and prints one JSON line: lines, tokens, seconds, peak RSS (the kernel's
high-water mark for the child) and RSS at 10%, 50% and 90% of the run.

    python bench/bench_embed_cli_memory.py --lines 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from common import DATA, REPO, machine

OUT = REPO / "bench" / "out"


def make_corpus(lines: int) -> Path:
    path = OUT / f"embed_lines_{lines}.txt"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(1, 12))) for _ in range(50_000)]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, lines, 10_000):
            n = min(10_000, lines - start)
            lengths = rng.integers(0, 31, size=n)
            ids = np.minimum(rng.zipf(1.2, size=int(lengths.sum())), len(vocab)) - 1
            pos = 0
            for length in lengths:
                f.write(" ".join(vocab[i] for i in ids[pos : pos + length]) + "\n")
                pos += length
    tmp.replace(path)
    return path


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--weights", default=str(DATA / "allennlp_elmo_fixture"))
    parser.add_argument("--layer", default="all")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # as the child runs (OMP_NUM_THREADS), so machine() reports it
    torch.set_num_threads(args.threads)
    corpus = make_corpus(args.lines)
    output = OUT / f"embed_lines_{args.lines}.hdf5"
    output.unlink(missing_ok=True)
    # left by a killed run
    shutil.rmtree(output.with_name(output.name + ".partial"), ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "spacy_elmo",
        "embed",
        str(corpus),
        str(output),
        "--weights",
        args.weights,
        "--whitespace",
        "--layer",
        args.layer,
        "--batch-size",
        str(args.batch_size),
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    samples = []
    while child.poll() is None:
        samples.append((time.perf_counter() - start, rss_mb(child.pid)))
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    stderr = child.stderr.read()
    if child.returncode != 0:
        sys.exit(f"embed failed ({child.returncode}): {stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    at = {
        f"{int(q * 100)}%": round(next(mb for t, mb in samples if t >= q * seconds), 1)
        for q in (0.1, 0.5, 0.9)
    }
    with open(corpus, encoding="utf-8") as f:
        tokens = sum(len(line.split()) for line in f)
    print(
        json.dumps(
            {
                "lines": args.lines,
                "tokens": tokens,
                "seconds": round(seconds, 1),
                "peak_rss_mb": round(peak, 1),
                "rss_mb_at": at,
                "output_mb": round(output.stat().st_size / 2**20),
                "command": " ".join(command[1:]),
                "embed_says": stderr.strip().splitlines()[-1],
                "machine": machine(),
            }
        )
    )
    output.unlink()


if __name__ == "__main__":
    main()
