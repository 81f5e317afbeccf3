"""This project's own model format: a directory with `bilm.json` (options, default state policy) and
`weights.pt`, a plain torch state dict read with `torch.load(..., weights_only=True)` (no unpickling
of code), and for a model with a character table (ELMoForManyLangs) `char_table.json`
(`CharTable.to_json`). `bilm.json`, written last, records digests of the others, checked as
they are read (`digests.py`). The output directory of `pretrain` holds one in `model/`.
`own_save.py` writes it.

Sizes are checked against what the file holds before the network is built, names, dtypes, shapes and
values after (`load.build`); what cannot be read is one ElmoFileError naming the file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import List

from ..bilm.chars import CharTable
from ..bilm.options import BiLMOptions
from ..bilm.policy import check_state_policy
from ..errors import ElmoFileError
from ..files import TEXT_ENCODING, inside_dir, open_regular, read_regular, sha256_fd
from .data import ModelData, ModelFiles
from .digests import check_same_save, recorded
from .json_files import MAX_TABLE_BYTES, read_json
from .state_dict import archive_digest, read_state_dict

KIND = "own"
OWN_CONFIG = "bilm.json"
OWN_WEIGHTS = "weights.pt"
OWN_TABLE = "char_table.json"
PRETRAIN_MODEL = "model"  # where `python -m spacy_elmo pretrain OUT` saves the biLM: OUT/model
OWN_FORMAT = "spacy_elmo.bilm"
OWN_VERSION = 1
# bilm.json's records of the files saved with it (`digests.py`): their sha256, and the digest of
# the CRC-32s of weights.pt (`state_dict.archive_digest`), where torch wrote them
DIGESTS, ARCHIVE_DIGESTS = "sha256", "archive_crc32"


def detect(directory: Path) -> bool:
    """A directory saved by `save_bilm` (it holds `bilm.json`), or the output directory of
    `pretrain` (`model/` holds one)."""
    return os.path.lexists(directory / OWN_CONFIG) or os.path.lexists(
        directory / PRETRAIN_MODEL / OWN_CONFIG
    )


def held(directory: Path) -> List[str]:
    """The files of a model in this format that `directory` holds: `bilm.json`, a `pretrain`
    output's `model/bilm.json`."""
    names = (OWN_CONFIG, f"{PRETRAIN_MODEL}/{OWN_CONFIG}")
    return [name for name in names if os.path.lexists(directory / name)]


def model_files(directory: Path) -> ModelFiles:
    """The files of a directory `detect` accepts (the model in `model/` of a `pretrain` output
    directory)."""
    if not os.path.lexists(directory / OWN_CONFIG):
        directory = inside_dir(directory, f"{PRETRAIN_MODEL}/{OWN_CONFIG}", "model config").parent
    table = directory / OWN_TABLE
    return ModelFiles(
        KIND,
        directory / OWN_CONFIG,
        directory / OWN_WEIGHTS,
        others=(table,) if os.path.lexists(table) else (),
    )


def read(model: ModelFiles) -> ModelData:
    """The model in `model.config`'s directory: its options, saved state policy, character table and
    weights, every file read from that directory (inside the one given, `model.directory`)."""
    directory = model.config.parent
    inside = model.directory or directory
    config_path = inside_dir(directory, OWN_CONFIG, "model config")
    config = read_json(config_path, "model config", inside)
    if not isinstance(config, dict):
        raise ElmoFileError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
    if config.get("format") != OWN_FORMAT or config.get("version") != OWN_VERSION:
        raise ElmoFileError(
            f"{config_path}: expected format {OWN_FORMAT!r} version {OWN_VERSION}, "
            f"got {config.get('format')!r} version {config.get('version')!r}"
        )
    opts = BiLMOptions.from_dict(config.get("options"), source=str(config_path))
    try:
        policy = check_state_policy(config.get("state", "warm"))
    except ValueError as err:
        raise ElmoFileError(f"{config_path}: {err}") from None
    warm_state = config.get("warm_state", True)
    if not isinstance(warm_state, bool):
        raise ElmoFileError(
            f"{config_path}: 'warm_state' must be true or false, got {warm_state!r}"
        )
    digests = recorded(config_path, config, DIGESTS)
    archives = recorded(config_path, config, ARCHIVE_DIGESTS)
    table = None
    if opts.char_table:
        table_path = inside_dir(directory, OWN_TABLE, "character table")
        data = read_regular(table_path, "character table", MAX_TABLE_BYTES, inside)
        try:
            text = data.decode(TEXT_ENCODING)
        except UnicodeDecodeError as err:
            raise ElmoFileError(f"{table_path}: not UTF-8 ({err})") from None
        table = CharTable.from_json(
            text, opts.max_characters_per_token, opts.n_characters, opts.n_words, str(table_path)
        )
        # each file checked against the record once it reads as what it is, so that a corrupt
        # file is reported as such
        if OWN_TABLE in digests:
            actual = hashlib.sha256(data).hexdigest()
            check_same_save(config_path, table_path, digests[OWN_TABLE], actual, "save_bilm")
    weights_path = inside_dir(directory, OWN_WEIGHTS, "ELMo weight file")
    with open_regular(weights_path, "ELMo weight file", inside=inside) as f:
        state_dict = read_state_dict(f, str(weights_path))
        expected = archives.get(OWN_WEIGHTS) or digests.get(OWN_WEIGHTS)
        if expected is not None:  # the file just read, through its descriptor
            actual = archive_digest(f) if OWN_WEIGHTS in archives else sha256_fd(f.fileno())
            check_same_save(config_path, weights_path, expected, actual or "", "save_bilm")
    return ModelData(opts, state_dict, str(weights_path), policy, table, warm_state)
