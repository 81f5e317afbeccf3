"""Dev perplexity of models trained under each scheme ("sentences", "stream"), read under each
inference state policy ("zero", "warm", "carry"): bench/README.md's table that sets the default
policy of models trained by `pretrain` (spacy_elmo.pretrain.config.DEFAULT_POLICY).

Train one PTB model per scheme (bench/ptb.cfg, `--minutes` each), then evaluate:

    python bench/policy_table.py --minutes 15 --threads 2 --output bench/out/policy

or evaluate models already trained (any `pretrain` output/model directories):

    python bench/policy_table.py --models bench/out/ptb/model bench/out/ptb-stream/model --dev PATH

Writes OUTPUT/policy_table.md and OUTPUT/policy_table.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from spacy_elmo.pretrain import dev_nll, load_config, load_trained, perplexities, train
from spacy_elmo.pretrain.corpus import corpus_tokenizer, load_dev

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "ptb_lm"
POLICIES = ("zero", "warm", "carry")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", nargs="*", default=None, help="trained model dirs (skip training)"
    )
    parser.add_argument(
        "--dev", default=None, help="dev text (default: each model's own dev corpus)"
    )
    parser.add_argument("--minutes", type=float, default=15.0, help="training minutes per scheme")
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--config", default=str(HERE / "ptb.cfg"))
    parser.add_argument("--output", default=str(HERE / "out" / "policy"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--batch-size", type=int, default=64, help="rows per dev batch (also the carry layout)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.output)
    models = args.models
    if not models:
        models = []
        for scheme in ("sentences", "stream"):
            config = load_config(
                args.config,
                {
                    "paths.train": str(Path(args.data) / "ptb.train.txt.gz"),
                    "paths.dev": str(Path(args.data) / "ptb.valid.txt.gz"),
                    "training.scheme": scheme,
                    "training.max_minutes": args.minutes,
                    "training.eval_every_minutes": None,
                },
            )
            train(config, out / scheme)
            models.append(out / scheme / "model")
    rows = []
    for model_dir in models:
        bilm, head, vocab, config = load_trained(model_dir)
        c = config["corpus"]
        dev = load_dev(
            args.dev or c["dev"],
            corpus_tokenizer(c),
            c["max_sentence_length"],
            vocab,
            c["unk_token"],
        )
        saved_policy = json.loads((Path(model_dir) / "training.json").read_text())["policy"]
        row = {
            "model": str(model_dir),
            "scheme": config["training"]["scheme"],
            "saved_policy": saved_policy,
        }
        for policy in POLICIES:
            row[policy] = perplexities(
                dev_nll(bilm, head, dev, policy, args.batch_size), dev.n_predicted
            )
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    lines = [
        "| trained with | " + " | ".join(f"`{p}` (fwd / bwd / mean)" for p in POLICIES) + " |",
        "| --- |" + " --- |" * len(POLICIES),
    ]
    for row in rows:
        cells = [
            f"{row[p]['forward']:.1f} / {row[p]['backward']:.1f} / **{row[p]['mean']:.1f}**"
            for p in POLICIES
        ]
        lines.append(f"| {row['scheme']} | " + " | ".join(cells) + " |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "policy_table.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
