"""`python -m spacy_elmo pretrain OUTPUT_DIR [options] [--section.key value ...]`."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Tuple

from .config import PretrainError, load_config

USAGE = """python -m spacy_elmo pretrain OUTPUT_DIR [--config CONFIG.cfg] [--train PATH] [--dev PATH]
       [--lang LANG | --whitespace] [--init-from PATH_OR_NAME] [--resume] [--export-hdf5] [--device cpu|cuda]
       [--threads N] [--no-progress] [--show-config] [--section.key VALUE ...]"""

EPILOG = """Config overrides in spaCy's style follow the options, e.g. `--training.max_steps 100
--vocab.size 10000 --softmax.type full`. Without --config the built-in config (a small English model)
is used. Data-parallel training: `torchrun --nproc_per_node N -m spacy_elmo pretrain ...` (gloo on CPU);
each process reads its own rows of the corpus and gradients are summed over all of them.

Output: OUTPUT_DIR/model (loadable by spacy_elmo.load_bilm and the `elmo` component; with the softmax,
vocabulary and training.json), OUTPUT_DIR/metrics.jsonl (dev perplexity curve), OUTPUT_DIR/checkpoint
(for --resume), OUTPUT_DIR/model-hdf5 (with --export-hdf5: bilm-tf options.json + weights.hdf5)."""


def split_overrides(extra: List[str]) -> Tuple[List[str], List[str]]:
    """Separate dotted `--section.key [value]` / `--section.key=value` arguments from the others."""
    rest: List[str] = []
    overrides: List[str] = []
    i = 0
    while i < len(extra):
        arg = extra[i]
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if "." in name:
            overrides.append(arg)
            if "=" not in arg and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                overrides.append(extra[i + 1])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return rest, overrides


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spacy_elmo pretrain", usage=USAGE, epilog=EPILOG,
                                description="Train an ELMo biLM from raw text, one sentence per line.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", nargs="?", help="output directory")
    p.add_argument("--config", default=None, help="a .cfg file (default: the built-in small English config)")
    p.add_argument("--train", nargs="+", default=None,
                   help="training text: files or directories (sets paths.train)")
    p.add_argument("--dev", default=None, help="dev text for perplexity (sets paths.dev)")
    p.add_argument("--lang", default=None, help="tokenize with this spaCy language's tokenizer")
    p.add_argument("--whitespace", action="store_true", help="the text is already tokenized: split on spaces")
    p.add_argument("--init-from", default=None,
                   help="continue training this biLM: own format, bilm-tf hdf5, or a published name in the cache")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint")
    p.add_argument("--export-hdf5", action="store_true", help="also write the bilm-tf hdf5 layout")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    return p


def resolve_config(args: argparse.Namespace, overrides: List[str]):
    """The config file plus the CLI's shortcuts (--train, --dev, --lang, ...) plus dotted overrides."""
    from spacy.cli._util import parse_config_overrides

    try:
        values: Dict[str, Any] = parse_config_overrides(overrides)
    except SystemExit:
        raise PretrainError(f"cannot parse the config overrides {' '.join(overrides)}") from None
    if args.train is not None:
        values.setdefault("paths.train", args.train[0] if len(args.train) == 1 else args.train)
    if args.dev is not None:
        values.setdefault("paths.dev", args.dev)
    if args.lang is not None:
        values.setdefault("corpus.tokenizer", "spacy")
        values.setdefault("corpus.lang", args.lang)
    if args.whitespace:
        values.setdefault("corpus.tokenizer", "whitespace")
    if args.export_hdf5:
        values.setdefault("training.export_hdf5", True)
    return load_config(args.config, values)


def pretrain_command(args, extra: List[str]) -> int:
    """Entry point of `python -m spacy_elmo pretrain`; returns the exit code."""
    rest, overrides = split_overrides(extra)
    parser = build_parser()
    opts = parser.parse_args(rest)
    try:
        config = resolve_config(opts, overrides)
        if opts.show_config:
            print(config.to_str())
            return 0
        if opts.output is None:
            parser.error("OUTPUT_DIR is required")
        import torch
        import torch.distributed as dist

        from .train import train

        if opts.threads:
            torch.set_num_threads(opts.threads)
        distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # started by torchrun
        if distributed:
            dist.init_process_group("nccl" if opts.device.startswith("cuda") else "gloo")
            if opts.device.startswith("cuda"):
                opts.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        train(config, opts.output, resume=opts.resume, init_from=opts.init_from, device=opts.device,
              progress_bar=not opts.no_progress, log=lambda msg: print(msg, file=sys.stderr))
        if distributed:
            dist.destroy_process_group()
    except PretrainError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; continue with --resume (from the last checkpoint)", file=sys.stderr)
        return 130
    return 0
