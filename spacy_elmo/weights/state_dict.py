"""Torch state dicts read without unpickling code: a `torch.save` zip archive (torch's format since
1.6) or, where asked, torch's format before it (`legacy_torch`), each checked for the bytes it
declares before torch reads it. This project's format (`own`) and ELMoForManyLangs' (`efml`) store
their weights so."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path
from typing import BinaryIO, Dict, Optional, Union

import torch

from ..errors import ElmoFileError
from ..files import open_regular
from .legacy_torch import check_legacy
from .memory import check_memory

# the parts of torch's messages that advise loading what was refused
_ADVICE = re.compile(r"weights_only|Weights only load failed|Check the documentation|safe_globals")


def check_archive(file: BinaryIO, source: str) -> int:
    """The bytes of tensor data a `torch.save` zip archive declares, checked before anything is
    read: a zip archive (torch's format since 1.6), its entries stored as they are (torch never
    compresses them, so a small file cannot declare a large model). ElmoFileError naming `source`
    otherwise."""
    start = file.tell()
    try:
        with zipfile.ZipFile(file) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ElmoFileError(
            f"{source}: not a torch zip archive (torch.save's format since torch 1.6; truncated "
            f"or corrupt?): {err}"
        ) from None
    finally:
        file.seek(start)
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED:
            raise ElmoFileError(
                f"{source}: entry '{entry.filename}' is compressed ({entry.compress_size:,} bytes "
                f"declaring {entry.file_size:,}); torch.save stores entries as they are: crafted "
                "or not written by torch"
            )
    return sum(entry.file_size for entry in entries)


def archive_digest(file: BinaryIO) -> Optional[str]:
    """sha256 over the name, size and CRC-32 of each entry of a `torch.save` zip archive, read from
    its zip directory alone (no tensor data is read): different tensors, different digests (but
    for CRC-32's 1 in 2**32). None where torch wrote no CRC-32s (`set_crc32_options(False)`) or
    `file` is no zip archive."""
    start = file.tell()
    try:
        with zipfile.ZipFile(file) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    finally:
        file.seek(start)
    if any(entry.CRC == 0 and entry.file_size for entry in entries):
        return None
    h = hashlib.sha256()
    for entry in entries:
        h.update(f"{entry.filename}\0{entry.file_size}\0{entry.CRC}\n".encode("utf-8"))
    return h.hexdigest()


def read_state_dict(
    file: Union[Path, BinaryIO],
    source: str,
    what: str = "torch state dict",
    legacy: bool = False,
    inside: Optional[Path] = None,
) -> Dict[str, torch.Tensor]:
    """A `{name: tensor}` dict saved with `torch.save`, read without unpickling code
    (`weights_only=True`) from a file object or a path (a regular file: see `open_regular`), once
    `check_archive` (or with `legacy`, for a file in torch's format before 1.6, `check_legacy`) has
    passed and the memory it needs (the tensors, then the network they fill) is there. Anything else
    -> ElmoFileError (ElmoResourceError: memory) naming `source`. `inside`: a path's model
    directory (see `open_regular`)."""
    if isinstance(file, Path):
        with open_regular(file, what, inside=inside) as opened:
            return read_state_dict(opened, source, legacy=legacy)
    start = file.tell()
    is_zip = file.read(4) == b"PK\x03\x04"
    file.seek(start)
    check_memory(
        2 * (check_legacy(file, source) if legacy and not is_zip else check_archive(file, source)),
        source,
    )
    try:
        state_dict = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for bad archives (UnpicklingError, ...)
        detail = _torch_cause(err)
        if re.search("unsupported global", detail, re.I):  # not allowed, or its module blocked
            raise ElmoFileError(
                f"{source}: refused: it holds Python objects other than tensors, and this "
                f"package never unpickles them ({detail})"
            ) from None
        raise ElmoFileError(
            f"{source}: not a readable torch state dict ({type(err).__name__}: {detail})"
        ) from None
    if not isinstance(state_dict, dict):
        raise ElmoFileError(
            f"{source}: expected a dict of tensors, got {type(state_dict).__name__}"
        )
    check_entries(state_dict, source)
    return state_dict


def _torch_cause(err: Exception) -> str:
    """torch's reason for a failed load on one line, without its advice (to load with
    `weights_only=False` or to allow a global: never do that)."""
    text = str(err)
    cause = re.search(
        r"WeightsUnpickler error:\s*(.*?)\s*(?:Please use|Check the documentation|$)", text, re.S
    )
    kept = [cause.group(1)] if cause else re.split(r"\n\s*\n", text)
    return " ".join(
        " ".join(part.split()) for part in kept if part.strip() and not _ADVICE.search(part)
    )


def check_entries(state_dict: Dict[str, torch.Tensor], source: str) -> None:
    """ElmoFileError naming `source` and the entry where an entry of `state_dict` is not a named
    dense tensor with its data on the CPU."""
    for name, tensor in state_dict.items():
        if (
            not isinstance(name, str)
            or not isinstance(tensor, torch.Tensor)
            or tensor.layout != torch.strided
        ):
            kind = (
                f"{tensor.layout} tensor"
                if isinstance(tensor, torch.Tensor)
                else type(tensor).__name__
            )
            raise ElmoFileError(f"{source}: entry {name!r} is a {kind}, not a named dense tensor")
        # map_location keeps a "meta" tensor (a shape without data) where it is
        if tensor.device.type != "cpu":
            raise ElmoFileError(
                f"{source}: entry {name!r} is a tensor on device '{tensor.device.type}' without "
                "data in the file; weights are saved from the CPU"
            )
