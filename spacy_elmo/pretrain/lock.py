"""The lock a pretraining run holds on its output directory for its whole life, new or resumed:
a second run on the directory (new or `--resume`) is refused with one error naming the holder's pid
(see `dir_lock`), before it reads or changes anything there. Under torchrun rank 0, which writes the
shared files, holds it; the other ranks wait until it has it, and stop with it where it is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Optional

import torch
import torch.distributed as dist

from ..dir_lock import release, take_lock
from ..errors import ElmoError, ElmoResumeError
from ..files import output_dir

LOCK_FILE = "lock"  # in the output directory while a run holds it


class RunLock:
    """The lock of the run writing `output` (made where missing), taken by rank 0 of `world`
    processes on `device`; held until `release()` or the process ends."""

    def __init__(self, output: Path, rank: int, world: int, device: torch.device):
        self.output, self.created = output, False
        self.file: Optional[IO[str]] = None
        refused: Optional[ElmoError] = None
        if rank == 0:
            try:
                self.created = not os.path.lexists(output)
                output_dir(output, "pretrain")
                self.file = take_lock(output / LOCK_FILE, output)
            except ElmoError as err:
                refused = err
        if world > 1:  # all ranks stop together where rank 0 is refused
            flag = torch.tensor([float(refused is not None)], device=device)
            dist.all_reduce(flag)
            if refused is None and flag.item():
                refused = ElmoResumeError(f"{output}: rank 0 could not lock it (see its error)")
        if refused is not None:
            self.release()
            raise refused

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Release the lock (its file removed), and the directory where this run made it and left
        it empty (a run that failed before writing anything)."""
        if self.file is not None:
            release(self.file, remove=True)
            self.file = None
        if self.created:
            self.created = False
            try:
                self.output.rmdir()
            except OSError:
                pass  # holds the run's files
