"""Peak memory of `embed_iter` over a long stream: it must stay flat (issue 2).

Streams `--sentences` sentences (UD English-EWT train, cycled) through `embed_iter` at the
given size, consuming each output, and samples the resident set size every 500 sentences.
Prints a JSON line: RSS after the first 1,000 sentences, the peak, and the growth between them.

    python bench/bench_stream_memory.py --size small --sentences 10000
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch
from common import DATA, read_conllu_sentences, weights_dir


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="small")
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from spacy_elmo import load_bilm

    source = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-train.conllu.gz")
    bilm = load_bilm(weights_dir(args.size))
    stream = itertools.islice(itertools.cycle(source), args.sentences)
    samples = []
    tokens = 0
    start = time.perf_counter()
    for i, layers in enumerate(bilm.embed_iter(stream, batch_size=args.batch_size), 1):
        tokens += layers.shape[1]
        if i % 500 == 0:
            samples.append((i, round(rss_mb(), 1)))
    seconds = time.perf_counter() - start
    after_1k = next(mb for i, mb in samples if i >= 1000)
    peak = max(mb for _, mb in samples)
    print(
        json.dumps(
            {
                "size": args.size,
                "sentences": args.sentences,
                "tokens": tokens,
                "seconds": round(seconds, 1),
                "rss_mb_after_1000": after_1k,
                "rss_mb_peak": peak,
                "growth_mb": round(peak - after_1k, 1),
                "token_cache_rows": len(bilm.token_cache.slots),
                "samples": samples,
            }
        )
    )


if __name__ == "__main__":
    main()
