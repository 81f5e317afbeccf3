"""Train the project's default English biLM on cased, punctuated text (issue 4), about an hour on CPU.

    python bench/train_default_english.py --minutes 60 --threads 2 --output bench/out/english

Training text: WikiText-2 train + the 1B Word Benchmark held-out shards 10-13 (already tokenized,
so whitespace-split); dev: WikiText-2 valid. The 1B Word shard 00000 (its standard test set) is
not used. Config: the built-in default (spacy_elmo/pretrain/default.cfg), seed 0; `--section.key
value` overrides may follow. PTB is not used: it is lowercased and has no punctuation.

Writes OUTPUT/model (load with `spacy_elmo.load_bilm`), OUTPUT/model/training.json (config, seed,
corpus sha256s, time, dev perplexity, weights sha256) and OUTPUT/README-snippet.md for the README.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from spacy_elmo.pretrain import load_config, train
from spacy_elmo.pretrain.cli import split_overrides

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
LM1B_SHARDS = [f"news.en.heldout-000{i}-of-00050.gz" for i in (10, 11, 12, 13)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--output", default=str(HERE / "out" / "english"))
    parser.add_argument("--minutes", type=float, default=60.0, help="training minutes (evaluation excluded)")
    parser.add_argument("--threads", type=int, default=2)
    rest, overrides = split_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    torch.set_num_threads(args.threads)
    from spacy.cli._util import parse_config_overrides

    data = Path(args.data)
    train_files = [str(data / "wikitext2" / "train.txt.gz"), *(str(data / "lm1b_heldout" / s) for s in LM1B_SHARDS)]
    values = {"paths.train": train_files, "paths.dev": str(data / "wikitext2" / "valid.txt.gz"),
              "corpus.tokenizer": "whitespace", "training.max_minutes": args.minutes,
              "training.max_epochs": None, "training.eval_every": None, "training.eval_every_minutes": 10,
              **parse_config_overrides(overrides)}
    config = load_config(None, values)
    start = time.perf_counter()
    summary = train(config, args.output)
    wall = (time.perf_counter() - start) / 60
    dev = summary["dev"]
    lines = [
        "| | |", "| --- | --- |",
        "| command | `python bench/train_default_english.py " + " ".join(sys.argv[1:]) + "` |",
        f"| machine | {torch.get_num_threads()} torch threads, {summary['processes']} process(es) |",
        f"| training text | {', '.join(Path(f).name + ' (sha256 ' + h[:16] + '…)' for f, h in summary['corpus'].items())} |",
        f"| seed | {summary['seed']} |",
        f"| sizes | {json.dumps(summary['options']['lstm'])}; char CNN {summary['options']['char_cnn']['filters']} |",
        f"| training | {summary['train_minutes']:.1f} min ({wall:.1f} min with evaluation), {summary['steps']} steps, "
        f"{summary['tokens']} tokens, {summary['tokens_per_s']:.0f} tokens/s |",
        f"| dev perplexity ({summary['dev_corpus']}, `{dev['policy']}`) | fwd {dev['forward']:.1f} / bwd {dev['backward']:.1f} / "
        f"mean {dev['mean']:.1f} |",
        f"| weights.pt sha256 | `{summary['weights_sha256']}` |",
    ]
    Path(args.output, "README-snippet.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
