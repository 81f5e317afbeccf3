"""Writing this project's own model format (`own.py` finds and reads it): `save_bilm`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional, Union

import torch

from ..bilm.chars import CharTable
from ..bilm.embedder import ElmoEmbedder
from ..bilm.model import BiLM
from ..bilm.policy import StatePolicy, check_state_policy
from ..files import atomic_path, output_dir, write_atomic
from .digests import HashingWriter, drop_unrecorded
from .formats import check_destination
from .own import (
    ARCHIVE_DIGESTS,
    DIGESTS,
    KIND,
    OWN_CONFIG,
    OWN_FORMAT,
    OWN_TABLE,
    OWN_VERSION,
    OWN_WEIGHTS,
)
from .state_dict import archive_digest


def save_bilm(
    model: Union[ElmoEmbedder, BiLM],
    directory: Union[str, Path],
    state: Optional[StatePolicy] = None,
) -> Path:
    """Save in this project's format: `bilm.json` + `weights.pt` (+ `char_table.json`), each file
    written whole, `bilm.json` last, recording digests of the others (a load of files of two saves
    is an ElmoFileError, see `digests.py`); the warm state is computed if needed (unless the model
    has no warm-up text: then `bilm.json` says it has none) and saved. `state` sets the policy
    `load_bilm` applies (default: the embedder's current one, "warm" for a bare network). A model
    of this format in `directory` is replaced; one of another format there, or a directory where a
    file goes, is an ElmoFileError, nothing written (`formats.check_destination`)."""
    policy = check_state_policy(
        state or (model.state_policy if isinstance(model, ElmoEmbedder) else "warm")
    )
    directory = output_dir(directory, "save_bilm")
    network = model.network if isinstance(model, ElmoEmbedder) else model
    table = network.token_encoder.token_ids
    has_table = isinstance(table, CharTable)
    names = [OWN_WEIGHTS, OWN_CONFIG] + ([OWN_TABLE] if has_table else [])
    check_destination(directory, KIND, names, "save_bilm")
    if network.warmup is not None:
        network.warm_state(1)  # computed unless current
    config = {
        "format": OWN_FORMAT,
        "version": OWN_VERSION,
        "options": network.options.to_dict(),
        "state": policy.value,
    }
    if not network.has_warm_state:
        config["warm_state"] = False
    state_dict = {k: v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    # each file whole, never half written
    with (
        atomic_path(directory / OWN_WEIGHTS) as tmp,
        open(tmp, "wb") as f,
    ):
        # to a file object: a failed write keeps its OSError (ENOSPC) as the cause
        writer = HashingWriter(f)
        torch.save(state_dict, writer)
        f.flush()
        with open(tmp, "rb") as written:
            archive = archive_digest(written)
        digests = {OWN_WEIGHTS: writer.sha256.hexdigest()}
        drop_unrecorded(directory / OWN_CONFIG, DIGESTS)  # before the old weights are replaced
    if has_table:
        text = table.to_json().encode("utf-8")
        write_atomic(directory / OWN_TABLE, text)
        digests[OWN_TABLE] = hashlib.sha256(text).hexdigest()
    config[DIGESTS] = digests
    if archive is not None:
        config[ARCHIVE_DIGESTS] = {OWN_WEIGHTS: archive}
    write_atomic(directory / OWN_CONFIG, json.dumps(config, indent=2))
    return directory
