"""`python -m spacy_elmo embed` under crashes and bad input: kill -9 at any moment then `--resume`
gives the output of an uninterrupted run, bit for bit; a full disk, a read-only or locked output,
an input edited in place, invalid UTF-8 each end in one `error: ...` line; lines split as `wc -l`
counts them."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np
import pytest

from spacy_elmo import ElmoFileError, ElmoResumeError, load_bilm, open_embeddings

from ..helpers import (
    ENV,
    LINES,
    REPO,
    generated,
    interrupt_embed_at_line,
    kill_at_rename,
    one_error_line,
    read_output,
    run_cli,
    tmpfs,
    write_lines,
)


def assert_same_output(a, b):
    (arrays_a, index_a, _), (arrays_b, index_b, _) = read_output(a), read_output(b)
    assert index_a == index_b
    assert sorted(arrays_a, key=int) == sorted(arrays_b, key=int)
    for key, arr in arrays_a.items():
        assert arrays_b[key].dtype == arr.dtype
        np.testing.assert_array_equal(arrays_b[key], arr)


def embed_args(text, out, fixture_dir, *extra):
    return [
        "embed",
        str(text),
        str(out),
        "-w",
        str(fixture_dir),
        "--whitespace",
        "--batch-size",
        "16",
        "--flush-every",
        "500",
        "--no-progress",
        *map(str, extra),
    ]


def spawn(args, script=None):
    command = (
        [sys.executable, "-m", "spacy_elmo", *args]
        if script is None
        else [sys.executable, "-c", script, *args]
    )
    return subprocess.Popen(
        command, env=ENV, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def started(out: Path) -> bool:
    """The run has begun writing: its work directory (or, before it had one, the output) exists."""
    return out.exists() or out.with_name(out.name + ".partial").exists()


def files_of(out: Path) -> dict[str, int]:
    """Name -> modification time of the output and of everything in its work directory."""
    paths = [out, *(out.with_name(out.name + ".partial").glob("*"))]
    return {p.name: p.stat().st_mtime_ns for p in paths if p.exists()}


def wait_until_writing(out: Path, proc: subprocess.Popen) -> None:
    """Return once `proc` has written to its output (a file appeared or changed), or has ended."""
    before, deadline = files_of(out), time.monotonic() + 60
    while proc.poll() is None and files_of(out) == before and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture(scope="module")
def reference(fixture_dir, tmp_path_factory):
    """An uninterrupted run on 3,000 generated lines: `(input, output)`."""
    tmp = tmp_path_factory.mktemp("reference")
    text = generated(tmp / "in.txt", 3000)
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", *embed_args(text, tmp / "full.hdf5", fixture_dir)],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return text, tmp / "full.hdf5"


# -------------------------------------------------------------------------------------------
# crashes
@pytest.mark.timeout(180)
def test_kill_at_random_moments_then_resume(reference, fixture_dir, tmp_path):
    """Five kill -9s at random moments of one output's runs (while embedding, renaming a part or
    assembling; each after the run's first write), each followed by `--resume`: the final output
    equals the uninterrupted run's, every dataset bit for bit."""
    text, full = reference
    out = tmp_path / "out.hdf5"
    rng = random.Random(13)
    for attempt in range(5):
        proc = spawn(embed_args(text, out, fixture_dir, *(["--resume"] if attempt else [])))
        wait_until_writing(out, proc)
        time.sleep(rng.uniform(0.2, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 0
    assert_same_output(full, out)


@pytest.mark.timeout(120)
def test_kill_between_a_part_write_and_its_rename(reference, fixture_dir, tmp_path):
    """The kill is injected: os.replace of part 2 kills the process, so part 2 lies complete under
    its temporary name, never renamed. `--resume` ignores it, redoes part 2, and gets the same
    output."""
    text, full = reference
    out = tmp_path / "out.hdf5"
    proc = spawn(embed_args(text, out, fixture_dir), script=kill_at_rename("part-00002.hdf5"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    work = tmp_path / "out.hdf5.partial"
    names = sorted(p.name for p in work.iterdir())
    assert (
        "part-00000.hdf5" in names and "part-00001.hdf5" in names and "part-00002.hdf5" not in names
    )
    assert any(n.startswith("part-00002.hdf5") and n != "part-00002.hdf5" for n in names), names
    assert not out.exists()
    assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 0
    assert_same_output(full, out)
    assert not work.exists()


KILL_IN_ASSEMBLY = """
import os, signal, sys
from spacy_elmo.embed import h5writer
real, calls = h5writer.H5Writer.copy_from, []
def copy_from(self, src, name):
    calls.append(name)
    if len(calls) == 1000:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, src, name)
h5writer.H5Writer.copy_from = copy_from
from spacy_elmo.cli import main
main(sys.argv[1:])
"""


@pytest.mark.timeout(120)
def test_kill_during_assembly_keeps_the_parts(reference, fixture_dir, tmp_path, capsys):
    """Killed (injected) while copying the 1,000th dataset into the output: every part is kept, the
    output does not exist (only its temporary file); `--resume` assembles again."""
    text, full = reference
    out = tmp_path / "out.hdf5"
    proc = spawn(embed_args(text, out, fixture_dir), script=KILL_IN_ASSEMBLY)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    work = tmp_path / "out.hdf5.partial"
    assert sorted(p.name for p in work.glob("part-*.hdf5")) == [
        f"part-{i:05d}.hdf5" for i in range(6)
    ]
    assert (
        not out.exists()
        and (work / "out.hdf5.tmp").is_file()
        and sorted(tmp_path.iterdir()) == [work]
    )
    assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 0
    assert "(0 in this run)" in capsys.readouterr().err
    assert_same_output(full, out)


def test_kill_while_removing_the_parts(fixture_dir, tmp_path, capsys):
    """OUTPUT complete and its work directory half removed (a kill after the final rename):
    `--resume` says it is complete and removes the rest."""
    text = generated(tmp_path / "in.txt", 120, seed=6)
    out = tmp_path / "out.hdf5"
    assert run_cli(*embed_args(text, out, fixture_dir)) == 0
    work = tmp_path / "out.hdf5.partial"
    work.mkdir()
    (work / "part-00000.hdf5").write_bytes(b"left over")
    capsys.readouterr()
    assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 0
    assert "complete already (120 lines)" in capsys.readouterr().err and not work.exists()


# ---------------------------------------------------------------------------------------- full disk


@pytest.mark.timeout(120)
def test_full_disk_is_one_line_and_resumable(reference, fixture_dir, tmp_path):
    """A real full disk (a 3 MB tmpfs; the output of 3,000 lines is some 7 MB, a part 1.2 MB):
    one line, exit 1, the complete parts kept and nothing half written; then, with space freed
    (the tmpfs grown), `--resume` finishes to the uninterrupted output."""
    text, full = reference
    with tmpfs(tmp_path / "disk", "3m") as disk:
        out = disk / "out.hdf5"
        done = subprocess.run(
            [sys.executable, "-m", "spacy_elmo", *embed_args(text, out, fixture_dir)],
            env=ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stderr[-2000:]
        line = one_error_line(done.stderr)
        assert "disk full while writing" in line and line.endswith(
            "free space and run again with --resume"
        ), line
        kept = sorted(p.name for p in (disk / "out.hdf5.partial").iterdir())
        parts = len(kept) - 2  # complete parts, in order; nothing half written
        assert 1 <= parts < 6 and kept == [
            "lock",
            "manifest.json",
            *(f"part-{i:05d}.hdf5" for i in range(parts)),
        ], kept
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 0
        assert_same_output(full, out)


@pytest.mark.timeout(60)
def test_full_disk_injected(fixture_dir, tmp_path, monkeypatch, capsys):
    """ENOSPC injected in-process at the 40th dataset write (h5py's create_dataset raises it): one
    line, exit 1; `--resume` then finishes to the uninterrupted output."""
    text = generated(tmp_path / "in.txt", 300, seed=1)
    assert run_cli(*embed_args(text, tmp_path / "full.hdf5", fixture_dir)) == 0
    real, calls = h5py.Group.create_dataset, []

    def full_disk(self, name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 40:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", full_disk)
    capsys.readouterr()
    assert run_cli(*embed_args(text, tmp_path / "out.hdf5", fixture_dir)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "disk full while writing" in line and line.endswith(
        "free space and run again with --resume"
    ), line
    monkeypatch.setattr(h5py.Group, "create_dataset", real)
    assert run_cli(*embed_args(text, tmp_path / "out.hdf5", fixture_dir, "--resume")) == 0
    assert_same_output(tmp_path / "full.hdf5", tmp_path / "out.hdf5")


# ------------------------------------------------------------------------------------------- resume
def interrupted_run(text, out, fixture_dir, monkeypatch, at=100):
    """Run embed on `text` and interrupt it (KeyboardInterrupt) while it makes dataset `at`."""
    from spacy_elmo.embed import compute

    real = compute.select_layer
    interrupt_embed_at_line(monkeypatch, at)
    assert run_cli(*embed_args(text, out, fixture_dir)) == 130
    monkeypatch.setattr(compute, "select_layer", real)


def test_resume_refuses_an_input_edited_in_place(fixture_dir, tmp_path, monkeypatch, capsys):
    text = generated(tmp_path / "in.txt", 300, seed=2)
    interrupted_run(text, tmp_path / "out.hdf5", fixture_dir, monkeypatch)
    data = text.read_bytes()
    edited = data[:-40] + data[-40:].replace(b"cat", b"dog").replace(b"the", b"mat")
    assert len(edited) == len(data) and edited != data
    text.write_bytes(edited)
    capsys.readouterr()
    assert run_cli(*embed_args(text, tmp_path / "out.hdf5", fixture_dir, "--resume")) == 1
    line = one_error_line(capsys.readouterr().err)
    assert str(text) in line and "sha256" in line and "changed" in line, line


def test_an_interrupted_carry_run_starts_again(fixture_dir, tmp_path, monkeypatch, capsys):
    """Under --state carry, which cannot resume, Ctrl-C says so and the same command starts the run
    again (to an uninterrupted run's output); a resumable run's work is never discarded by it."""
    text, out = generated(tmp_path / "in.txt", 300, seed=3), tmp_path / "out.hdf5"
    carry = ("--state", "carry", "--flush-every", "48")  # 3 batches of 16
    assert run_cli(*embed_args(text, tmp_path / "full.hdf5", fixture_dir, *carry)) == 0
    interrupt_embed_at_line(monkeypatch, 120)
    assert run_cli(*embed_args(text, out, fixture_dir, *carry)) == 130
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "cannot be resumed: the same command starts it again" in err and "--resume" not in err
    assert (out.with_name(out.name + ".partial") / "part-00001.hdf5").is_file()
    assert run_cli(*embed_args(text, out, fixture_dir, *carry, "--resume")) == 1
    assert "without --resume, an interrupted carry run starts again" in one_error_line(
        capsys.readouterr().err
    )
    assert run_cli(*embed_args(text, out, fixture_dir, *carry)) == 0
    assert_same_output(tmp_path / "full.hdf5", out)
    capsys.readouterr()
    assert run_cli(*embed_args(text, out, fixture_dir, *carry)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "exists: remove it first" in line and "--resume" not in line, line
    warm = tmp_path / "warm.hdf5"
    interrupted_run(text, warm, fixture_dir, monkeypatch, at=120)
    parts = sorted(p.name for p in warm.with_name("warm.hdf5.partial").iterdir())
    capsys.readouterr()
    assert run_cli(*embed_args(text, warm, fixture_dir, *carry)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "an interrupted run of --state warm" in line and "--resume" in line, line
    assert sorted(p.name for p in warm.with_name("warm.hdf5.partial").iterdir()) == parts


SLOW = """
import sys, time
import spacy_elmo.embed.compute as ef
real = ef.select_layer
def slow(*a, **k):
    time.sleep(0.02)
    return real(*a, **k)
ef.select_layer = slow
from spacy_elmo.cli import main

main(sys.argv[1:])
"""


@pytest.mark.timeout(120)
def test_locked_output_is_reported_as_locked(reference, fixture_dir, tmp_path):
    """A second run on an output that another process is writing says so (and does not suggest
    removing it)."""
    text, _ = reference
    out = tmp_path / "out.hdf5"
    proc = spawn(embed_args(text, out, fixture_dir), script=SLOW)
    deadline = time.monotonic() + 60
    while not started(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        again = subprocess.run(
            [sys.executable, "-m", "spacy_elmo", *embed_args(text, out, fixture_dir, "--resume")],
            env=ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert again.returncode == 1
    line = one_error_line(again.stderr)
    assert "another process" in line and "remove" not in line, line


def test_flock_held_by_another_process(fixture_dir, tmp_path, monkeypatch, capsys):
    text = generated(tmp_path / "in.txt", 300, seed=3)
    out = tmp_path / "out.hdf5"
    interrupted_run(text, out, fixture_dir, monkeypatch)
    with open(tmp_path / "out.hdf5.partial" / "lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        capsys.readouterr()
        assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "locked by another process" in line and "remove" not in line, line


PAUSED = """
import sys, time
from pathlib import Path
import spacy_elmo.embed.job as ef
real, marker = ef.read_sentences, Path(sys.argv.pop(1))
def paused(*a, **k):
    marker.with_suffix(".started").write_text("")
    while not marker.with_suffix(".go").exists():
        time.sleep(0.02)
    yield from real(*a, **k)
ef.read_sentences = paused
from spacy_elmo.cli import main

main(sys.argv[1:])
"""


@contextmanager
def paused_run(marker: Path, args) -> Iterator[subprocess.Popen]:
    """`embed ARGS` in a child (`PAUSED`), held before it reads a line while the block runs; then
    let go, and it must finish."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED, str(marker), *map(str, args)],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not marker.with_suffix(".started").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the paused run did not start"
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read()
        yield proc
    finally:
        marker.with_suffix(".go").write_text("")
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sharded", [False, True])
def test_a_run_started_beside_a_live_one_says_another_run_holds_it(
    fixture_dir, tmp_path, capsys, sharded
):
    """Two runs at once into one output (issue 34 item 7): the second is told that another run, by
    its pid, is writing it, not to pass --resume; the first finishes, and a finished shard directory
    holds no lock files."""
    text = generated(tmp_path / "in.txt", 60, seed=5)
    out, marker = tmp_path / ("out" if sharded else "out.hdf5"), tmp_path / "first"
    extra = ["--shards", 2, "--flush-every", 30] if sharded else []
    with paused_run(marker, embed_args(text, out, fixture_dir, *extra)) as proc:
        for again in ([], ["--resume"])[: 1 if sharded else 2]:
            capsys.readouterr()
            assert run_cli(*embed_args(text, out, fixture_dir, *extra, *again)) == 1
            line = one_error_line(capsys.readouterr().err)
            assert (
                "another process" in line
                and f"pid {proc.pid}" in line
                and "pass --resume" not in line
            ), line
    if sharded:
        assert run_cli(*embed_args(text, out, fixture_dir, *extra)) == 0  # complete already
        assert sorted(p.name for p in out.iterdir()) == [
            "manifest.json",
            "shard-00000.hdf5",
            "shard-00001.hdf5",
        ]


@pytest.mark.timeout(180)
def test_shard_runs_into_one_output_go_on_at_the_same_time(fixture_dir, tmp_path):
    """--shard's help: the shards can run at the same time. While `--shard 0/2` holds its shard
    (paused before it reads a line), `--shard 1/2` writes its own; then the output opens whole."""
    text = generated(tmp_path / "in.txt", 60, seed=5)
    out, marker = tmp_path / "out", tmp_path / "first"
    extra = ["--flush-every", 30]
    with paused_run(marker, embed_args(text, out, fixture_dir, *extra, "--shard", "0/2")):
        assert run_cli(*embed_args(text, out, fixture_dir, *extra, "--shard", "1/2")) == 0
        assert (out / "shard-00001.hdf5").is_file() and not (out / "shard-00000.hdf5").exists()
    with open_embeddings(out) as reader:
        assert len(reader) == 60


@pytest.mark.timeout(60)
def test_clearing_a_run_directory_keeps_the_lock_it_holds(tmp_path):
    """A run that starts its directory again removes all in it but its lock: a second writer is
    still refused (removing the lock file would let one lock a new file beside the held one)."""
    from spacy_elmo.embed.outdir import WorkDir

    work = WorkDir(tmp_path / "o.hdf5.partial", tmp_path / "o.hdf5", "part")
    work.create()
    work.lock()
    try:
        (work.path / "part-00000.hdf5").write_bytes(b"x")
        (work.path / "manifest.json").write_text("{}")
        work.clear()
        assert [p.name for p in work.path.iterdir()] == ["lock"]
        with pytest.raises(ElmoResumeError):
            WorkDir(work.path, work.output, "part").lock()
    finally:
        work.unlock()


def test_read_only_output_is_reported_as_read_only(fixture_dir, tmp_path, monkeypatch, capsys):
    """An interrupted run on a file system then remounted read-only: `--resume` says read-only,
    and a new run into a read-only directory too (root ignores permission bits: a real ro mount)."""
    text = generated(tmp_path / "in.txt", 300, seed=4)
    with tmpfs(tmp_path / "disk", "16m") as disk:
        interrupted_run(text, disk / "out.hdf5", fixture_dir, monkeypatch)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        capsys.readouterr()
        for extra in (["--resume"], []):
            target = disk / ("out.hdf5" if extra else "new.hdf5")
            assert run_cli(*embed_args(text, target, fixture_dir, *extra)) == 1
            line = one_error_line(capsys.readouterr().err)
            assert "read-only" in line and "remove" not in line, line


# ------------------------------------------------------------------------------------------- lines
def test_lines_split_as_wc_counts_them(fixture_dir, tmp_path):
    """Only \\n ends a line: CRLF, a lone \\r, U+2028 and a NUL byte inside a line keep every later
    dataset index equal to its line number; every text round-trips through sentence_to_index."""
    raw = (
        b"the cat\r\n"
        b"a\rb c\n" + "dog\u2028ran far\n".encode() + b"x\x00y z\n"
        b"\n" + "über .\u0085 a\n".encode() + b"last line"
    )
    text = tmp_path / "in.txt"
    text.write_bytes(raw)
    assert (
        int(subprocess.run(["wc", "-l"], input=raw, capture_output=True, check=True).stdout) + 1
        == 7
    )
    lines = [line.decode("utf-8").strip() for line in raw.split(b"\n")]
    assert run_cli(*embed_args(text, tmp_path / "out.hdf5", fixture_dir)) == 0
    arrays, index, _ = read_output(tmp_path / "out.hdf5")
    assert sorted(arrays, key=int) == [str(i) for i in range(7)]
    assert index == {line: str(i) for i, line in enumerate(lines)}
    expected = load_bilm(fixture_dir).embed([line.split() for line in lines], batch_size=16)
    for i, arr in enumerate(expected):
        np.testing.assert_array_equal(arrays[str(i)], arr)


def test_a_docbin_bomb_is_refused_while_it_is_decompressed(fixture_dir, tmp_path, capsys):
    """A `.spacy` input is decompressed against a bound (--max-docbin-bytes): 200 KB of zlib'd zeros
    that inflate to 200 MB are refused once past it, in one error naming the file and the option, at
    a memory peak far below what they inflate to (the whole was decompressed before "not a
    DocBin")."""
    import tracemalloc
    import zlib

    bomb = tmp_path / "in.spacy"
    bomb.write_bytes(zlib.compress(bytes(200 << 20), 9))
    tracemalloc.start()
    try:
        code = run_cli(
            "embed",
            bomb,
            tmp_path / "out.hdf5",
            "-w",
            fixture_dir,
            "--max-docbin-bytes",
            10 << 20,
            "--no-progress",
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 1
    line = one_error_line(capsys.readouterr().err)
    assert (
        str(bomb) in line and "more than 10,485,760 bytes" in line and "--max-docbin-bytes" in line
    ), line
    assert peak < 50 << 20, peak


def test_a_docbin_of_exactly_the_bound_is_read(tmp_path):
    """--max-docbin-bytes is the most a `.spacy` input may decompress to: a DocBin of exactly that
    many bytes is read, one byte more is refused."""
    import zlib

    import spacy
    from spacy.tokens import DocBin

    from spacy_elmo.embed.sentences import scan_input

    nlp = spacy.blank("en")
    path = tmp_path / "in.spacy"
    path.write_bytes(DocBin(docs=[nlp("The cat sat ."), nlp("Hello")]).to_bytes())
    size = len(zlib.decompress(path.read_bytes()))
    assert scan_input(path, max_docbin_bytes=size)["lines"] == 2
    with pytest.raises(ElmoFileError, match=f"more than {size - 1:,} bytes"):
        scan_input(path, max_docbin_bytes=size - 1)


def _docbin_message(edit):
    """A `.spacy` file's bytes: a DocBin of one Doc, its msgpack message edited by `edit`."""
    import zlib

    import spacy
    import srsly
    from spacy.tokens import DocBin

    docbin = DocBin()
    docbin.add(spacy.blank("en")("Hello world"))
    return zlib.compress(
        srsly.msgpack_dumps(edit(srsly.msgpack_loads(zlib.decompress(docbin.to_bytes()))))
    )


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: {"a": 1},
        lambda m: [1, 2],
        lambda m: {**m, "strings": []},
        lambda m: {**m, "attrs": []},
    ],
    ids=["other-keys", "a-list", "no-strings", "no-attrs"],
)
def test_a_docbin_of_other_content_is_one_error_naming_it(fixture_dir, tmp_path, capsys, edit):
    """A `.spacy` input that spaCy cannot read (keys missing, another type, strings left out) is
    refused before any work, in one ElmoFileError naming it: no output, no work directory."""
    bad = tmp_path / "in.spacy"
    bad.write_bytes(_docbin_message(edit))
    assert run_cli("embed", bad, tmp_path / "out.hdf5", "-w", fixture_dir, "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{bad}: not a spaCy DocBin (.spacy) file" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.spacy"]


def test_a_byte_order_mark_is_not_text(fixture_dir, tmp_path):
    """A UTF-8 byte order mark at the start of the input (Windows editors write one) is no part of
    the first line: neither in its first token nor in sentence_to_index, with either tokenizer."""
    text = tmp_path / "in.txt"
    text.write_bytes(b"\xef\xbb\xbfThe cat sat\nHello world\n")
    expected = load_bilm(fixture_dir).embed([["The", "cat", "sat"], ["Hello", "world"]])
    for tokenizer in (["--whitespace"], ["--lang", "en"]):
        out = tmp_path / f"{tokenizer[-1]}.hdf5"
        assert run_cli("embed", text, out, "-w", fixture_dir, *tokenizer, "--no-progress") == 0
        arrays, index, _ = read_output(out)
        assert index == {"The cat sat": "0", "Hello world": "1"}
        np.testing.assert_array_equal(arrays["0"], expected[0])


def test_invalid_utf8_names_line_and_byte_offset(fixture_dir, tmp_path, capsys):
    raw = b"the cat\n" + b"a b\n" * 2000 + b"ok \xc3\x28 bad\n" + b"dog\n"
    text = tmp_path / "in.txt"
    text.write_bytes(raw)
    assert run_cli(*embed_args(text, tmp_path / "out.hdf5", fixture_dir)) == 1
    line = one_error_line(capsys.readouterr().err)
    offset = raw.index(b"\xc3\x28")
    assert str(text) in line and "line 2002" in line and f"byte {offset}" in line, line


# -------------------------------------------------------------------------------------------
# hostile outputs
@pytest.fixture(scope="module")
def small_output(fixture_dir, tmp_path_factory):
    """The output of LINES (line 0: 7 tokens, 3 layers of 32)."""
    tmp = tmp_path_factory.mktemp("small")
    text = write_lines(tmp / "in.txt", LINES)
    assert (
        run_cli("embed", text, tmp / "out.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress")
        == 0
    )
    return tmp / "out.hdf5"


def _external_storage(f, tmp):
    secret = tmp / "secret"
    secret.write_bytes(b"not yours" * 100)
    del f["0"]
    f.create_dataset("0", shape=(900,), dtype="u1", external=[(str(secret), 0, 900)])


def _external_link(f, tmp):
    with h5py.File(tmp / "other.hdf5", "w") as other:
        other["data"] = np.ones((3, 7, 32), dtype=np.float32)
    del f["0"]
    f["0"] = h5py.ExternalLink(str(tmp / "other.hdf5"), "/data")


def _virtual(f, tmp):
    with h5py.File(tmp / "other.hdf5", "w") as other:
        other["data"] = np.ones((3, 7, 32), dtype=np.float32)
    layout = h5py.VirtualLayout(shape=(3, 7, 32), dtype=np.float32)
    layout[...] = h5py.VirtualSource(str(tmp / "other.hdf5"), "data", shape=(3, 7, 32))
    del f["0"]
    f.create_virtual_dataset("0", layout)


def _dangling(f, tmp):
    del f["0"]
    f["0"] = h5py.SoftLink("/nowhere")


def _soft_link(f, tmp):
    del f["0"]
    f["0"] = h5py.SoftLink("/3")


def _replaced(data):
    def edit(f, tmp):
        del f["0"]
        f["0"] = data

    return edit


def _group(f, tmp):
    del f["0"]
    f.create_group("0")


@pytest.mark.parametrize(
    "edit, problem",
    [
        (_external_storage, "outside the file"),
        (_external_link, "ExternalLink"),
        (_virtual, "outside the file"),
        (_dangling, "SoftLink"),
        (_soft_link, "SoftLink"),
        (_group, "not a dataset"),
        (_replaced(np.ones((3, 7, 32), dtype=np.uint8)), "dtype uint8"),
        (_replaced(np.ones((3, 7, 32), dtype=np.complex64)), "dtype complex64"),
        (_replaced(np.ones(7, dtype=np.float32)), "shape (7,)"),
        (_replaced(np.ones((2, 3, 7, 32), dtype=np.float32)), "shape (2, 3, 7, 32)"),
        # --layer all writes (layers, tokens, dim)
        (
            _replaced(np.ones((7, 32), dtype=np.float32)),
            "shape (7, 32)",
        ),
        (_replaced(np.ones((3, 7, 32), dtype=np.float64)), "dtype float64"),  # written as float32
    ],
)
def test_an_output_reads_nothing_outside_itself(small_output, tmp_path, edit, problem):
    """External storage, external or soft links, virtual datasets and arrays that are not the float
    `(layers, tokens, dim)` of the output's settings are one ElmoFileError naming the file and the
    line; the other lines still read."""
    out = tmp_path / "out.hdf5"
    out.write_bytes(small_output.read_bytes())
    with h5py.File(out, "r+") as f:
        edit(f, tmp_path)
    with open_embeddings(out) as reader:
        assert reader[2].shape == (3, 2, 32)
        with pytest.raises(ElmoFileError) as error:
            reader[0]
    message = str(error.value)
    assert str(out) in message and "'0'" in message and problem in message, message


def test_a_weight_file_is_not_an_output(fixture_dir, small_output, tmp_path):
    """Another hdf5 file (a weight file, an output without its index or with unreadable settings) is
    one ElmoFileError saying it is not an embed output, never a KeyError."""
    weights = fixture_dir / "lm_weights.hdf5"
    with pytest.raises(
        ElmoFileError, match=f"{weights}: not an output of `python -m spacy_elmo embed`"
    ):
        open_embeddings(weights)
    out = tmp_path / "out.hdf5"
    out.write_bytes(small_output.read_bytes())
    for settings in ("{not json", "[1, 2]", np.int64(5)):
        with h5py.File(out, "r+") as f:
            f.attrs["spacy_elmo.settings"] = settings
        with pytest.raises(ElmoFileError, match="spacy_elmo.settings"):
            open_embeddings(out)
    with h5py.File(out, "r+") as f:
        del f.attrs["spacy_elmo.settings"]
        del f["sentence_to_index"]
    with pytest.raises(ElmoFileError, match="not an output of `python -m spacy_elmo embed`"):
        open_embeddings(out)


def test_resume_onto_an_hdf5_file_that_embed_did_not_write_is_one_error_line(
    fixture_dir, tmp_path, capsys
):
    """`--resume` onto an existing hdf5 file without embed's settings (a weight file, an output of
    `allennlp elmo`): one error line saying it is not an output of embed, and the file kept."""
    text = write_lines(tmp_path / "in.txt", LINES[:5])
    out = tmp_path / "out.hdf5"
    out.write_bytes((fixture_dir / "lm_weights.hdf5").read_bytes())
    assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{out}: not an output of `python -m spacy_elmo embed`" in line, line
    assert out.read_bytes() == (fixture_dir / "lm_weights.hdf5").read_bytes()


def test_resume_onto_a_file_whose_settings_are_not_json_is_one_error_line(
    fixture_dir, tmp_path, capsys
):
    """The settings `--resume` compares, when they are no JSON object it can read (an integer of
    more digits than Python converts, a torn attribute, a list, a JSON number, a number), are one
    error naming the file."""
    text = write_lines(tmp_path / "in.txt", LINES[:5])
    out = tmp_path / "out.hdf5"
    for settings in ("9" * 5000, '{"torn', "[1, 2]", "5", np.int64(5)):
        with h5py.File(out, "w") as f:
            f.attrs["spacy_elmo.settings"] = settings
        assert run_cli(*embed_args(text, out, fixture_dir, "--resume")) == 1
        assert str(out) in one_error_line(capsys.readouterr().err)
