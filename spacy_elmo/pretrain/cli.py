"""The work of `python -m spacy_elmo pretrain` below its typer declaration (in `spacy_elmo.cli`):
the leftover arguments (OUTPUT_DIR and spaCy-style `--section.key value` overrides), the config,
and the run, on one process or under torchrun."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from thinc.api import Config

from .config import PretrainError, load_config


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


def parse_overrides(overrides: List[str]) -> Dict[str, Any]:
    """Dotted `--section.key [value]` arguments (as `split_overrides` gives them) -> `{"section.key": value}`,
    values read as `spacy train` reads them (JSON where they parse, else strings), SPACY_CONFIG_OVERRIDES included."""
    from spacy.cli._util import parse_config_overrides  # private to spaCy: this is its one caller

    try:
        return parse_config_overrides(list(overrides))  # a copy: it consumes the list it is given
    except SystemExit:
        raise PretrainError(f"cannot parse the config overrides {' '.join(overrides)}") from None


def parse_arguments(args: List[str], train: Optional[List[str]]) -> Tuple[Optional[str], List[str], Dict[str, Any]]:
    """The arguments typer did not take, in command-line order -> (OUTPUT_DIR or None, more training
    paths, config overrides). Paths after OUTPUT_DIR extend `--train` (`--train a.txt b.txt`)."""
    rest, overrides = split_overrides(args)
    unknown = [a for a in rest if a.startswith("-") and len(a) > 1]
    if unknown:
        raise PretrainError(f"no such option: {unknown[0]} (config overrides are --section.key VALUE; see --help)")
    output, more = (rest[0] if rest else None), rest[1:]
    if more and not train:
        raise PretrainError(f"unexpected argument {more[0]!r}: pretrain takes one OUTPUT_DIR")
    return output, more, parse_overrides(overrides)


def resolve_config(path: Optional[Path], values: Dict[str, Any], *, train: List[str], dev: Optional[str],
                   lang: Optional[str], whitespace: bool, export_hdf5: bool) -> Config:
    """The config file plus the command's shortcuts (--train, --dev, --lang, ...) plus dotted overrides."""
    values = dict(values)
    if train:
        values.setdefault("paths.train", train[0] if len(train) == 1 else list(train))
    if dev is not None:
        values.setdefault("paths.dev", dev)
    if lang is not None:
        values.setdefault("corpus.tokenizer", "spacy")
        values.setdefault("corpus.lang", lang)
    if whitespace:
        values.setdefault("corpus.tokenizer", "whitespace")
    if export_hdf5:
        values.setdefault("training.export_hdf5", True)
    return load_config(path, values)


def run_training(config: Config, output: str, *, resume: bool, init_from: Optional[str], device: str,
                 threads: Optional[int], progress: bool) -> None:
    """Train as `config` says into `output`; under torchrun (WORLD_SIZE > 1) as one of its processes."""
    import torch
    import torch.distributed as dist

    from .train import train

    if threads:
        torch.set_num_threads(threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        if device.startswith("cuda"):
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    train(config, output, resume=resume, init_from=init_from, device=device, progress_bar=progress,
          log=lambda msg: print(msg, file=sys.stderr))
    if distributed:
        dist.destroy_process_group()
