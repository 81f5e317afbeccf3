"""The directory of an `embed` run, sole owner of its manifest.

`OUTPUT.partial/` beside a single output (removed once OUTPUT is complete), or OUTPUT itself for a
sharded output. It holds `manifest.json` (the output's kind, every setting including the input's
path, size and sha256, the pieces' line ranges and, for shards, which are complete and each complete
one's record), the pieces (`part-00000.hdf5`, ... or `shard-00000.hdf5`, ...) and `lock`, which a
writer holds (flock, see `dir_lock`) while it runs.

A shard's record (its line range, line count, size in bytes and sha256) is taken once, when the
shard is found complete; the manifest is checked, never trusted: its ranges must be those its
settings plan, and every complete shard must match its record. The size is checked wherever the
manifest is read (a stat per shard); the sha256, which reads the whole shard, where a run finds
every shard it was asked for complete ("complete already") and where `open_embeddings(...,
verify=True)` asks for it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from ..dir_lock import take_lock
from ..errors import ElmoFileError, ElmoResumeError
from ..files import (
    RECORD_BYTES,
    TEXT_ENCODING,
    fsync_dir,
    open_regular,
    read_regular,
    regular_file,
    sha256_fd,
    write_atomic,
)
from ..tokenizer import spacy_name
from .h5writer import RESUME_RETRY, write_error

FORMAT = "spacy_elmo.embed/1"
MANIFEST = "manifest.json"
LOCK = "lock"
KINDS = {"file": "part", "shards": "shard"}  # the manifest's `output` -> the name of its pieces


@dataclass(frozen=True)
class Manifest:
    """`output`: "file" (parts of a single output) or "shards"; `settings`: the run's (see
    `job.new_job`); `ranges`: each piece's `[first, stop)` input lines; `complete` (shards only):
    which are written; `shards`: each complete shard's record (`range`, `lines`, `bytes`, `sha256`;
    see `WorkDir.record`), else None."""

    output: str
    settings: dict[str, Any]
    ranges: list[tuple[int, int]]
    complete: Optional[list[bool]] = field(default=None)
    shards: Optional[list[Optional[dict[str, Any]]]] = field(default=None)

    def to_json(self) -> str:
        data = {
            "format": FORMAT,
            "output": self.output,
            "settings": self.settings,
            "ranges": [list(r) for r in self.ranges],
        }
        if self.complete is not None:
            data["complete"] = self.complete
        if self.shards is not None:
            data["shards"] = self.shards
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, path: Path) -> "Manifest":
        """Raises ElmoFileError naming `path` where `text` is not a manifest of this format."""
        try:
            data = json.loads(text)
            if (
                not isinstance(data, dict)
                or data.get("format") != FORMAT
                or data.get("output") not in KINDS
            ):
                raise ValueError(FORMAT)
            ranges = [(int(a), int(b)) for a, b in data["ranges"]]
            complete = None if data.get("complete") is None else [bool(c) for c in data["complete"]]
            shards = None if data.get("shards") is None else [_record(r) for r in data["shards"]]
            return cls(data["output"], dict(data["settings"]), ranges, complete, shards)
        except (ValueError, KeyError, TypeError) as err:
            raise ElmoFileError(
                f"{path}: not a manifest of `python -m spacy_elmo embed` ({FORMAT}): "
                f"{type(err).__name__}: {err}"
            ) from None


RECORD_KEYS = {"range": list, "lines": int, "bytes": int, "sha256": str}


def _record(record: Any) -> Optional[dict[str, Any]]:
    """A shard's record read from JSON, its keys and their types checked (ValueError otherwise)."""
    if record is not None and (
        not isinstance(record, dict)
        or set(record) != set(RECORD_KEYS)
        or not all(isinstance(record[k], t) for k, t in RECORD_KEYS.items())
    ):
        raise ValueError(
            f"a shard's record must be null or an object of {', '.join(RECORD_KEYS)}: {record!r}"
        )
    return record


def piece_name(kind: str, i: int) -> str:
    return f"{kind}-{i:05d}.hdf5"


class WorkDir:
    """The directory `path` of a run writing `output`: its manifest, its pieces of `kind` (part,
    shard), its lock."""

    def __init__(self, path: Path, output: Path, kind: str):
        self.path, self.output, self.kind = path, output, kind
        self.lock_file = None

    def piece(self, i: int) -> Path:
        return self.path / piece_name(self.kind, i)

    def lock(self) -> None:
        """Hold the run's exclusive lock until `unlock` or the process ends: a second writer is
        refused."""
        self.lock_file = take_lock(self.path / LOCK, self.output, retry=RESUME_RETRY)

    def unlock(self) -> None:
        if self.lock_file is not None:
            self.lock_file.close()
            self.lock_file = None

    def has_manifest(self) -> bool:
        return os.path.lexists(self.path / MANIFEST)

    def manifest(self) -> Manifest:
        """The manifest; ElmoFileError where there is none or it cannot be read."""
        path = self.path / MANIFEST
        if not os.path.lexists(path):
            raise ElmoFileError(
                f"{self.path}: no {MANIFEST}: not a run of `python -m spacy_elmo embed`"
            )
        try:
            text = read_regular(path, "manifest of `embed`", RECORD_BYTES).decode(TEXT_ENCODING)
        except UnicodeDecodeError as err:
            raise ElmoFileError(f"{path}: cannot be read ({err})") from None
        return Manifest.from_json(text, path)

    def write_manifest(self, manifest: Manifest) -> None:
        """Write the manifest whole (temporary name, fsync, rename)."""
        path = self.path / MANIFEST
        try:
            write_atomic(path, manifest.to_json())
        except OSError as err:
            raise write_error(err, path) from None

    def complete(self, n: int) -> list[bool]:
        """Which of `n` pieces are on disk under their final name (complete: only whole files are
        renamed)."""
        return [self.piece(i).is_file() for i in range(n)]

    def record(self, i: int, lines: tuple[int, int]) -> dict[str, Any]:
        """The record of complete piece `i`, of input lines `lines`: its range, line count, size and
        sha256."""
        with open_regular(self.piece(i), "shard of the output") as f:
            size, sha256 = os.fstat(f.fileno()).st_size, sha256_fd(f.fileno())
        return {"range": list(lines), "lines": lines[1] - lines[0], "bytes": size, "sha256": sha256}

    def record_complete(self, manifest: Manifest) -> Manifest:
        """Record in the manifest which of its pieces are on disk, with a record of each that has
        none yet (see `record`); returns the manifest written."""
        complete = self.complete(len(manifest.ranges))
        records = manifest.shards or [None] * len(complete)
        if len(records) != len(complete):
            raise ElmoFileError(
                f"{self.path / MANIFEST}: {len(records)} shard records for {len(complete)} shards"
            )
        records = [
            (record or self.record(i, lines)) if done else None
            for i, (done, record, lines) in enumerate(zip(complete, records, manifest.ranges))
        ]
        updated = replace(manifest, complete=complete, shards=records)
        if updated != manifest:
            self.write_manifest(updated)
        return updated

    def check_shards(self, manifest: Manifest, hashed: Iterable[int] = ()) -> None:
        """ElmoFileError naming the shard where the manifest's ranges are not those its settings
        plan, or a complete shard does not match its record: range and line count, size, and the
        sha256 of those in `hashed` (see the module's docstring)."""
        settings, ranges = manifest.settings, manifest.ranges
        try:
            planned = plan(settings["lines"], settings["flush_every"], settings["shards"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
            raise ElmoFileError(
                f"{self.path / MANIFEST}: its settings plan no shards ({type(err).__name__}: {err})"
            ) from None
        for i in range(max(len(ranges), len(planned))):
            have, want = (list(r[i]) if i < len(r) else None for r in (ranges, planned))
            if have != want:
                raise ElmoFileError(
                    f"{self.piece(i)}: {self.path / MANIFEST} gives it lines {have}, where its "
                    f"settings plan {want}: the manifest was edited or damaged"
                )
        records = manifest.shards or [None] * len(ranges)
        hashed = set(hashed)
        for i, (done, record, lines) in enumerate(zip(manifest.complete or [], records, ranges)):
            if not done:
                continue
            if record is None:
                raise ElmoFileError(
                    f"{self.piece(i)}: {self.path / MANIFEST} records no size or sha256 for it (a "
                    "manifest of an earlier version): run the same embed command again to record "
                    "them"
                )
            redo = "remove it and run the same embed command again to redo it"
            if record["range"] != list(lines) or record["lines"] != lines[1] - lines[0]:
                raise ElmoFileError(
                    f"{self.piece(i)}: recorded as lines {record['range']} ({record['lines']} "
                    f"lines), where {self.path / MANIFEST} gives it {list(lines)}: the manifest "
                    "was edited"
                )
            size = regular_file(self.piece(i), "shard of the output").st_size
            if size != record["bytes"]:
                raise ElmoFileError(
                    f"{self.piece(i)}: {size:,} bytes, where {record['bytes']:,} were recorded "
                    f"when it was complete: truncated, replaced or damaged; {redo}"
                )
            if i in hashed and self.record(i, lines)["sha256"] != record["sha256"]:
                raise ElmoFileError(
                    f"{self.piece(i)}: its sha256 differs from the one recorded when it was "
                    f"complete: changed or damaged; {redo}"
                )

    def create(self, exist_ok: bool = False) -> None:
        """Make the directory (ElmoFileError where another process made it meanwhile, or where
        its name is a dangling symbolic link)."""
        try:
            self.path.mkdir(exist_ok=exist_ok)
            fsync_dir(self.path.parent)
        except FileExistsError:
            if self.path.is_symlink() and not self.path.exists():
                raise ElmoFileError(
                    f"{self.path} is a dangling symbolic link (to {os.readlink(self.path)}): "
                    "remove it, or name another output"
                ) from None
            raise ElmoResumeError(
                f"{self.path} appeared meanwhile: another process is writing it"
            ) from None
        except OSError as err:
            raise write_error(err, self.path) from None

    def clear(self) -> None:
        """Remove all in the directory but its lock (which the caller holds)."""
        try:
            for path in self.path.iterdir():
                if path.name == LOCK:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            fsync_dir(self.path)
        except OSError as err:
            raise write_error(err, self.path) from None

    def remove(self) -> None:
        """Remove the directory and all in it."""
        try:
            shutil.rmtree(self.path)
            fsync_dir(self.path.parent)
        except OSError as err:
            raise write_error(err, self.path) from None


def plan(lines: int, block: int, shards: Optional[int]) -> list[tuple[int, int]]:
    """Line ranges of the pieces: blocks of `block` lines, or `shards` runs of whole blocks
    (so that a line is computed alike in both: each block starts from an empty token cache)."""
    blocks = -(-lines // block)
    if shards is None:
        return [(b * block, min(lines, (b + 1) * block)) for b in range(blocks)]
    edges = [min(lines, (s * blocks // shards) * block) for s in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def differences(then: dict[str, Any], now: dict[str, Any]) -> str:
    """`key: value then, value now` for every key whose values differ."""
    return ", ".join(
        f"{k}: {then.get(k)!r} then, {now.get(k)!r} now"
        for k in sorted(set(then) | set(now))
        if then.get(k) != now.get(k)
    )


INPUT_KEYS = ("input", "input_bytes", "input_sha256")
FLAGS = {
    "threads": "--threads",
    "batch_size": "--batch-size",
    "flush_every": "--flush-every",
    "layer": "--layer",
    "dtype": "--dtype",
    "state": "--state",
    "compression": "--compression",
    "shards": "--shards",
    "precision": "--precision",
    "device": "--device",
}


def tokenizer_flag(name: Any) -> Optional[str]:
    """The option that gives the tokenizer a run records as `name` ("" for a DocBin input's); None
    where none does (a name of an earlier version). A spaCy tokenizer's name ends with the model's
    unknown word (`spacy_name`), which the same weights give again."""
    if name in ("docbin", "whitespace"):
        return "" if name == "docbin" else "--whitespace"
    spacy = isinstance(name, str) and name.startswith("spacy:")
    lang = name.split(" ")[0][len("spacy:") :] if spacy else ""
    kept = spacy_name(lang, None)  # keeping `<S>` and `</S>`, then the unknown word if any
    return f"--lang {lang}" if lang and (name == kept or name.startswith(kept + " ")) else None


def check_settings(
    path: Path,
    then: dict[str, Any],
    now: dict[str, Any],
    one_shard: bool = False,
    threads_flag: str = "--threads",
    record: Optional[Path] = None,
    remove: Optional[Path] = None,
    readable: bool = False,
) -> None:
    """Refuse to continue `path` (started with `then`) with other input or settings, in one line
    that names the options to give (`one_shard`: the run writes one shard, `--shard I/N`;
    `threads_flag`: the option that sets the threads that embed, Ray's `--threads-per-worker`).
    Where `then` lacks settings this version records (an earlier version's run), says so: `record`
    holds `then` (default `path`), `remove` is what to remove to start again (default `path`),
    `readable`: `path` is complete and `open_embeddings` reads it as it is."""
    if then == now:
        return
    keep = (
        "keep using it as it is (it is complete: open_embeddings reads it), or " if readable else ""
    )
    start_again = f"{keep}remove {remove or 'it'} to start again"
    lacked = sorted(set(now) - set(then))
    if lacked:
        raise ElmoResumeError(
            f"{path} was begun by an earlier spacy_elmo: {record or 'it'} records no "
            f"{', '.join(lacked)}, which this version records, so it cannot be resumed by this "
            f"version; {start_again}"
        )
    if any(then.get(k) != now.get(k) for k in INPUT_KEYS):
        if then.get("input") == now.get("input"):
            changed = differences(
                {k: then.get(k) for k in INPUT_KEYS}, {k: now.get(k) for k in INPUT_KEYS}
            )
            raise ElmoResumeError(
                f"{path} was started on other content of {now['input']}: the input changed since "
                f"({changed}); restore it, or remove the output to start again"
            )
        raise ElmoResumeError(
            f"{path} was started on another input ({then.get('input')} then, {now['input']} now)"
        )
    changed = f"{path} was started with other settings ({differences(then, now)})"
    tokenizer = then.get("tokenizer")
    give = tokenizer_flag(tokenizer) if tokenizer != now.get("tokenizer") else ""
    if give is None:
        raise ElmoResumeError(
            f"{changed}; its tokenizer {tokenizer!r} is named otherwise by this version (an "
            f"earlier spacy_elmo's name): no option continues it; {start_again}"
        )
    same = " ".join(
        [
            f"--shard I/{then[key]}" if key == "shards" and one_shard else f"{flag} {then[key]}"
            for key, flag in {**FLAGS, "threads": threads_flag}.items()
            if key in then and then.get(key) != now.get(key) and then[key] is not None
        ]
        + ([give] if give else [])
    )
    raise ElmoResumeError(
        f"{changed}; continue it with the same ones{f' ({same})' if same else ''}, or remove it "
        "to start again"
    )
