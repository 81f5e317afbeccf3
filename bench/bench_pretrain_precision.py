"""`pretrain` by `training.precision`: tokens/s and dev perplexity after equal training time, in one
run.

    python bench/bench_pretrain_precision.py --minutes 8 --threads 2 [--precisions float32,bfloat16]

The project's biLM config (the built-in default: the `pretrain` step of project.yml) on its text
(WikiText-2 train and the 1B Word Benchmark held-out shards 10-13, whitespace-tokenized), each
precision for the same training minutes (evaluation excluded) from the same seed, one after the
other in this process. Dev perplexity (float32 inference, the model's `warm` policy) on the first
`--dev-lines` lines of WikiText-2 valid. Prints one JSON line with the host's float32 and bfloat16
matrix-product rates beside; "bfloat16" on a CPU without native bfloat16 runs float32 (and says so),
so it is timed only where native.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch
from bench_matmul_precision import rates
from common import DATA, machine

from spacy_elmo.bilm.precision import native_bfloat16
from spacy_elmo.pretrain import load_config, train

TEXT = [
    ("wikitext2", "train.txt.gz"),
    ("lm1b_heldout", "news.en.heldout-00010-of-00050.gz"),
    ("lm1b_heldout", "news.en.heldout-00011-of-00050.gz"),
    ("lm1b_heldout", "news.en.heldout-00012-of-00050.gz"),
    ("lm1b_heldout", "news.en.heldout-00013-of-00050.gz"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="training minutes per precision")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("--dev-lines", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    native = native_bfloat16(torch.device("cpu"))
    precisions = [p for p in args.precisions.split(",") if p != "bfloat16" or native]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        dev = Path(tmp) / "dev.txt"
        with gzip.open(DATA / "wikitext2" / "valid.txt.gz", "rt", encoding="utf-8") as src:
            dev.write_text(
                "".join(line for _, line in zip(range(args.dev_lines), src)), encoding="utf-8"
            )
        for precision in precisions:
            config = load_config(
                None,
                {
                    "paths.train": [str(DATA / folder / name) for folder, name in TEXT],
                    "paths.dev": str(dev),
                    "corpus.tokenizer": "whitespace",
                    "training.max_minutes": args.minutes,
                    "training.max_epochs": None,
                    "training.eval_every": None,
                    "training.precision": precision,
                },
            )
            start = time.perf_counter()
            summary = train(config, Path(tmp) / precision, progress_bar=False, log=lambda m: None)
            results[precision] = {
                "steps": summary["steps"],
                "tokens": summary["tokens"],
                "tokens_per_s": round(summary["tokens_per_s"]),
                "dev_perplexity": summary["dev"],
                "wall_minutes": round((time.perf_counter() - start) / 60, 1),
            }
    speedup = {
        p: round(r["tokens_per_s"] / results["float32"]["tokens_per_s"], 2)
        for p, r in results.items()
    }
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "threads": args.threads,
                "results": results,
                "speedup_vs_float32": speedup,
                "native_bfloat16": native,
                "matmul_gflop_per_s": [
                    rates(m, k, n, 10) for m, k, n in [(640, 128, 4096), (32, 128, 2048)]
                ],
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
