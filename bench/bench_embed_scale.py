"""`python -m spacy_elmo embed` at scale (issue 16's benchmark): the same lines embedded in one
process, in shards (`--shards 4`), and by Ray with 1 and 2 workers of 1 thread; then the output's
size and speed for float32/float16 and each layer choice.

Every run is the command a user types, in a fresh process, timed from start to exit (wall, which
counts loading the biLM and starting Ray), as the command reports it (`embed` rate: from the
first line read, Ray's start included), and in CPU seconds (the command and every process it
waited for: what a run costs whatever else the host runs; local runs only). Input: the first
`--lines` lines of the One Billion Word held-out shards in `../shared/data/lm1b_heldout`
(tokenized news, `--whitespace`), written under bench/out/. Weights: random, at a published size.
Prints one JSON line per run, a summary, then `expectations`: what N machines of C cores give,
from the measured cost per CPU second.

    python bench/bench_embed_scale.py --lines 20000 --variant-lines 2000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import DATA, REPO, machine, matmul_gflops, weights_dir

SHARDS = ["news.en.heldout-00000-of-00050.gz"] + [
    f"news.en.heldout-000{i}-of-00050.gz" for i in (10, 11, 12, 13)
]
REPORTED = re.compile(r"(\d+) tokens in ([\d.]+) s")


def write_input(path: Path, lines: int) -> int:
    """The first `lines` lines of the held-out shards, in order; returns their token count."""
    tokens, written = 0, 0
    with open(path, "w", encoding="utf-8") as out:
        for name in SHARDS:
            with gzip.open(DATA / "lm1b_heldout" / name, "rt", encoding="utf-8") as f:
                for line in f:
                    if written == lines:
                        return tokens
                    out.write(line)
                    tokens += len(line.split())
                    written += 1
    if written < lines:
        sys.exit(f"only {written} lines in {DATA / 'lm1b_heldout'}")
    return tokens


def output_bytes(path: Path) -> int:
    return (
        sum(p.stat().st_size for p in path.glob("*.hdf5")) if path.is_dir() else path.stat().st_size
    )


def run(name: str, text: Path, out: Path, weights: Path, *extra: str) -> dict:
    """One `embed` command in a fresh process: wall seconds, the command's own figures, output
    bytes."""
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    command = [
        sys.executable,
        "-m",
        "spacy_elmo",
        "embed",
        str(text),
        str(out),
        "-w",
        str(weights),
        "--whitespace",
        "--no-progress",
        *extra,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the command and the processes it waited for: what the run costs, whatever else
    # the host runs meanwhile. Not for Ray runs: Ray's workers are not waited for, their time is
    # lost
    cpu = (
        None
        if "ray" in extra
        else after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    )
    if done.returncode != 0:
        sys.exit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    tokens, seconds = REPORTED.search(done.stderr).groups()
    tokens, seconds = int(tokens), float(seconds)
    size = output_bytes(out)
    result = {
        "run": name,
        "command": "python -m spacy_elmo " + " ".join(command[3:]).replace(str(REPO) + "/", ""),
        "tokens": tokens,
        "wall_s": round(wall, 1),
        "wall_tokens_per_s": round(tokens / wall),
        "embed_s": seconds,
        "embed_tokens_per_s": round(tokens / seconds),
        "cpu_s": cpu and round(cpu, 1),
        "tokens_per_cpu_s": cpu and round(tokens / cpu),
        "output_bytes": size,
        "bytes_per_token": round(size / tokens, 1),
    }
    print(json.dumps(result), flush=True)
    return result


def expectations(per_core: float, overhead_s: float, corpus: float = 1e9) -> list[dict]:
    """What N machines of C cores give, one Ray worker of 1 thread per core: `per_core` tokens per
    CPU second each (the cost measured here, on cores with nothing else to do), plus `overhead_s`
    (starting Ray and the actors, each loading the biLM) once; enough shards that every worker
    gets the same number (a multiple of N x C), and storage that keeps up."""
    rows = []
    for machines in (1, 4, 16, 64):
        for cores in (8, 32):
            rate = machines * cores * per_core
            rows.append(
                {
                    "machines": machines,
                    "cores": cores,
                    "tokens_per_s": round(rate),
                    "hours_per_1e9_tokens": round((overhead_s + corpus / rate) / 3600, 2),
                }
            )
    return rows


def engine_runs(text: Path, work: Path, weights: Path, flush: tuple[str, str]) -> list[dict]:
    """`embed` of the whole input by one process, by 4 shards, and by Ray with 1 and 2 workers."""
    runs = [
        run(
            "single process, 1 thread",
            text,
            work / "single.hdf5",
            weights,
            "--threads",
            "1",
            *flush,
        ),
        run(
            "--shards 4, 1 thread",
            text,
            work / "shards",
            weights,
            "--threads",
            "1",
            "--shards",
            "4",
            *flush,
        ),
    ]
    for workers in (1, 2):
        runs.append(
            run(
                f"ray, {workers} worker(s) x 1 thread",
                text,
                work / f"ray{workers}",
                weights,
                "--shards",
                "4",
                "--engine",
                "ray",
                "--workers",
                str(workers),
                "--threads-per-worker",
                "1",
                *flush,
            )
        )
    return runs


def variant_runs(head: Path, work: Path, weights: Path, flush: tuple[str, str]) -> list[dict]:
    """`embed` of the first lines in each output dtype and layer choice."""
    return [
        run(
            f"{dtype}, --layer {layer}",
            head,
            work / f"{dtype}_{layer}.hdf5",
            weights,
            "--threads",
            "1",
            "--dtype",
            dtype,
            "--layer",
            layer,
            *flush,
        )
        for dtype in ("float32", "float16")
        for layer in ("all", "top", "average")
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument(
        "--variant-lines", type=int, default=2_000, help="lines for the dtype x layer runs"
    )
    parser.add_argument("--size", choices=["small", "medium", "original"], default="small")
    parser.add_argument(
        "--flush-every", type=int, default=1_000, help="lines per block (a shard is whole blocks)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    work = REPO / "bench" / "out" / "scale"
    work.mkdir(parents=True, exist_ok=True)
    weights = weights_dir(args.size)
    text, head = work / f"lm1b_{args.lines}.txt", work / f"lm1b_{args.variant_lines}.txt"
    n_tokens = write_input(text, args.lines)
    write_input(head, args.variant_lines)
    torch.set_num_threads(1)
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "lines": args.lines,
        "tokens": n_tokens,
        "size": args.size,
        **machine(),
        "matmul_gflop_per_s_1_thread": round(matmul_gflops(), 1),
    }
    print(json.dumps(info), flush=True)

    flush = ("--flush-every", str(args.flush_every))
    runs = engine_runs(text, work, weights, flush)
    variants = variant_runs(head, work, weights, flush)

    single, shards, ray1, ray2 = runs
    summary = {
        "per_core_tokens_per_s": single["embed_tokens_per_s"],
        "tokens_per_cpu_s": single["tokens_per_cpu_s"],
        # what starting Ray and its actors (each loading the biLM) adds to the same 4 shards, in
        # seconds
        "ray_overhead_s": round(ray1["wall_s"] - shards["wall_s"], 1),
        "shards_overhead_s": round(shards["wall_s"] - single["wall_s"], 1),
        "ray_2_workers_speedup": round(ray2["embed_tokens_per_s"] / ray1["embed_tokens_per_s"], 2),
        "bytes_per_token": {v["run"]: v["bytes_per_token"] for v in variants},
        "tokens_per_s_by_variant": {v["run"]: v["embed_tokens_per_s"] for v in variants},
    }
    print(json.dumps(summary), flush=True)
    for row in expectations(single["tokens_per_cpu_s"], max(summary["ray_overhead_s"], 0)):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
