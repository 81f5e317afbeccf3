"""`keep_freed_memory`: the allocator settings of `python -m spacy_elmo embed` take effect, so a
thread that frees and allocates a large tensor again reuses its memory instead of faulting it in
anew; the embed command sets them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spacy_elmo.bilm import allocator

from ..helpers import ENV, LINES, run_cli, write_lines

# A thread allocates, writes and frees 24 MiB twenty times -> the minor page faults it took.
FAULTS = """
import resource, sys, threading, torch
from spacy_elmo.bilm.allocator import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
faults = []
def work():
    start = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(20):
        torch.empty(6 << 20).fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - start)
thread = threading.Thread(target=work)
thread.start()
thread.join()
print(faults[0])
"""
PAGES = (24 << 20) // 4096  # of one allocation


def thread_faults(setting: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FAULTS, setting],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or allocator.platform.libc_ver()[0] != "glibc",
    reason="glibc's allocator settings: Linux with glibc only",
)
@pytest.mark.timeout(240)
def test_kept_memory_is_reused_by_a_thread_not_faulted_in_again():
    kept, default = thread_faults("kept"), thread_faults("default")
    assert kept < 4 * PAGES, (kept, default)  # the first allocations only
    assert default > 2 * kept, (kept, default)  # glibc's defaults fault most of them in again


def test_the_embed_command_keeps_freed_memory(fixture_dir, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    text = write_lines(tmp_path / "in.txt", LINES)
    assert run_cli("embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--no-progress") == 0
    assert calls == [1]
