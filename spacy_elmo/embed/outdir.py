"""The directory of an `embed` run, sole owner of its manifest.

`OUTPUT.partial/` beside a single output (removed once OUTPUT is complete), or OUTPUT itself for a sharded
output. It holds `manifest.json` (the output's kind, every setting including the input's path, size and
sha256, the pieces' line ranges and, for shards, which are complete), the pieces (`part-00000.hdf5`, ... or
`shard-00000.hdf5`, ...) and `lock`, which a writer holds (flock) while it runs.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Optional

from ..bilm.files import RECORD_BYTES, fsync_dir, read_regular, write_atomic
from ..errors import ElmoFileError, ElmoResumeError
from .h5writer import write_error

FORMAT = "spacy_elmo.embed/1"
MANIFEST = "manifest.json"
LOCK = "lock"
KINDS = {"file": "part", "shards": "shard"}  # the manifest's `output` -> the name of its pieces


@dataclass(frozen=True)
class Manifest:
    """`output`: "file" (parts of a single output) or "shards"; `settings`: the run's (see `job.new_job`);
    `ranges`: each piece's `[first, stop)` input lines; `complete` (shards only): which are written."""

    output: str
    settings: dict[str, Any]
    ranges: list[tuple[int, int]]
    complete: Optional[list[bool]] = field(default=None)

    def to_json(self) -> str:
        data = {"format": FORMAT, "output": self.output, "settings": self.settings,
                "ranges": [list(r) for r in self.ranges]}
        if self.complete is not None:
            data["complete"] = self.complete
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, path: Path) -> "Manifest":
        """Raises ElmoFileError naming `path` where `text` is not a manifest of this format."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("output") not in KINDS:
                raise ValueError(FORMAT)
            ranges = [(int(a), int(b)) for a, b in data["ranges"]]
            complete = None if data.get("complete") is None else [bool(c) for c in data["complete"]]
            return cls(data["output"], dict(data["settings"]), ranges, complete)
        except (ValueError, KeyError, TypeError) as err:
            raise ElmoFileError(f"{path}: not a manifest of `python -m spacy_elmo embed` ({FORMAT}): "
                                f"{type(err).__name__}: {err}") from None


def take_lock(path: Path, output: Path, wait: bool = False) -> IO[str]:
    """Open `path` and take an exclusive flock on it, waiting for it (`wait`) or refusing where
    another process holds it; the lock lasts until the returned file is closed."""
    try:
        file = open(path, "a+")  # the caller holds it open
    except OSError as err:
        raise write_error(err, path) from None
    try:
        fcntl.flock(file, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        file.close()
        raise ElmoResumeError(f"{output} is locked by another process that is writing it ({path}): "
                              "wait for it to finish, or stop it and run again") from None
    return file


def piece_name(kind: str, i: int) -> str:
    return f"{kind}-{i:05d}.hdf5"


class WorkDir:
    """The directory `path` of a run writing `output`: its manifest, its pieces of `kind` (part, shard), its lock."""

    def __init__(self, path: Path, output: Path, kind: str):
        self.path, self.output, self.kind = path, output, kind
        self.lock_file = None

    def piece(self, i: int) -> Path:
        return self.path / piece_name(self.kind, i)

    def lock(self) -> None:
        """Hold the run's exclusive lock until `unlock` or the process ends: a second writer is refused."""
        self.lock_file = take_lock(self.path / LOCK, self.output)

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
            raise ElmoFileError(f"{self.path}: no {MANIFEST}: not a run of `python -m spacy_elmo embed`")
        try:
            text = read_regular(path, "manifest of `embed`", RECORD_BYTES).decode("utf-8")
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
        """Which of `n` pieces are on disk under their final name (complete: only whole files are renamed)."""
        return [self.piece(i).is_file() for i in range(n)]

    def record_complete(self, manifest: Manifest) -> Manifest:
        """Record in the manifest which of its pieces are on disk; returns the manifest written."""
        updated = replace(manifest, complete=self.complete(len(manifest.ranges)))
        if updated != manifest:
            self.write_manifest(updated)
        return updated

    def create(self, exist_ok: bool = False) -> None:
        """Make the directory (ElmoFileError where another process made it meanwhile)."""
        try:
            self.path.mkdir(exist_ok=exist_ok)
            fsync_dir(self.path.parent)
        except FileExistsError:
            raise ElmoResumeError(f"{self.path} appeared meanwhile: another process is writing it") from None
        except OSError as err:
            raise write_error(err, self.path) from None

    def remove(self) -> None:
        """Remove the directory and all in it."""
        try:
            shutil.rmtree(self.path)
            fsync_dir(self.path.parent)
        except OSError as err:
            raise write_error(err, self.path) from None


def plan(lines: int, block: int, shards: int | None) -> list[tuple[int, int]]:
    """Line ranges of the pieces: blocks of `block` lines, or `shards` runs of whole blocks
    (so that a line is computed alike in both: each block starts from an empty token cache)."""
    blocks = -(-lines // block)
    if shards is None:
        return [(b * block, min(lines, (b + 1) * block)) for b in range(blocks)]
    edges = [min(lines, (s * blocks // shards) * block) for s in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def differences(then: dict[str, Any], now: dict[str, Any]) -> str:
    """`key: value then, value now` for every key whose values differ."""
    return ", ".join(f"{k}: {then.get(k)!r} then, {now.get(k)!r} now" for k in sorted(set(then) | set(now))
                     if then.get(k) != now.get(k))


INPUT_KEYS = ("input", "input_bytes", "input_sha256")
FLAGS = {"threads": "--threads", "batch_size": "--batch-size", "flush_every": "--flush-every", "layer": "--layer",
         "dtype": "--dtype", "state": "--state", "compression": "--compression", "shards": "--shards",
         "precision": "--precision", "device": "--device"}


def check_settings(path: Path, then: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse to continue `path` (started with `then`) with other input or settings, in one line."""
    if then == now:
        return
    if any(then.get(k) != now.get(k) for k in INPUT_KEYS):
        if then.get("input") == now.get("input"):
            raise ElmoResumeError(
                f"{path} was started on other content of {now['input']}: the input changed since "
                f"({differences({k: then.get(k) for k in INPUT_KEYS}, {k: now.get(k) for k in INPUT_KEYS})}); "
                "restore it, or remove the output to start again")
        raise ElmoResumeError(f"{path} was started on another input ({then.get('input')} then, {now['input']} now)")
    same = " ".join(f"{flag} {then[key]}" for key, flag in FLAGS.items()
                    if key in then and then.get(key) != now.get(key) and then[key] is not None)
    raise ElmoResumeError(f"{path} was started with other settings ({differences(then, now)}); continue it with "
                          f"the same ones{f' ({same})' if same else ''}, or remove it to start again")
