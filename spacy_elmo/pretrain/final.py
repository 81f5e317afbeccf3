"""The end of a run: its final model saved, or found saved already (a finished run resumed leaves
its files as they are)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

import torch

from ..errors import ElmoError
from ..files import RECORD_BYTES, parse_json, read_regular
from ..weights import load_bilm
from .lm import BiLanguageModel
from .outputs import (
    HDF5_DIR,
    HEAD_FILE,
    MODEL_DIR,
    TRAINING_SUMMARY,
    VOCAB_FILE,
    save_trained,
    saved_head,
)
from .vocab import Vocab


def save_final(
    output: Path,
    model: BiLanguageModel,
    vocab: Vocab,
    policy: str,
    export: bool,
    summary: Dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """Save `model`'s biLM (under `policy`; its bilm-tf export too where `export`), softmax and
    `vocab`, and `summary` into `output` (see `outputs.save_trained`), and say so."""
    model_dir = save_trained(
        output, model.bilm.cpu(), model.head.cpu(), vocab, policy, export, summary
    )
    log(f"saved {model_dir}" + (f" and {output / HDF5_DIR}" if export else ""))


def kept_model(
    output: Path,
    model: BiLanguageModel,
    vocab: Vocab,
    policy: str,
    export: bool,
    log: Callable[[str], None],
) -> Optional[Dict[str, Any]]:
    """The summary (`training.json`) of the model saved in `output` where it holds `model`'s biLM
    (its options and weights, read under `policy`), its softmax and `vocab` as they are, and, where
    `export`, the bilm-tf export of those weights: the run is finished, which `log` is told, and
    its files are kept. None where any of it is missing, unreadable or other (a final save
    interrupted: the caller saves again)."""
    model_dir = output / MODEL_DIR
    if not os.path.isdir(model_dir) or export and not os.path.isdir(output / HDF5_DIR):
        return None
    weights = dict(model.bilm.named_parameters())
    try:
        path = model_dir / TRAINING_SUMMARY
        summary = parse_json(read_regular(path, "training summary", RECORD_BYTES), path, "summary")
        saved = load_bilm(model_dir)
        if (
            not isinstance(summary, dict)
            or saved.state_policy != policy
            or saved.options.to_dict() != model.bilm.options.to_dict()
            or not _same(dict(saved.network.named_parameters()), weights)
            or Vocab.from_disk(model_dir / VOCAB_FILE).words != vocab.words
            or not _same(saved_head(model_dir / HEAD_FILE), model.head.state_dict())
        ):
            return None
        if export:
            exported = load_bilm(output / HDF5_DIR, state="zero").network
            if not _same(dict(exported.named_parameters()), weights):
                return None
    except (ElmoError, OSError):
        return None
    log(f"{output} finished at step {summary.get('steps')}: its model ({model_dir}) is saved")
    return summary


def _same(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two sets of named tensors are equal, name for name, bit for bit."""
    return a.keys() == b.keys() and all(
        torch.equal(a[k].detach().cpu(), b[k].detach().cpu()) for k in a
    )
