"""The file that `nlp.to_disk` writes for the biLM (`PIPELINE/elmo/model`), checked from its framing
before it is read whole. It is thinc's msgpack map (`nodes`, `attrs`, `params`, `shims`) whose one
shim is a msgpack `bin` holding `{config, state}`, whose `state` is a `bin` holding the biLM's own
message (`options` JSON, `state_dict`: torch.save's bytes, ...). msgpack writes a `bin` as a
length and the bytes as they are, so each message is walked where it lies in the file, reading
headers and small values only (`read_model_file`); `bilm_message` then finds that message in the
bytes read, as thinc does, without thinc."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Optional

import srsly

from ..bilm.options import MAX_PARAMETERS, BiLMOptions
from ..errors import ElmoFileError
from ..files import open_regular, parse_json
from .json_files import MAX_JSON_BYTES, MAX_TABLE_BYTES
from .memory import check_memory

# torch.save's zip framing around the tensors: entry headers, alignment, the pickled dict
TORCH_FRAMING_BYTES = 1 << 20
# at most MAX_PARAMETERS weights of 4 bytes, its options and a character table
MAX_SERIALIZED_BYTES = 4 * MAX_PARAMETERS + MAX_JSON_BYTES + MAX_TABLE_BYTES + TORCH_FRAMING_BYTES
# the copies of the file's bytes alive at once while it loads: the file, each nested message's
# `bin` as msgpack returns it, the tensors torch reads, the network they fill
LOAD_COPIES = 6
# values a walk reads before it gives up (thinc's framing of one biLM holds a few dozen), and the
# longest string it reads (keys, names): a walk keeps less than MAX_VALUES * SHORT_STR bytes
MAX_VALUES = 10_000
MAX_DEPTH = 16
SHORT_STR = 256


@dataclass(frozen=True)
class Blob:
    """A msgpack `bin` or a `str` over SHORT_STR bytes (`kind`), left in the file at
    `[start, start + size)`."""

    start: int
    size: int
    kind: str


# msgpack type byte -> (kind, bytes of its length field, or of its payload for a scalar)
# fmt: off
_CODES: Dict[int, tuple] = {
    0xC0: ("scalar", 0), 0xC2: ("scalar", 0), 0xC3: ("scalar", 0), 0xCA: ("scalar", 4),
    0xCB: ("scalar", 8), 0xCC: ("scalar", 1), 0xCD: ("scalar", 2), 0xCE: ("scalar", 4),
    0xCF: ("scalar", 8), 0xD0: ("scalar", 1), 0xD1: ("scalar", 2), 0xD2: ("scalar", 4),
    0xD3: ("scalar", 8), 0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
    0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4), 0xDC: ("array", 2),
    0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4),
}
# fmt: on


class _Walk:
    """A msgpack value read from `f` by its headers, never past `end`: maps, arrays, scalars and
    short strings decoded, `bin`s and longer strings as `Blob`s (skipped)."""

    def __init__(self, f: BinaryIO, end: int):
        self.f, self.end, self.values = f, end, 0

    def read(self, n: int) -> bytes:
        if self.f.tell() + n > self.end:
            raise ValueError(f"a value runs past byte {self.end:,}")
        return self.f.read(n)

    def value(self, depth: int = 0) -> Any:
        self.values += 1
        if self.values > MAX_VALUES or depth > MAX_DEPTH:
            raise ValueError("more values or deeper nesting than thinc writes for a biLM")
        head = self.read(1)
        code = head[0]
        if code <= 0x7F or code >= 0xE0:
            return srsly.msgpack_loads(head)
        if code <= 0x9F:  # fixmap, fixarray
            kind, count = ("map" if code <= 0x8F else "array"), code & 0x0F
        elif code <= 0xBF:  # fixstr
            kind, count = "str", code & 0x1F
        elif code in _CODES:
            kind, width = _CODES[code]
            if kind == "scalar":
                return srsly.msgpack_loads(head + self.read(width))
            count = int.from_bytes(self.read(width), "big")
        else:
            raise ValueError(f"type byte 0x{code:02x}, which thinc never writes")
        if kind == "map":
            items = [(self.value(depth + 1), self.value(depth + 1)) for _ in range(count)]
            return {k: v for k, v in items if isinstance(k, str)}
        if kind == "array":
            return [self.value(depth + 1) for _ in range(count)]
        start = self.f.tell()
        if kind == "str" and count <= SHORT_STR:
            return self.read(count).decode("utf-8")
        if start + count > self.end:
            raise ValueError(f"a value of {count:,} bytes at byte {start:,} runs past {self.end:,}")
        self.f.seek(count, os.SEEK_CUR)
        return Blob(start, count, kind)


def _walk(
    f: BinaryIO, start: int, end: int, key: str, exact: bool = True, also: str = ""
) -> Dict[str, Any]:
    """The msgpack map at `start` of `f`, which must hold `key` (and `also`) and (`exact`) end at
    `end`."""
    f.seek(start)
    walk = _Walk(f, end)
    value = walk.value()
    if not isinstance(value, dict) or key not in value or (also and also not in value):
        raise ValueError(f"at byte {start:,}: not a map holding '{key}'{also and f' and {also!r}'}")
    if exact and f.tell() != end:
        raise ValueError(f"the message at byte {start:,} ends at {f.tell():,}, not at {end:,}")
    return value


def _text(f: BinaryIO, value: Any) -> str:
    """The options JSON of a biLM message: a short string, or one of at most MAX_JSON_BYTES read
    from `f`."""
    if isinstance(value, Blob) and value.kind == "str" and value.size <= MAX_JSON_BYTES:
        f.seek(value.start)
        return f.read(value.size).decode("utf-8")
    if not isinstance(value, str):
        raise ValueError(f"no options where a biLM keeps them, or over {MAX_JSON_BYTES:,} bytes")
    return value


def weights_bound(options: BiLMOptions) -> int:
    """The most bytes the state dict of a biLM of `options` takes in torch.save's format: its
    parameters and its warm state in float32, and the zip framing."""
    warm = options.n_layers * 2 * (options.projection_dim + options.lstm_dim)
    return 4 * (options.n_parameters + warm) + TORCH_FRAMING_BYTES


def read_model_file(
    path: str, what: str, accept: Callable[[BiLMOptions], None], inside: Optional[Path] = None
) -> bytes:
    """The bytes of the biLM file at `path`, read whole once its framing fits its size, its
    options (passed to `accept`, which raises where they are not wanted) bound its weights and
    the memory to load it is there. ElmoFileError naming `path` otherwise (ElmoResourceError:
    memory). `inside`: the pipeline directory it must be inside (see `files.open_regular`)."""
    with open_regular(path, what, MAX_SERIALIZED_BYTES, inside) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            outer = _walk(f, 0, size, "shims", exact=False)
            end = f.tell()
        except ValueError as err:
            raise ElmoFileError(
                f"{path}: not a serialized ELMo model, truncated? ({err})"
            ) from None
        if end != size:
            raise ElmoFileError(
                f"{path}: {size:,} bytes, more than the {end:,} its contents take (extended, or "
                "not written by nlp.to_disk)"
            )
        try:
            shim = _one_shim(outer)
            state = _walk(f, shim.start, shim.start + shim.size, "state", also="config")["state"]
            msg = _walk(f, state.start, state.start + state.size, "state_dict")
            weights, table = msg["state_dict"], msg.get("char_table", "")
            text = _text(f, msg.get("options"))
            if not isinstance(weights, Blob) or weights.kind != "bin":
                raise ValueError("no weights where a biLM keeps them")
        except (ValueError, LookupError, TypeError, AttributeError) as err:
            raise ElmoFileError(f"{path}: not a serialized ELMo model ({err})") from None
        options = BiLMOptions.from_dict(
            parse_json(text, path, "options"), source=f"{path}: its options"
        )
        accept(options)
        bound = weights_bound(options)
        if weights.size > bound:
            raise ElmoFileError(
                f"{path}: its weights take {weights.size:,} bytes, more than the {bound:,} that "
                f"its biLM ({options.n_parameters:,} parameters) takes"
            )
        if isinstance(table, Blob) and table.size > MAX_TABLE_BYTES:
            raise ElmoFileError(
                f"{path}: its character table takes {table.size:,} bytes, more than the "
                f"{MAX_TABLE_BYTES:,} read"
            )
        check_memory(LOAD_COPIES * size, path)
        f.seek(0)
        return f.read(size)


def _one_shim(outer: Dict[str, Any]) -> Blob:
    """The one shim of thinc's map `outer`, checked as thinc's `from_bytes` checks the map for the
    biLM's layer: one node, with its attributes and parameters, and one shim; ValueError else."""
    nodes, shims = outer.get("nodes"), outer.get("shims")
    if not (
        isinstance(nodes, list)
        and len(nodes) == 1
        and isinstance(nodes[0], dict)
        and all(isinstance(outer.get(k), list) and len(outer[k]) == 1 for k in ("attrs", "params"))
        and isinstance(shims, list)
        and len(shims) == 1
        and isinstance(shims[0], list)
        and len(shims[0]) == 1
        and isinstance(shims[0][0], Blob)
        and shims[0][0].kind == "bin"
    ):
        raise ValueError("not thinc's serialization of one layer with one shim")
    return shims[0][0]


def bilm_message(data: bytes) -> bytes:
    """The biLM's own message in the bytes of a file `read_model_file` accepted: the `state` of the
    one shim of thinc's map, where thinc's `from_bytes` finds it."""
    shim = srsly.msgpack_loads(data)["shims"][0][0]
    return srsly.msgpack_loads(shim)["state"]
