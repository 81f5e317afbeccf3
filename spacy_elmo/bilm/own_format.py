"""This project's own model format: a directory with `bilm.json` (options, default state policy) and
`weights.pt`, a plain torch state dict read with `torch.load(..., weights_only=True)` (no unpickling of code),
and for a model with a character table (ELMoForManyLangs) `char_table.json` (`CharTable.to_json`).

Sizes are checked against what the file holds before the network is built, names, dtypes, shapes and
values after; what cannot be read is one ElmoFileError naming the file.
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import BinaryIO, Dict, Optional, Union

import torch

from ..errors import ElmoFileError
from .chars import CharTable
from .embedder import ElmoEmbedder
from .files import TEXT_ENCODING, atomic_path, inside_dir, open_regular, read_regular, write_atomic
from .finite import check_finite
from .legacy_torch import check_legacy
from .memory import check_memory
from .model import BiLM
from .options import BiLMOptions, StatePolicy, check_state_policy, read_json

OWN_CONFIG = "bilm.json"
OWN_WEIGHTS = "weights.pt"
OWN_TABLE = "char_table.json"
MAX_TABLE_BYTES = 256 << 20  # a character and a word table (a few MB for the published ELMoForManyLangs models)
OWN_FORMAT = "spacy_elmo.bilm"
OWN_VERSION = 1
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def save_bilm(model: Union[ElmoEmbedder, BiLM], directory: Union[str, Path], state: Optional[StatePolicy] = None) -> Path:
    """Save in this project's format: `bilm.json` + `weights.pt` (+ `char_table.json`), each file written
    whole, `bilm.json` last; the warm state is computed if needed (unless the model has no warm-up text: then
    `bilm.json` says it has none) and saved. `state` sets the policy `load_bilm` applies (default: the
    embedder's current one, "warm" for a bare network)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    network = model.bilm if isinstance(model, ElmoEmbedder) else model
    if network.warmup is not None:
        network.warm_state(1)  # computed unless current
    policy = state or (model.state_policy if isinstance(model, ElmoEmbedder) else "warm")
    config = {"format": OWN_FORMAT, "version": OWN_VERSION, "options": network.options.to_dict(),
              "state": check_state_policy(policy)}
    if not network.has_warm_state:
        config["warm_state"] = False
    state_dict = {k: v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    with atomic_path(directory / OWN_WEIGHTS) as tmp, open(tmp, "wb") as f:  # each file whole, never half written
        torch.save(state_dict, f)  # to a file object: a failed write keeps its OSError (ENOSPC) as the cause
    table = network.token_encoder.token_ids
    if isinstance(table, CharTable):
        write_atomic(directory / OWN_TABLE, table.to_json())
    write_atomic(directory / OWN_CONFIG, json.dumps(config, indent=2))
    return directory


def check_archive(file: BinaryIO, source: str) -> int:
    """The bytes of tensor data a `torch.save` zip archive declares, checked before anything is read: a zip
    archive (torch's format since 1.6), its entries stored as they are (torch never compresses them, so a
    small file cannot declare a large model). ElmoFileError naming `source` otherwise."""
    start = file.tell()
    try:
        with zipfile.ZipFile(file) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ElmoFileError(f"{source}: not a torch zip archive (torch.save's format since torch 1.6; truncated "
                            f"or corrupt?): {err}") from None
    finally:
        file.seek(start)
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED:
            raise ElmoFileError(f"{source}: entry '{entry.filename}' is compressed ({entry.compress_size:,} bytes "
                                f"declaring {entry.file_size:,}); torch.save stores entries as they are: crafted "
                                "or not written by torch")
    return sum(entry.file_size for entry in entries)


def read_state_dict(file: Union[Path, BinaryIO], source: str, what: str = "torch state dict",
                    legacy: bool = False) -> Dict[str, torch.Tensor]:
    """A `{name: tensor}` dict saved with `torch.save`, read without unpickling code (`weights_only=True`)
    from a file object or a path (a regular file: see `open_regular`), once `check_archive` (or with `legacy`,
    for a file in torch's format before 1.6, `check_legacy`) has passed and the memory it needs (the tensors,
    then the network they fill) is there. Anything else -> ElmoFileError (ElmoResourceError: memory) naming
    `source`."""
    if isinstance(file, Path):
        with open_regular(file, what) as opened:
            return read_state_dict(opened, source, legacy=legacy)
    start = file.tell()
    is_zip = file.read(4) == b"PK\x03\x04"
    file.seek(start)
    check_memory(2 * (check_legacy(file, source) if legacy and not is_zip else check_archive(file, source)), source)
    try:
        state_dict = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for bad archives (UnpicklingError, RuntimeError, ...)
        # torch's message spans lines and suggests weights_only=False (never do that): keep its cause only
        cause = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(?:Please use|Check the documentation|$)", str(err), re.S)
        detail = " ".join(cause.group(1).split()) if cause else str(err).strip().split("\n")[0]
        if "Unsupported global" in detail:
            raise ElmoFileError(f"{source}: refused: it holds Python objects other than tensors, and this "
                                  f"package never unpickles them ({detail})") from None
        raise ElmoFileError(f"{source}: not a readable torch state dict ({type(err).__name__}: {detail})") from None
    if not isinstance(state_dict, dict):
        raise ElmoFileError(f"{source}: expected a dict of tensors, got {type(state_dict).__name__}")
    for name, tensor in state_dict.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            kind = f"{tensor.layout} tensor" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ElmoFileError(f"{source}: entry {name!r} is a {kind}, not a named dense tensor")
        if tensor.device.type != "cpu":  # map_location keeps a "meta" tensor (a shape without data) where it is
            raise ElmoFileError(f"{source}: entry {name!r} is a tensor on device '{tensor.device.type}' without "
                                "data in the file; weights are saved from the CPU")
    return state_dict


def bilm_from_state_dict(opts: BiLMOptions, state_dict: Dict[str, torch.Tensor], source: str, state: StatePolicy,
                         cache_size: int, char_table: Optional[CharTable] = None,
                         warm_state: bool = True) -> ElmoEmbedder:
    """An embedder whose network holds `state_dict` (and `char_table`, which options with `char_table` need):
    names, dense float tensors, shapes and values (finite once cast to the network's dtype) are checked. The
    biLM is built only once the file stores at least 2 bytes (float16) per parameter of the options, so sizes
    that the weights do not have
    allocate nothing (tensors that view one storage count it once). `warm_state`: whether the state dict's
    `warm_h` / `warm_c` are the warm state of its weights."""
    stored = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state_dict.values()}.values())
    if stored < 2 * opts.n_parameters:
        raise ElmoFileError(f"{source}: stores {stored:,} bytes of weights, too few for the {opts.n_parameters:,} "
                              "parameters its options imply; the options and the weights do not belong together")
    bilm = BiLM(opts, char_table)
    own = bilm.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ElmoFileError(f"{source}: tensors missing {missing[:5]} / unexpected {unexpected[:5]}")
    for name, tensor in state_dict.items():
        if tensor.dtype not in FLOAT_DTYPES:
            raise ElmoFileError(f"{source}: '{name}' is a {tensor.dtype} tensor; weights must be float")
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise ElmoFileError(
                f"{source}: tensor '{name}' has shape {tuple(tensor.shape)} but the options imply {tuple(own[name].shape)}"
            )
    bilm.load_state_dict(state_dict)
    for name, tensor in bilm.state_dict().items():  # after the cast to the network's dtype
        check_finite(tensor, source, f"'{name}' as {tensor.dtype}".replace("torch.", ""))
    if warm_state:
        bilm.mark_warm_state_current()
    return ElmoEmbedder(bilm, state, cache_size, source=source)


def load_own(directory: Path, state: Optional[StatePolicy], cache_size: int) -> ElmoEmbedder:
    """A directory written by `save_bilm` -> an embedder (`state`: None keeps the saved policy)."""
    config_path = inside_dir(directory, OWN_CONFIG, "model config")
    config = read_json(config_path, "model config")
    if not isinstance(config, dict):
        raise ElmoFileError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
    if config.get("format") != OWN_FORMAT or config.get("version") != OWN_VERSION:
        raise ElmoFileError(
            f"{config_path}: expected format {OWN_FORMAT!r} version {OWN_VERSION}, "
            f"got {config.get('format')!r} version {config.get('version')!r}"
        )
    opts = BiLMOptions.from_dict(config.get("options"), source=str(config_path))
    try:
        policy = check_state_policy(state or config.get("state", "warm"))
    except ValueError as err:
        raise ElmoFileError(f"{config_path}: {err}") from None
    warm_state = config.get("warm_state", True)
    if not isinstance(warm_state, bool):
        raise ElmoFileError(f"{config_path}: 'warm_state' must be true or false, got {warm_state!r}")
    table = None
    if opts.char_table:
        table_path = inside_dir(directory, OWN_TABLE, "character table")
        text = read_regular(table_path, "character table", MAX_TABLE_BYTES)
        try:
            text = text.decode(TEXT_ENCODING)
        except UnicodeDecodeError as err:
            raise ElmoFileError(f"{table_path}: not UTF-8 ({err})") from None
        table = CharTable.from_json(text, opts.max_characters_per_token, opts.n_characters, opts.n_words,
                                    str(table_path))
    weights_path = inside_dir(directory, OWN_WEIGHTS, "ELMo weight file")
    state_dict = read_state_dict(weights_path, str(weights_path), "ELMo weight file")
    return bilm_from_state_dict(opts, state_dict, str(weights_path), policy, cache_size, table, warm_state)
