"""One step of the packed LSTM at the original size, by part, in float32 and bfloat16 (where its
time goes).

    python bench/bench_lstm_step.py [--rows 256] [--threads 1]

The operations `ProjectedLSTMLayer.forward_packed` runs for one step of one direction, timed apart:
the hidden product added to the step's input product, the element-wise gates and cell update
(float32 in both), the cell projection; bfloat16 as `BFloat16Product` computes them (bfloat16
operands; the hidden product added to the bfloat16 gate inputs inside the kernel, the gates turned
into float32). Milliseconds per step, median of 5 repeats of 20. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from common import machine


def ms(f, n: int = 20) -> float:
    f()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        times.append(1000 * (time.perf_counter() - start) / n)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    R, P, D = args.rows, 512, 4096
    w_hidden, w_proj = torch.randn(P, 4 * D) * 0.02, torch.randn(D, P) * 0.02
    bf_hidden, bf_proj = w_hidden.bfloat16(), w_proj.bfloat16()
    h, c, xw, m = torch.randn(R, P), torch.randn(R, D), torch.randn(R, 4 * D), torch.rand(R, D)
    bf_xw = xw.bfloat16()

    def gates():
        g = xw.clone()
        g[:, : 3 * D].sigmoid_()
        g[:, 3 * D :].tanh_()
        cell = torch.mul(g[:, D : 2 * D], c).addcmul_(g[:, :D], g[:, 3 * D :]).clamp_(-3, 3)
        return torch.tanh(cell).mul_(g[:, 2 * D : 3 * D])

    parts = {
        "float32": {
            "hidden": ms(lambda: xw.clone().addmm_(h, w_hidden)),
            "gates": ms(gates),
            "projection": ms(lambda: torch.mm(m, w_proj).clamp_(-3, 3)),
        },
        "bfloat16": {
            "hidden": ms(lambda: torch.addmm(bf_xw, h.bfloat16(), bf_hidden).float()),
            "hidden_product_only": ms(lambda: torch.mm(h.bfloat16(), bf_hidden)),
            "gates": ms(gates),
            "projection": ms(lambda: torch.mm(m.bfloat16(), bf_proj).float().clamp_(-3, 3)),
        },
        "copy_of_the_input_product": ms(lambda: xw.clone()),
    }
    step = {
        p: round(sum(v for k, v in parts[p].items() if k != "hidden_product_only"), 2)
        for p in ("float32", "bfloat16")
    }
    print(
        json.dumps(
            {
                "rows": R,
                "threads": args.threads,
                "ms": parts,
                "step_ms": step,
                "step_speedup": round(step["float32"] / step["bfloat16"], 2),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
