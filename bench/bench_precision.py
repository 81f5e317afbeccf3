"""`bilm.embed` throughput by precision, in one run, with the host's matmul rates and the error per
layer.

    python bench/bench_precision.py --size original [--precisions float32,int8,bfloat16,auto]
    [--rounds 2] [--device cuda] [--allocator default|kept]
                                    [--trained FIXTURE_DIR project/training/full/bilm/model]
                                    [--skip-speed]

Each round loads the biLM afresh per precision (cold token cache) and times one pass of `embed` over
the UD English-EWT test sentences; precisions alternate within a round, so a host that slows down
affects them alike. Random weights at a published size (`../shared/tools/make_elmo_weights.py`) give
the speed; their recurrence is chaotic, so accuracy is measured on trained weights instead
(`--trained`: AllenNLP's fixture by default, and e.g. the project's biLM): relative error per layer,
`||low - fp32|| / ||fp32||`, over the first 500 UD English-EWT dev sentences. "bfloat16" on a CPU
without native bfloat16 runs float32 (and says so), so it is timed only where native. `--device
cuda` times float32, bfloat16 and auto on the GPU (int8 is a CPU path) and measures each one's error
against the CPU's float32. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from bench_matmul_precision import cuda_rates, rates
from common import DATA, machine, read_conllu_sentences, weights_dir

STUDY_BILM = "project/training/full/bilm/model"


def relative_errors(low, ref) -> list:
    return [
        round(
            float(
                np.linalg.norm(
                    np.concatenate([x[k] for x in low]) - np.concatenate([x[k] for x in ref])
                )
                / np.linalg.norm(np.concatenate([x[k] for x in ref]))
            ),
            5,
        )
        for k in range(ref[0].shape[0])
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="original")
    parser.add_argument(
        "--precisions", help="default: float32,int8,bfloat16,auto (cuda: float32,bfloat16,auto)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--trained",
        nargs="+",
        default=[str(DATA / "allennlp_elmo_fixture")],
        help="trained biLMs to measure the error on (e.g. also project/training/full/bilm/model)",
    )
    parser.add_argument("--skip-speed", action="store_true", help="measure the error only")
    parser.add_argument(
        "--allocator",
        choices=["default", "kept"],
        default="default",
        help="kept: glibc's allocator set as `python -m spacy_elmo embed` sets it "
        "(spacy_elmo.bilm.allocator); default: as a library user's process has it",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # before anything is measured: one line, not a traceback minutes later
    for trained in args.trained:
        if not Path(trained).exists():
            study = (
                (
                    f": {STUDY_BILM} is the study's own biLM, written by its pretrain step "
                    f"(`python -m spacy "
                    "project run all`, hours); leave it out to measure the fixture alone"
                )
                if STUDY_BILM in trained
                else ""
            )
            sys.exit(f"bench_precision.py: --trained {trained}: not found{study}")
    torch.set_num_threads(args.threads)
    from spacy_elmo import ElmoConfigError, load_bilm
    from spacy_elmo.bilm.allocator import keep_freed_memory
    from spacy_elmo.bilm.device import check_device
    from spacy_elmo.bilm.precision import native_bfloat16

    try:
        device = check_device(args.device)
    except ElmoConfigError as e:
        sys.exit(f"bench_precision.py: --device: {e}")
    if args.allocator == "kept" and not keep_freed_memory():
        sys.exit("bench_precision.py: --allocator kept: the C library here is not glibc")
    native = native_bfloat16(device)
    default = "float32,int8,bfloat16,auto" if device.type == "cpu" else "float32,bfloat16,auto"
    precisions = [p for p in (args.precisions or default).split(",") if p != "bfloat16" or native]
    sentences = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz")
    n_tokens = sum(map(len, sentences))
    speeds: dict = {p: [] for p in precisions}
    resolved = {}
    for _ in range(0 if args.skip_speed else args.rounds):
        for p in precisions:
            bilm = load_bilm(weights_dir(args.size), precision=p, device=device)
            resolved[p] = bilm.precision
            start = time.perf_counter()
            bilm.embed(sentences, batch_size=args.batch_size)
            speeds[p].append(round(n_tokens / (time.perf_counter() - start)))
    dev = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-dev.conllu.gz")[:500]
    errors: dict = {}
    for trained in args.trained:
        reference = load_bilm(trained).embed(dev)
        for p in ("int8", "bfloat16") if device.type == "cpu" else ("float32", "bfloat16"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bilm = load_bilm(trained, precision=p, device=device)
            if bilm.precision == p:
                errors.setdefault(trained, {})[p] = relative_errors(bilm.embed(dev), reference)
    best = {p: max(v) for p, v in speeds.items() if v}
    result = {
        "size": args.size,
        "threads": args.threads,
        "allocator": args.allocator,
        "tokens": n_tokens,
        "tokens_per_s": speeds,
        "resolved": resolved,
        "speedup_vs_float32": {p: round(best[p] / best["float32"], 2) for p in best},
        "relative_error_per_layer": errors,
        "device": str(device),
        "native_bfloat16": native,
        "matmul_gflop_per_s": [
            (rates if device.type == "cpu" else cuda_rates)(m, k, n, 10)
            for m, k, n in [(256, 512, 16384), (256, 4096, 512)]
        ],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": machine(),
    }
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
