"""Files of `pretrain` that must be whole or absent: checkpoints, and small records written
atomically.

A checkpoint is one directory `checkpoint/step-NNNNNNNNN/` holding `model.pt` (weights, optimizer,
progress; written by rank 0) and one `rank{r}.pt` per process (random generators, carried LSTM
state), each recording its step. It becomes *the* checkpoint only when the manifest
`checkpoint/checkpoint.json` (step, processes, directory, sha256 of every part) is replaced to name
it, after every part and the directory are fsynced; older step directories are removed after that.
A kill at any moment leaves the previous checkpoint or the new one, never a mix of the two; a set
whose parts disagree with the manifest or with each other is refused with `ElmoFileError`.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ..errors import ElmoFileError
from ..files import (
    RECORD_BYTES,
    TEXT_ENCODING,
    fsync_dir,
    open_regular,
    read_regular,
    sha256_file,
    write_atomic,
    write_errors,
)

MANIFEST = "checkpoint.json"
MODEL_PART = "model.pt"
STEP_PREFIX = "step-"


def torch_load(
    path: Path, keys: Tuple[str, ...] = (), what: str = "checkpoint part"
) -> Dict[str, Any]:
    """A dict of tensors written by `torch.save` in a regular file, read without unpickling
    arbitrary objects (weights_only); anything unreadable, or a dict without `keys`, ->
    `ElmoFileError` naming `path`."""
    try:
        with open_regular(path, what) as f:
            data = torch.load(f, map_location="cpu", weights_only=True)
    except ElmoFileError:
        raise
    except pickle.UnpicklingError:
        raise ElmoFileError(
            f"{path}: holds Python objects other than tensors; refused, as loading them could "
            f"run code"
        ) from None
    # torch raises RuntimeError, EOFError, ... for truncated or foreign files
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ElmoFileError(
            f"{path}: cannot read it as a torch file of tensors ({type(err).__name__}: {reason})"
        ) from None
    if not isinstance(data, dict):
        raise ElmoFileError(f"{path}: expected a dict of tensors, got {type(data).__name__}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ElmoFileError(
            f"{path}: not a part of a pretrain checkpoint (no {', '.join(missing)})"
        )
    return data


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{step:09d}"


def rank_part(rank: int) -> str:
    return f"rank{rank}.pt"


def part_names(world: int) -> List[str]:
    """The files of a checkpoint written by `world` processes."""
    return [MODEL_PART, *(rank_part(r) for r in range(world))]


def retry_hint(root: Path) -> str:
    """What to do after a full disk: continue from the checkpoint in `root`, or start again if there
    is none."""
    return (
        "free space and run again with --resume"
        if os.path.lexists(Path(root) / MANIFEST)
        else "free space and run again"
    )


def prepare(root: Path, step: int) -> Path:
    """An empty directory for the parts of step `step` (left over from a killed attempt:
    cleared)."""
    directory = step_dir(root, step)
    with write_errors(directory, retry_hint(root)):
        if not root.exists():
            root.mkdir(parents=True)
            fsync_dir(root.parent)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir()
    return directory


def save_part(obj: Dict[str, Any], path: Path) -> None:
    """Write one part and fsync it (the directory is not published yet, so no temporary name). A
    failed write (a full disk) is one error naming the part (see `write_errors`)."""
    with write_errors(path, retry_hint(path.parent.parent)), open(path, "wb") as f:
        torch.save(obj, f)  # to a file object: a failed write keeps its OSError as the cause
        f.flush()
        os.fsync(f.fileno())


def publish(root: Path, step: int, world: int) -> None:
    """Make the parts of `step` (all written and fsynced) the checkpoint, then drop older ones."""
    directory = step_dir(root, step)
    with write_errors(root / MANIFEST, retry_hint(root)):
        fsync_dir(directory)
        manifest = {
            "step": step,
            "world": world,
            "directory": directory.name,
            "sha256": {
                name: sha256_file(directory / name, "checkpoint part") for name in part_names(world)
            },
        }
        write_atomic(root / MANIFEST, json.dumps(manifest, indent=1))
    for old in root.glob(f"{STEP_PREFIX}*"):
        if old != directory:
            shutil.rmtree(old)


def discard(root: Path, step: int) -> None:
    """Remove the parts of step `step` after a failure while saving them, unless they were
    published."""
    try:
        published = read_manifest(root)["step"] == step
    except ElmoFileError:
        published = False
    if not published:
        shutil.rmtree(step_dir(root, step), ignore_errors=True)


def barrier(world: int) -> None:
    """Wait for every process of a run of `world` processes (none to wait for on one)."""
    if world > 1:
        dist.barrier()


def save(
    root: Path,
    step: int,
    rank: int,
    world: int,
    own: Dict[str, Any],
    shared: Optional[Dict[str, Any]],
) -> None:
    """Checkpoint `step` in `root`, called by every process: each writes its `own` part, rank 0
    also the `shared` model part, then rank 0 publishes them. On any failure (a full disk, a kill)
    the previous checkpoint stays, with nothing partial beside it."""
    try:
        if rank == 0:
            prepare(root, step)
        barrier(world)
        directory = step_dir(root, step)
        save_part(own, directory / rank_part(rank))
        if rank == 0:
            save_part(shared, directory / MODEL_PART)
        barrier(world)
        if rank == 0:
            publish(root, step, world)
    except BaseException:
        if rank == 0:
            discard(root, step)
        raise
    barrier(world)


def clear_unpublished(root: Path) -> None:
    """Remove what a run stopped while writing its first checkpoint left in `root`: parts that no
    manifest names (a published checkpoint is never removed here: see `outputs.check_new_run`)."""
    if Path(root).exists():
        shutil.rmtree(root)


def read_manifest(root: Path) -> Dict[str, Any]:
    """The manifest of the checkpoint in `root`, checked for form."""
    path = Path(root) / MANIFEST
    if not os.path.lexists(path):
        hint = (
            " (only files of an older layout without a manifest, whose parts may disagree)"
            if (Path(root) / MODEL_PART).is_file()
            else ""
        )
        raise ElmoFileError(f"--resume: no checkpoint in {root}: {path} not found{hint}")
    data = read_regular(path, "checkpoint manifest", RECORD_BYTES)
    try:
        manifest = json.loads(data.decode(TEXT_ENCODING))
        ok = (
            isinstance(manifest["step"], int)
            and isinstance(manifest["world"], int)
            and manifest["world"] > 0
            and manifest["directory"] == step_dir(root, manifest["step"]).name
            and isinstance(manifest["sha256"], dict)
            # the count first: a corrupt, huge world would make a list of as many names
            and len(manifest["sha256"]) == manifest["world"] + 1
            and sorted(manifest["sha256"]) == sorted(part_names(manifest["world"]))
            and all(isinstance(v, str) for v in manifest["sha256"].values())
        )
    # UnicodeDecodeError and JSONDecodeError are ValueErrors
    except (ValueError, KeyError, TypeError) as err:
        raise ElmoFileError(
            f"{path}: not a checkpoint manifest ({type(err).__name__}: {err})"
        ) from None
    if not ok:
        raise ElmoFileError(
            f"{path}: not a checkpoint manifest (step, world, its directory, the sha256 of "
            f"{MODEL_PART} and of one rank part per process)"
        )
    return manifest


def load(root: Path, rank: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(model part, this rank's part) of the checkpoint in `root`, after checking that every part
    the manifest names is there, unchanged (sha256), and of the manifest's step."""
    manifest = read_manifest(root)
    directory, step, path = (
        Path(root) / manifest["directory"],
        manifest["step"],
        Path(root) / MANIFEST,
    )
    for name, digest in manifest["sha256"].items():
        part = directory / name
        if not os.path.lexists(part):
            raise ElmoFileError(f"checkpoint incomplete: {path} names {part}, which is missing")
        if sha256_file(part, "checkpoint part") != digest:
            raise ElmoFileError(
                f"checkpoint parts disagree: {part} is not the file that {path} recorded "
                f"(sha256 differs)"
            )
    parts = []
    for name, keys in (
        (MODEL_PART, ("step", "model", "optimizer", "progress")),
        (rank_part(rank), ("step", "torch_rng", "head_rng", "state")),
    ):
        part = torch_load(directory / name, keys)
        if part["step"] != step:
            raise ElmoFileError(
                f"checkpoint parts disagree: {path} is of step {step}, "
                f"{directory / name} of step {part['step']}"
            )
        parts.append(part)
    return parts[0], parts[1]
