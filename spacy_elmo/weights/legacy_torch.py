"""torch.save's format before torch 1.6 (`_use_new_zipfile_serialization=False`; ELMoForManyLangs'
files are in it), checked before torch reads it.

Such a file is five pickles (magic number, protocol version, system info, the object with its
storages as persistent ids, the storage keys), then each storage as its element count (int64,
little-endian) and its bytes. torch allocates each storage at the size the object declares before it
reads the file, so a small file could declare a huge model: here the pickles are walked by an
unpickler that builds nothing but plain containers and records each storage's declared type and
size, and the records that follow must hold exactly those sizes. A global other than a storage type,
`OrderedDict` or torch's tensor rebuild is refused.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections import OrderedDict
from typing import BinaryIO, Dict, Tuple

from ..errors import ElmoFileError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
STORAGE_BYTES = {
    "FloatStorage": 4,
    "DoubleStorage": 8,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
}
REBUILDS = ("_rebuild_tensor", "_rebuild_tensor_v2")
# bound on the pickles of a state dict: its tensors' names, sizes and storage keys
PICKLE_BYTES = 1 << 20


class _StorageType:
    def __init__(self, name: str):
        self.name, self.element_size = name, STORAGE_BYTES[name]


def _rebuilt(*args):
    return None  # a tensor's place: only the storages' sizes are wanted here


class _Bounded:
    """`file` read through at most `PICKLE_BYTES`: a declared length beyond them fails before
    anything is allocated for it."""

    def __init__(self, file: BinaryIO, source: str):
        self.file, self.source, self.left = file, source, PICKLE_BYTES

    def _take(self, n: int) -> None:
        if n > self.left:
            raise ElmoFileError(
                f"{self.source}: its pickles take more than {PICKLE_BYTES:,} bytes, more than a "
                "torch state dict's structure needs (crafted?)"
            )
        self.left -= n

    def read(self, n: int) -> bytes:
        self._take(n)
        return self.file.read(n)

    def readline(self) -> bytes:
        line = self.file.readline(self.left + 1)
        self._take(len(line))
        return line


class _Walker(pickle._Unpickler):
    """Unpickles nothing but plain containers, recording `storages[key] = (element_size, numel)`."""

    # BYTEARRAY8 allocates its declared length before reading it
    dispatch = {k: v for k, v in pickle._Unpickler.dispatch.items() if k != pickle.BYTEARRAY8[0]}

    def __init__(self, file: BinaryIO, source: str):
        super().__init__(_Bounded(file, source))
        self.source = source
        self.storages: Dict[str, Tuple[int, int]] = {}

    def find_class(self, module: str, name: str):
        if module in ("torch", "torch.cuda") and name in STORAGE_BYTES:
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch._utils" and name in REBUILDS:
            return _rebuilt
        raise ElmoFileError(
            f"{self.source}: refused: it holds Python objects other than tensors "
            f"({module}.{name}), "
            "and this package never unpickles them"
        )

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple)
            and len(pid) >= 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and isinstance(pid[2], str)
            and isinstance(pid[4], int)
            and pid[4] >= 0
        ):
            raise ElmoFileError(
                f"{self.source}: not a torch state dict (an unknown persistent id {str(pid)[:80]})"
            )
        self.storages[pid[2]] = (pid[1].element_size, pid[4])
        return None


def check_legacy(file: BinaryIO, source: str) -> int:
    """The bytes of tensor data a legacy `torch.save` file declares, once its structure and every
    declared size agree with the file (nothing large is allocated); the file position is kept.
    ElmoFileError naming `source` otherwise."""
    start = file.tell()
    size = file.seek(0, os.SEEK_END)
    file.seek(start)
    try:
        walker = _Walker(file, source)
        header = [walker.load() for _ in range(3)]
        if header[:2] != [LEGACY_MAGIC, LEGACY_PROTOCOL]:
            raise ElmoFileError(f"{source}: neither a torch zip archive nor torch's legacy format")
        walker.load()  # the object: fills walker.storages
        keys = walker.load()
        if not isinstance(keys, list) or sorted(keys) != sorted(walker.storages):
            raise ElmoFileError(
                f"{source}: its storage keys disagree with the storages its tensors use"
            )
        total = 0
        for key in keys:
            element_size, numel = walker.storages[key]
            record = file.read(8)
            if len(record) < 8 or struct.unpack("<q", record)[0] != numel:
                raise ElmoFileError(
                    f"{source}: storage {key} declares {numel:,} elements, but its record in the "
                    f"file "
                    "does not hold them (truncated or crafted?)"
                )
            nbytes = numel * element_size
            if file.tell() + nbytes > size:
                raise ElmoFileError(
                    f"{source}: storage {key} declares {nbytes:,} bytes, more than the file holds "
                    "(truncated or crafted?)"
                )
            file.seek(nbytes, os.SEEK_CUR)
            total += nbytes
        return total
    except ElmoFileError:
        raise
    # pickle raises many types for bad data (UnpicklingError, EOFError, ValueError, ...)
    except Exception as err:
        raise ElmoFileError(
            f"{source}: not a readable torch state dict ({type(err).__name__}: {err})"
        ) from None
    finally:
        file.seek(start)
