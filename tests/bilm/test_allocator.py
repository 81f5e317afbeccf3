"""`keep_freed_memory`: the allocator settings of `python -m spacy_elmo embed` take effect, so the
large tensors a batch frees stay in the process for the next batch instead of going back to the
kernel and being faulted in anew; the embed command sets them.

Measured in the main thread, whose arena is glibc's main arena: the one every thread shares that
first allocates after the settings (`arena_max=1`). A thread that had allocated before keeps the
arena glibc gave it, so a thread's count would depend on what ran before it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spacy_elmo.bilm import allocator

from ..helpers import ENV, LINES, run_cli, write_lines

# Three batches of eight 24 MiB tensors, each batch freed before the next -> per batch, the
# minor page faults it took and the free bytes glibc holds after it is freed (mallinfo2).
BATCHES = """
import ctypes, json, resource, sys, torch
from spacy_elmo.bilm.allocator import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
faults, held = [], []
for _ in range(3):
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    batch = [torch.empty(6 << 20).fill_(1.0) for _ in range(8)]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
    del batch
    held.append(mallinfo2().fordblks)
print(json.dumps({"faults": faults, "held": held}))
"""
MIB = 1 << 20
PAGES = (24 * MIB) // 4096  # of one tensor


def batches(setting: str, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", BATCHES, setting],
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or allocator.platform.libc_ver()[0] != "glibc",
    reason="glibc's allocator settings: Linux with glibc only",
)
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["keep_freed_memory", "GLIBC_TUNABLES"])
def test_freed_memory_is_kept_for_the_next_batch_not_faulted_in_again(how):
    """As the embed command sets it, or as the README says a program of one's own can."""
    if how == "keep_freed_memory":
        kept = batches("kept")
    else:
        kept = batches("default", GLIBC_TUNABLES=allocator.TUNABLES)
    # glibc's defaults map the first batch's tensors and give them back when freed
    assert min(kept["held"]) >= 8 * 24 * MIB, kept  # the whole batch, kept
    assert sum(kept["faults"][1:]) < 3 * PAGES, kept  # reused, not faulted in again


def test_the_embed_command_keeps_freed_memory(fixture_dir, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    text = write_lines(tmp_path / "in.txt", LINES)
    assert run_cli("embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--no-progress") == 0
    assert calls == [1]
