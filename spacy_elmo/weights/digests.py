"""What ties the files of one save together: the config, written last, records a digest of each
file written before it (taken as it is written), and a reader checks each file it reads against the
record of the config it read, on the very file it reads (one open descriptor). Files of two saves (a
writer killed between its renames, a directory read while it is written) are so one
`MixedSaveError` (an ElmoFileError; `load_bilm` reads again after a pause first, in case a save was
ending), never one model. A config without a record (saved before) is read as before; a writer
removes such a config before it replaces the files it would pass for.

The digest is a file's sha256, or for a `torch.save` archive that of its zip directory's CRC-32s
(`state_dict.archive_digest`), which a reader takes without reading the tensors again (hashing the
weights would read every byte of them a second time).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Dict, Optional

from ..errors import ElmoFileError
from ..files import RECORD_BYTES, read_regular


class MixedSaveError(ElmoFileError):
    """The files of a directory come from two saves (see the module)."""


class HashingWriter:
    """A binary file `f` to write to (`torch.save` writes through it), hashing what it writes;
    `name`: the file's."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha256, self.name = f, hashlib.sha256(), getattr(f, "name", None)

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def recorded(config: Path, saved: Dict[str, Any], key: str) -> Dict[str, str]:
    """The record `{file name: digest}` under `key` of the `saved` config (`{}`: none, a save
    before records were kept); ElmoFileError naming `config` where it is no such record."""
    value = saved.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in value.items()
    ):
        raise ElmoFileError(f"{config}: '{key}' must map file names to sha256s, got {value!r}")
    return value


def check_same_save(
    config: Path, file: Path, expected: Optional[str], actual: str, writer: str
) -> None:
    """MixedSaveError where `file` is not the one `config` was saved with (its digest, `actual`, is
    not the `expected` one; None: not recorded, nothing checked); `writer`: the function that
    writes such a save, which the error names."""
    if expected is not None and expected != actual:
        raise MixedSaveError(
            f"the files of {config.parent} come from different saves: an interrupted or "
            f"concurrent {writer}? ({config.name} was written with another {file.name})"
        )


def drop_unrecorded(config: Path, key: str) -> None:
    """Remove `config` where it keeps no record under `key` (or cannot be read): the files about to
    replace those it was saved with would pass for its own."""
    if not os.path.lexists(config):
        return
    try:
        data = json.loads(read_regular(config, "config", RECORD_BYTES))
        kept = isinstance(data, dict) and key in data
    except (ElmoFileError, ValueError):
        kept = False
    if not kept:
        config.unlink()
