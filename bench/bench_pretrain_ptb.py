"""PTB benchmark of `pretrain` (issue 4): mean forward/backward validation perplexity after 30
minutes of training on 2 CPU cores (evaluation time not counted), the curve, tokens/s and the
fraction of the machine's arithmetic rate.

    python bench/bench_pretrain_ptb.py --minutes 30 --threads 2 --output bench/out/ptb

Config: bench/ptb.cfg (pass `--section.key value` overrides after the options, e.g.
`--training.scheme stream`). Protocol: the full PTB validation set, each sentence read alone
between <S> and </S>, full softmax; per direction exp(mean NLL over every predicted token: the
words plus </S> forward, plus <S> backward); the arithmetic mean of the two. The final figure is
measured under the model's state policy and, for the record, under all three.

Writes OUTPUT/curve.csv (perplexity against training minutes), OUTPUT/result.json and the
training outputs (OUTPUT/model, metrics.jsonl, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import List, Tuple

import torch
from common import machine, matmul_gflops, read_metrics, train_flops_per_token, write_curve

from spacy_elmo.cli.pretrain import parse_overrides, split_overrides
from spacy_elmo.pretrain import dev_nll, load_config, load_trained, perplexities, train
from spacy_elmo.pretrain.corpus import corpus_tokenizer, load_dev

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "ptb_lm"


def parse_args() -> Tuple[argparse.Namespace, List[str]]:
    """The options, and the `--section.key value` config overrides that follow them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="directory with ptb.{train,valid}.txt.gz")
    parser.add_argument("--output", default=str(HERE / "out" / "ptb"))
    parser.add_argument("--config", default=str(HERE / "ptb.cfg"))
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="training minutes (evaluation excluded)"
    )
    parser.add_argument("--eval-every-minutes", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--no-progress", action="store_true", help="log lines instead of a progress bar"
    )
    rest, overrides = split_overrides(sys.argv[1:])
    return parser.parse_args(rest), overrides


def main() -> None:
    args, overrides = parse_args()
    torch.set_num_threads(args.threads)
    data, out = Path(args.data), Path(args.output)
    values = {
        "paths.train": str(data / "ptb.train.txt.gz"),
        "paths.dev": str(data / "ptb.valid.txt.gz"),
        "training.max_minutes": args.minutes,
        "training.eval_every_minutes": args.eval_every_minutes,
        **parse_overrides(overrides),
    }
    config = load_config(args.config, values)
    peak = matmul_gflops()
    wall = time.perf_counter()
    summary = train(config, out, device=args.device, progress_bar=not args.no_progress)
    wall = time.perf_counter() - wall

    metrics = read_metrics(out / "metrics.jsonl")
    write_curve(metrics, out / "curve.csv")
    bilm, head, vocab, _ = load_trained(out / "model")
    c = config["corpus"]
    dev = load_dev(c["dev"], corpus_tokenizer(c), c["max_sentence_length"], vocab, c["unk_token"])
    by_policy = {
        p: perplexities(dev_nll(bilm, head, dev, p, 128), dev.n_predicted)
        for p in ("zero", "warm", "carry")
    }
    flops = train_flops_per_token(
        bilm.options, len(vocab), config["softmax"]["type"], config["softmax"]["n_samples"]
    )
    rate = summary["tokens_per_s"] * flops / 1e9
    result = {
        "machine": machine(),
        "matmul_gflops": peak,
        "config": str(args.config),
        "overrides": overrides,
        "train_minutes": summary["train_minutes"],
        "wall_minutes_with_eval": wall / 60,
        "steps": summary["steps"],
        "tokens": summary["tokens"],
        "epochs_started": summary["epochs_started"],
        "tokens_per_s": summary["tokens_per_s"],
        "train_gflop_per_token": flops / 1e9,
        "achieved_gflops": rate,
        "fraction_of_matmul_rate": rate / peak,
        "policy": summary["policy"],
        "dev": summary["dev"],
        "dev_by_policy": by_policy,
        "target_mean_ppl": 150,
        "met": summary["dev"]["mean"] <= 150,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
