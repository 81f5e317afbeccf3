"""Epoch time of a UD tagger with task-specific ELMo features vs the same tagger without them.

Both pipelines come from project/configs (tagger_elmo.cfg / tagger_base.cfg, identical apart from
the features). The first epoch with ELMo embeds the corpus (into the component's feature cache);
later epochs reuse it, so they are what is compared. Target: at most 1.5x at the small size.
At the original size (1024-wide layers) `--projection 128` maps the mixed features down first.

usage: python bench/bench_tagger_epoch.py [--size small|original] [--limit N] [--epochs 3]
       [--projection P] [--threads 2] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from common import REPO, read_conllu, weights_dir

WIDTHS = {"small": 256, "medium": 512, "original": 1024}


def trainer(config_name: str, sentences, overrides: dict):
    """A function that trains one epoch of the pipeline from `config_name` and returns its
    seconds."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example
    from thinc.api import Config

    config = Config().from_disk(REPO / "project" / "configs" / config_name, interpolate=False)
    config["system"]["gpu_allocator"] = None
    for dotted, value in overrides.items():
        *path, key = dotted.split(".")
        node = config
        for part in path:
            node = node[part]
        node[key] = value
    spacy.util.fix_random_seed(0)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    annotates = list(nlp.config["training"]["annotating_components"])

    def examples():  # fresh Docs each epoch, like `spacy train`
        return [
            Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, tags=t))
            for w, _, t in sentences
        ]

    optimizer = nlp.initialize(examples)
    rng = random.Random(0)

    def epoch() -> float:
        batch = examples()
        rng.shuffle(batch)
        t0 = time.perf_counter()
        for chunk in spacy.util.minibatch(batch, 32):
            nlp.update(chunk, sgd=optimizer, annotates=annotates)
        return time.perf_counter() - t0

    return epoch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="small", choices=sorted(WIDTHS))
    parser.add_argument(
        "--limit", type=int, default=1000, help="first N UD train sentences (0: all)"
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--projection", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    sentences = list(
        read_conllu(
            Path(args.data) / "ud_english_ewt" / "en_ewt-ud-train.conllu.gz", args.limit or None
        )
    )
    n_tokens = sum(len(s.words) for s in sentences)
    run_base = trainer("tagger_base.cfg", sentences, {})
    elmo_overrides = {
        "paths.elmo": str(weights_dir(args.size)),
        "components.tok2vec.model.embed.elmo.width": WIDTHS[args.size],
        "components.tok2vec.model.embed.elmo.projection": args.projection or None,
    }
    run_elmo = trainer("tagger_elmo.cfg", sentences, elmo_overrides)
    base, elmo = [], []
    for _ in range(args.epochs):  # interleaved, so that load on a shared machine hits both alike
        base.append(run_base())
        elmo.append(run_elmo())
    later_base = sum(base[1:]) / len(base[1:])
    later_elmo = sum(elmo[1:]) / len(elmo[1:])
    print(f"command: python bench/bench_tagger_epoch.py {' '.join(sys.argv[1:])}")
    print(
        f"{len(sentences)} sentences, {n_tokens} tokens, size {args.size}, projection "
        f"{args.projection or None}, "
        f"{args.threads} threads"
    )
    print("epoch times (s), without ELMo: " + ", ".join(f"{t:.2f}" for t in base))
    print("epoch times (s), with ELMo   : " + ", ".join(f"{t:.2f}" for t in elmo))
    print(
        f"after the first epoch: {later_elmo:.2f} s vs {later_base:.2f} s = "
        f"{later_elmo / later_base:.2f}x "
        f"(target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
