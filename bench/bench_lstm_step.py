"""One step of the packed LSTM at the original size, by part, in float32, int8 and bfloat16 (where
its time goes).

    python bench/bench_lstm_step.py [--rows 256] [--threads 1] [--fused | --element-wise-only]

The operations `ProjectedLSTMLayer.forward_packed` runs for one step of one direction, timed apart:
the hidden product added to the step's input product, the element-wise gates and cell update
(float32 in every precision), the cell projection; bfloat16 as `BFloat16Product` computes them
(bfloat16 operands; the hidden product added to the bfloat16 gate inputs inside the kernel, the
gates turned into float32); int8 as `Int8Product` computes them (the hidden state put on its fixed
grid, the int8 product, its float32 result added to the gate inputs; the cell projection written
into the output). bfloat16 is timed only where the CPU has it natively (emulated, it takes minutes).
Milliseconds per step, median of 5 repeats of 20. Prints one JSON line; `bench_profile.py` gives
the same parts over a whole pass.

`--fused` also times the element-wise step fused by `torch.compile` (needs a C++ compiler; the
first call compiles) beside the eager one, and its floor: one sigmoid over as many elements as the
step's non-linearities take (3 gates, tanh of j and of c, each tanh as a sigmoid), to show what
fusing can save on this host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from common import machine, matmul_gflops

from spacy_elmo.bilm.int8 import Int8Product
from spacy_elmo.bilm.lstm import ProjectedLSTMLayer
from spacy_elmo.bilm.precision import native_bfloat16


def ms(f, n: int = 20) -> float:
    f()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        times.append(1000 * (time.perf_counter() - start) / n)
    return round(statistics.median(times), 2)


def fused_step(layer: ProjectedLSTMLayer, xw: torch.Tensor, c: torch.Tensor) -> dict:
    """The element-wise step eager, fused by `torch.compile`, and the sigmoid floor, in ms."""
    D, clip = layer.dim, layer.cell_clip

    def tanh(x):
        return torch.sigmoid(2 * x) * 2 - 1

    def cell(gates, c_prev):
        i, f, o, j = gates.chunk(4, dim=-1)
        c = (torch.sigmoid(f) * c_prev + torch.sigmoid(i) * tanh(j)).clamp(-clip, clip)
        return torch.sigmoid(o) * tanh(c), c

    fused = torch.compile(cell, dynamic=True)
    start = time.perf_counter()
    fused(xw.clone(), c)
    compile_s = time.perf_counter() - start
    eager_m, eager_c = layer.cell(xw.clone(), c, lambda m: m, in_place=True)
    fused_m, fused_c = fused(xw.clone(), c)
    floor = torch.randn(xw.shape[0], 5 * D)
    return {
        "eager": ms(lambda: layer.cell(xw.clone(), c, lambda m: m, in_place=True)),
        "fused": ms(lambda: fused(xw.clone(), c)),
        "sigmoid_floor": ms(lambda: torch.sigmoid(floor)),
        "compile_s": round(compile_s, 1),
        "max_difference": max(
            (eager_m - fused_m).abs().max().item(), (eager_c - fused_c).abs().max().item()
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fused", action="store_true", help="also time a torch.compile'd step")
    parser.add_argument(
        "--element-wise-only",
        action="store_true",
        help="time the layer's own element-wise step alone (with the copy of its input, timed "
        "apart): for comparing checkouts (PYTHONPATH) and kernels (ATEN_CPU_CAPABILITY)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    R, P, D = args.rows, 512, 4096
    w_hidden, w_proj = torch.randn(P, 4 * D) * 0.02, torch.randn(D, P) * 0.02
    bf_hidden, bf_proj = w_hidden.bfloat16(), w_proj.bfloat16()
    h, c, xw, m = torch.randn(R, P), torch.randn(R, D), torch.randn(R, 4 * D), torch.rand(R, D)
    bf_xw = xw.bfloat16()

    layer = ProjectedLSTMLayer(P, D, P, cell_clip=3.0, proj_clip=3.0)

    def gates():
        """The layer's own element-wise step (its projection left out: a view)."""
        return layer.cell(xw.clone(), c, lambda m: m[:, :P], in_place=True)

    if args.element_wise_only:
        step = {"element_wise": ms(gates), "copy_of_the_input_product": ms(lambda: xw.clone())}
        kernels = torch.backends.cpu.get_cpu_capability()
        rate = matmul_gflops()
        print(
            json.dumps({"rows": R, "ms": step, "aten_kernels": kernels, "matmul_gflop_per_s": rate})
        )
        return
    int8_hidden = Int8Product(w_hidden, bound=3.0)
    int8_proj = Int8Product(w_proj, bound=1.0)
    out = torch.empty(R, P)
    parts = {
        "int8": {
            "hidden": ms(lambda: int8_hidden.gates(xw.clone(), h)),
            "gates": ms(gates),
            "projection": ms(lambda: int8_proj.into(out, m).clamp_(-3, 3)),
        },
        "float32": {
            "hidden": ms(lambda: xw.clone().addmm_(h, w_hidden)),
            "gates": ms(gates),
            "projection": ms(lambda: torch.mm(m, w_proj).clamp_(-3, 3)),
        },
        "copy_of_the_input_product": ms(lambda: xw.clone()),
    }
    if native_bfloat16(torch.device("cpu")):
        parts["bfloat16"] = {
            "hidden": ms(lambda: torch.addmm(bf_xw, h.bfloat16(), bf_hidden).float()),
            "hidden_product_only": ms(lambda: torch.mm(h.bfloat16(), bf_hidden)),
            "gates": ms(gates),
            "projection": ms(lambda: torch.mm(m.bfloat16(), bf_proj).float().clamp_(-3, 3)),
        }
    if args.fused:
        parts["element_wise"] = fused_step(layer, xw, c)
    step = {
        p: round(sum(v for k, v in parts[p].items() if k != "hidden_product_only"), 2)
        for p in ("float32", "int8", "bfloat16")
        if p in parts
    }
    print(
        json.dumps(
            {
                "rows": R,
                "threads": args.threads,
                "ms": parts,
                "step_ms": step,
                "step_speedup": {p: round(step["float32"] / t, 2) for p, t in step.items()},
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
