"""The matrix products of the biLM's LSTM in float32, int8 and bfloat16, on this host: GFLOP/s per
shape.

    python bench/bench_matmul_precision.py [--threads 2] [--repeats 20]

Shapes (rows x in x out) are the LSTM's: a step's hidden product (rows x P x 4D), a chunk of input
projections, the cell-to-projection product (rows x D x P), at the original model's sizes (P 512, D
4096). int8 is the library's own product (`spacy_elmo.bilm.int8.Int8Product`: weights per output
column, inputs on a fixed grid) on this CPU's kernel, named in `int8_kernel` (before 2026-11-27 the
figure was torch's dynamic quantization, `int8_dynamic`, fbgemm's); bfloat16 a plain product of
bfloat16 tensors, which CPUs without native bfloat16 emulate. Prints one JSON record.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import machine

from spacy_elmo.bilm.int8 import Int8Product

SHAPES = [(64, 512, 16384), (256, 512, 16384), (2048, 512, 16384), (256, 4096, 512)]


def gflops(run, flop: int, repeats: int) -> float:
    run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return flop * repeats / (time.perf_counter() - start) / 1e9


def rates(m: int, k: int, n: int, repeats: int) -> dict:
    """GFLOP/s of an `(m, k) x (k, n)` product in each precision."""
    x, w, b = torch.randn(m, k).clamp(-3, 3), torch.randn(n, k) * 0.05, torch.zeros(n)
    int8 = Int8Product(w.t(), b, bound=3.0)
    xb, wb = x.bfloat16(), w.bfloat16()
    flop = 2 * m * k * n
    return {
        "shape": f"{m}x{k}x{n}",
        "float32": round(gflops(lambda: torch.nn.functional.linear(x, w, b), flop, repeats)),
        "int8": round(gflops(lambda: int8(x), flop, repeats)),
        "int8_kernel": int8.kernel,
        "bfloat16": round(
            gflops(lambda: torch.nn.functional.linear(xb, wb), flop, max(1, repeats // 5)), 1
        ),
    }


def cuda_rates(m: int, k: int, n: int, repeats: int) -> dict:
    """GFLOP/s of an `(m, k) x (k, n)` product on the current CUDA device, float32 (TF32 as torch's
    matmul setting allows) and bfloat16."""

    def timed(x, w) -> float:
        torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9

    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda") * 0.05
    return {
        "shape": f"{m}x{k}x{n}",
        "float32": round(timed(x, w)),
        "bfloat16": round(timed(x.bfloat16(), w.bfloat16())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [rates(m, k, n, args.repeats) for m, k, n in SHAPES]
    print(
        json.dumps(
            {
                "gflop_per_s": rows,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "threads": args.threads,
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
