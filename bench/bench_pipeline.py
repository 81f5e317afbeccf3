"""Throughput of `nlp.pipe` with `elmo` as the only component vs `bilm.embed` on the same text.

UD English-EWT test sentences (one Doc per sentence), random weights at a published size,
2 torch threads. The component's feature cache is off, so repeated sentences are not free.
Target: the pipeline reaches at least 90% of embed's tokens/s.

usage: python bench/bench_pipeline.py [--size small] [--limit N] [--threads 2] [--data
../shared/data]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import REPO, read_conllu_sentences, weights_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="small")
    parser.add_argument(
        "--limit", type=int, default=0, help="first N test sentences (0: all 2,077)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="biLM rows per compute batch")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    args = parser.parse_args()

    import spacy
    import torch
    from spacy.tokens import Doc

    from spacy_elmo import load_bilm

    torch.set_num_threads(args.threads)
    test_file = Path(args.data) / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz"
    sentences = read_conllu_sentences(test_file)[: args.limit or None]
    n_tokens = sum(map(len, sentences))
    path = weights_dir(args.size)

    bilm = load_bilm(path)
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe(
        "elmo",
        config={"weights": str(path), "cache_mb": 0, "model": {"batch_size": args.batch_size}},
    )
    nlp.initialize()
    docs = [Doc(nlp.vocab, words=w) for w in sentences]
    bilm.embed(sentences[:64], batch_size=args.batch_size)  # warm up both (threads, allocator)
    list(nlp.pipe(docs[:64]))

    bilm.token_cache.clear()
    t0 = time.perf_counter()
    bilm.embed(sentences, batch_size=args.batch_size)
    t_embed = time.perf_counter() - t0

    elmo.bilm.token_cache.clear()
    docs = [Doc(nlp.vocab, words=w) for w in sentences]
    t0 = time.perf_counter()
    for _ in nlp.pipe(docs):
        pass
    t_pipe = time.perf_counter() - t0

    cmd = " ".join(["python", "bench/bench_pipeline.py", *sys.argv[1:]])
    print(f"command: {cmd}")
    print(
        f"{len(sentences)} sentences, {n_tokens} tokens, size {args.size}, {args.threads} threads"
    )
    print(f"bilm.embed : {t_embed:7.2f} s  {n_tokens / t_embed:8.0f} tokens/s")
    print(f"nlp.pipe   : {t_pipe:7.2f} s  {n_tokens / t_pipe:8.0f} tokens/s")
    print(f"ratio      : {t_embed / t_pipe:.3f} (target >= 0.90)")


if __name__ == "__main__":
    main()
