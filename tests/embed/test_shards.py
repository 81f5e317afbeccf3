"""`embed --shards N`, `--shard I/N`, `--dtype`, `--compression` and `spacy_elmo.open_embeddings`:
the same arrays as a single-file run, bit for bit with the same blocks (else within float32
rounding); `--shards N` fits any input of N lines or more; a killed shard is redone and the others
kept; a changed input or weights is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import ElmoFileError, open_embeddings

from ..helpers import (
    ENV,
    FLOAT32_ATOL,
    REPO,
    generated,
    kill_at_rename,
    one_error_line,
    read_output,
    run_cli,
)
from ..reference_bilm import TINY_OPTIONS, write_random_weights


def args(text, out, weights, *extra, flush_every=50):
    block = [] if flush_every is None else ["--flush-every", str(flush_every)]
    return [
        "embed",
        str(text),
        str(out),
        "-w",
        str(weights),
        "--whitespace",
        "--batch-size",
        "8",
        *block,
        "--no-progress",
        *map(str, extra),
    ]


@pytest.fixture(scope="module")
def single(fixture_dir, tmp_path_factory):
    """600 generated lines (blank ones among them) and their single-file output."""
    tmp = tmp_path_factory.mktemp("single")
    text = generated(tmp / "in.txt", 600, seed=5)
    assert run_cli(*args(text, tmp / "one.hdf5", fixture_dir)) == 0
    return text, tmp / "one.hdf5"


def assert_same_lines(a, b):
    with open_embeddings(a) as x, open_embeddings(b) as y:
        assert len(x) == len(y)
        for i, (u, v) in enumerate(zip(x, y)):
            assert u.dtype == v.dtype, i
            np.testing.assert_array_equal(u, v)


def test_shards_equal_the_single_file(single, fixture_dir, tmp_path):
    text, one = single
    out = tmp_path / "sharded"
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ranges"] == [[0, 150], [150, 300], [300, 450], [450, 600]]
    assert manifest["complete"] == [True] * 4 and manifest["settings"]["input_sha256"]
    assert sorted(p.name for p in out.glob("shard-*.hdf5")) == [
        f"shard-{i:05d}.hdf5" for i in range(4)
    ]
    assert_same_lines(one, out)
    # each shard is readable with h5py alone, in the per-line layout: its lines by their number in
    # the input
    arrays, index, _ = read_output(one)
    for start, stop in manifest["ranges"]:
        with h5py.File(out / f"shard-{start // 150:05d}.hdf5", "r") as f:
            assert sorted((k for k in f if k != "sentence_to_index"), key=int) == [
                str(i) for i in range(start, stop)
            ]
            np.testing.assert_array_equal(f[str(start)][...], arrays[str(start)])
            shard_index = json.loads(f["sentence_to_index"][0])
            assert all(start <= int(v) < stop for v in shard_index.values())
    with open_embeddings(out) as reader:
        np.testing.assert_array_equal(reader[-1], arrays["599"])
        with pytest.raises(IndexError):
            reader[600]
    with pytest.raises(ElmoFileError, match="shard-00001.hdf5: one shard of .*open the directory"):
        open_embeddings(out / "shard-00001.hdf5")
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 0  # complete: nothing to do
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        *(f"shard-{i:05d}.hdf5" for i in range(4)),
    ]


def test_any_shard_count_fits_without_choosing_a_block(fixture_dir, tmp_path, capsys):
    """`--shards 3` on 303 lines, no --flush-every: blocks of 101 lines, one per shard (it refused:
    one block of the default 10,000 lines). Lines computed in other blocks than a single file's
    agree within float32 rounding; `--shard I/N` runs choose the same blocks. Fewer lines than
    shards is one error line."""
    text = generated(tmp_path / "in.txt", 303, seed=7)
    assert run_cli(*args(text, tmp_path / "one.hdf5", fixture_dir, flush_every=None)) == 0
    out = tmp_path / "sharded"
    assert run_cli(*args(text, out, fixture_dir, "--shard", "1/3", flush_every=None)) == 0
    assert run_cli(*args(text, out, fixture_dir, "--shards", 3, flush_every=None)) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        *(f"shard-{i:05d}.hdf5" for i in range(3)),
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["ranges"] == [[0, 101], [101, 202], [202, 303]]
        and manifest["settings"]["flush_every"] == 101
    )
    with open_embeddings(tmp_path / "one.hdf5") as x, open_embeddings(out) as y:
        assert len(x) == len(y) == 303
        for u, v in zip(x, y):
            np.testing.assert_allclose(u, v, atol=FLOAT32_ATOL, rtol=0)
    capsys.readouterr()
    two = generated(tmp_path / "two.txt", 2, seed=7)
    assert run_cli(*args(two, tmp_path / "s2", fixture_dir, "--shards", 3, flush_every=None)) == 1
    assert "has 2 line(s)" in one_error_line(capsys.readouterr().err)


def test_a_block_is_10000_lines_unless_shards_need_more_or_carry_rounds_it_up(tmp_path):
    """The README and --flush-every's help: 10,000 lines by default; fewer where --shards N needs
    N blocks; under --state carry rounded up to a multiple of --batch-size; --flush-every as
    given."""
    from spacy_elmo.embed import EmbedOptions

    def block(lines, whole_batches=False, **settings):
        options = EmbedOptions(tmp_path / "in.txt", tmp_path / "out", "w", **settings)
        return options.block_size(lines, whole_batches)

    assert block(50_000) == block(50_000, shards=4) == 10_000
    assert block(30_000, shards=4) == 7_500 and block(30_001, shards=4) == 7_501
    assert (
        block(50_000, True, batch_size=64) == 10_048 and block(50_000, True, batch_size=8) == 10_000
    )
    assert block(50_000, flush_every=7) == 7 and block(50_000, True, flush_every=7) == 64


@pytest.mark.parametrize("shards", [None, 1, 2, 3, 5])
def test_the_planned_ranges_cover_every_line_once_in_whole_blocks(shards):
    """Whatever the line count (a last block short or not): the pieces' ranges run from line 0 to
    the last line without gap or overlap, and begin on block boundaries; single-file parts are one
    block each."""
    from spacy_elmo.embed.outdir import plan

    for lines in range(1, 40):
        for block in range(1, 9):
            if shards is not None and shards > -(-lines // block):
                continue  # fewer blocks than shards: a shard would hold none
            ranges = plan(lines, block, shards)
            assert [a for a, _ in ranges[1:]] == [b for _, b in ranges[:-1]], ranges
            assert ranges[0][0] == 0 and ranges[-1][1] == lines, (lines, block, ranges)
            assert all(a % block == 0 and a < b for a, b in ranges), ranges
            assert shards is not None or all(b - a <= block for a, b in ranges), ranges


def test_one_shard_at_a_time(single, fixture_dir, tmp_path, capsys):
    text, one = single
    out = tmp_path / "sharded"
    assert run_cli(*args(text, out, fixture_dir, "--shard", "1/3")) == 0
    missing = f"shards 0 and 2 of {out} are still missing (--shard I/3 writes shard I)"
    assert capsys.readouterr().err.splitlines()[-1] == missing
    # run again: this shard is complete, the others are not (not "OUT is complete already")
    assert run_cli(*args(text, out, fixture_dir, "--shard", "1/3")) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{out}: shard 1 of 3 is complete already",
        missing,
    ]
    assert sorted(p.name for p in out.glob("shard-*.hdf5")) == ["shard-00001.hdf5"]
    assert json.loads((out / "manifest.json").read_text())["complete"] == [False, True, False]
    with pytest.raises(ElmoFileError, match="shard-00000.hdf5, shard-00002.hdf5 not written"):
        open_embeddings(out)
    capsys.readouterr()
    assert run_cli(*args(text, out, fixture_dir, "--shards", 3)) == 0
    assert "400 in this run" in capsys.readouterr().err
    assert_same_lines(one, out)
    # other shard count: refused
    assert run_cli(*args(text, out, fixture_dir, "--shard", "1/4")) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "shards: 3 then, 4 now" in line and "with the same ones (--shard I/3)" in line, line


def test_shards_of_uneven_blocks_hold_every_line(single, fixture_dir, tmp_path):
    """12 blocks of 50 lines in 5 shards: runs of 2 or 3 whole blocks, the last ending at the
    input's last line."""
    text, one = single
    out = tmp_path / "sharded"
    assert run_cli(*args(text, out, fixture_dir, "--shards", 5)) == 0
    ranges = json.loads((out / "manifest.json").read_text())["ranges"]
    assert ranges == [[0, 100], [100, 200], [200, 350], [350, 450], [450, 600]]
    assert_same_lines(one, out)


@pytest.mark.parametrize(
    "setting, then, now",
    [
        ("dtype", "float32", "float16"),
        ("layer", "all", "top"),
        ("compression", "none", "gzip"),
        ("batch_size", "8", "4"),
        ("flush_every", "50", "75"),
    ],
)
def test_a_shard_with_other_settings_is_refused(
    single, fixture_dir, tmp_path, capsys, setting, then, now
):
    """Each setting that changes a line's array or its file is recorded: a shard of a run begun
    with another is refused, naming both values and the option to give."""
    text, _ = single
    out = tmp_path / "sharded"
    flag = "--" + setting.replace("_", "-")
    flush = {"flush_every": None} if setting == "flush_every" else {}
    assert run_cli(*args(text, out, fixture_dir, "--shard", "0/2", flag, then, **flush)) == 0
    capsys.readouterr()
    assert run_cli(*args(text, out, fixture_dir, "--shard", "1/2", flag, now, **flush)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{setting}: " in line and f"continue it with the same ones ({flag} {then})" in line
    assert not (out / "shard-00001.hdf5").exists()


def test_shards_on_other_thread_counts_are_refused(single, fixture_dir, tmp_path, capsys):
    """The thread count changes float32 bits, so it is recorded: a shard or a resume on another
    count is refused, saying what differs and how to go on (shards of 1 and 2 threads were mixed
    silently into one output)."""
    text, _ = single
    out = tmp_path / "sharded"
    threads = torch.get_num_threads()
    try:
        assert run_cli(*args(text, out, fixture_dir, "--shard", "0/2", "--threads", 1)) == 0
        capsys.readouterr()
        assert run_cli(*args(text, out, fixture_dir, "--shard", "1/2", "--threads", 2)) == 1
        line = one_error_line(capsys.readouterr().err)
        assert (
            "threads: 1 then, 2 now" in line
            and "continue it with the same ones (--threads 1)" in line
        )
        assert run_cli(*args(text, out, fixture_dir, "--shard", "1/2", "--threads", 1)) == 0
    finally:
        torch.set_num_threads(threads)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] == [True, True] and manifest["settings"]["threads"] == 1
    assert manifest["settings"]["spacy_elmo"] and manifest["settings"]["torch"] == torch.__version__


@pytest.mark.timeout(120)
def test_a_killed_shard_is_redone_and_the_others_kept(single, fixture_dir, tmp_path):
    text, one = single
    out = tmp_path / "sharded"
    script = kill_at_rename("shard-00002.hdf5")
    killed = subprocess.run(
        [sys.executable, "-c", script, *args(text, out, fixture_dir, "--shards", 4)],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / "shard-00002.hdf5.tmp").is_file() and not (out / "shard-00002.hdf5").exists()
    kept = {i: (out / f"shard-{i:05d}.hdf5").stat().st_ino for i in (0, 1)}
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 0
    assert {i: (out / f"shard-{i:05d}.hdf5").stat().st_ino for i in (0, 1)} == kept
    assert not list(out.glob("*.tmp"))
    assert_same_lines(one, out)


def test_changed_input_or_weights_are_refused(single, fixture_dir, tmp_path, capsys):
    text, _ = single
    mine = tmp_path / "in.txt"
    mine.write_bytes(text.read_bytes())
    out = tmp_path / "sharded"
    assert run_cli(*args(mine, out, fixture_dir, "--shard", "0/2")) == 0
    mine.write_bytes(mine.read_bytes().replace(b"cat", b"dog"))
    capsys.readouterr()
    assert run_cli(*args(mine, out, fixture_dir, "--shards", 2)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "input changed" in line and "input_sha256" in line, line
    mine.write_bytes(text.read_bytes())
    other = write_random_weights(tmp_path / "other", TINY_OPTIONS, seed=3)
    assert run_cli(*args(mine, out, other, "--shards", 2)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "other settings (weights_fingerprint: " in line, line
    assert run_cli(*args(mine, out, fixture_dir, "--shards", 2, "--state", "carry")) == 1
    assert "deterministic" in one_error_line(capsys.readouterr().err)
    assert run_cli(*args(mine, out, fixture_dir, "--shards", 13)) == 1  # 12 blocks of 50 lines
    assert "smaller --flush-every" in one_error_line(capsys.readouterr().err)
    # blocks of one line: fewer shards is the only way
    assert run_cli(*args(mine, tmp_path / "o", fixture_dir, "--shards", 700, flush_every=1)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.endswith("give 600 or fewer") and "smaller --flush-every" not in line, line


@pytest.mark.parametrize("layer", ["all", "top"])
def test_float16_is_float32_rounded(single, fixture_dir, tmp_path, layer):
    text, _ = single
    assert run_cli(*args(text, tmp_path / "32.hdf5", fixture_dir, "--layer", layer)) == 0
    assert (
        run_cli(
            *args(text, tmp_path / "16.hdf5", fixture_dir, "--layer", layer, "--dtype", "float16")
        )
        == 0
    )
    (a32, index32, _), (a16, index16, _) = (
        read_output(tmp_path / "32.hdf5"),
        read_output(tmp_path / "16.hdf5"),
    )
    assert index16 == index32 and sorted(a16) == sorted(a32)
    for key, arr in a32.items():
        assert a16[key].dtype == np.float16
        np.testing.assert_array_equal(a16[key], arr.astype(np.float16))
    with h5py.File(tmp_path / "16.hdf5", "r") as f:
        settings = json.loads(f.attrs["spacy_elmo.settings"])
    assert (
        settings["dtype"] == "float16"
        and settings["layer"] == layer
        and settings["tokenizer"] == "whitespace"
    )
    assert len(settings["weights_fingerprint"]) == 64 and settings["state"] == "warm"


@pytest.mark.parametrize("compression", ["gzip", "lzf"])
def test_compression_keeps_every_value(single, fixture_dir, tmp_path, compression):
    text, one = single
    out = tmp_path / "c.hdf5"
    assert run_cli(*args(text, out, fixture_dir, "--compression", compression)) == 0
    assert_same_lines(one, out)
    with h5py.File(out, "r") as f:
        assert (
            f["0"].compression == compression and f["0"].shuffle and f["0"].chunks == f["0"].shape
        )
    assert out.stat().st_size < 0.9 * one.stat().st_size


def test_open_embeddings_of_a_single_file(single):
    _, one = single
    arrays, _, _ = read_output(one)
    with open_embeddings(one) as reader:
        assert len(reader) == 600 and reader.settings["lines"] == 600
        np.testing.assert_array_equal(reader[7], arrays["7"])
        np.testing.assert_array_equal(reader[np.int64(-600)], arrays["0"])
        assert sum(1 for _ in reader) == 600
        with pytest.raises(IndexError):
            reader[-601]


def test_an_empty_input_opens_as_zero_lines_sharded_or_not(fixture_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert run_cli(*args(empty, tmp_path / "one.hdf5", fixture_dir, flush_every=None)) == 0
    assert run_cli(*args(empty, tmp_path / "out", fixture_dir, "--shards", 2)) == 0
    for output in (tmp_path / "one.hdf5", tmp_path / "out"):
        with open_embeddings(output, verify=True) as reader:
            assert len(reader) == 0 and list(reader) == []
            with pytest.raises(IndexError):
                reader[0]


def test_a_kill_between_the_last_shard_and_the_manifest_is_repaired_by_the_rerun(
    single, fixture_dir, tmp_path
):
    """Killed after the last shard's rename and before the manifest records it: the same command
    again records it (nothing to embed), and the directory reads."""
    text, one = single
    out = tmp_path / "sharded"
    assert run_cli(*args(text, out, fixture_dir, "--shards", 3)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "complete": [True, True, False]}))
    assert run_cli(*args(text, out, fixture_dir, "--shards", 3)) == 0
    assert json.loads((out / "manifest.json").read_text())["complete"] == [True] * 3
    assert_same_lines(one, out)


# ------------------------------------------------------------------------------------ a manifest
# checked, not trusted
@pytest.fixture(scope="module")
def sharded(single, fixture_dir, tmp_path_factory):
    """The 600 lines of `single` in 4 shards of 150 lines."""
    text, _ = single
    out = tmp_path_factory.mktemp("sharded") / "out"
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 0
    return text, out


def _edit_manifest(edit):
    def change(out):
        manifest = json.loads((out / "manifest.json").read_text())
        edit(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest))

    return change


def _swap(out):
    a, b = out / "shard-00001.hdf5", out / "shard-00002.hdf5"
    a.rename(out / "x")
    b.rename(a)
    (out / "x").rename(b)


def _truncate(out):
    path = out / "shard-00002.hdf5"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _append(out):
    """Bytes added to a shard's end: h5py still reads it; its size differs from its record."""
    with open(out / "shard-00002.hdf5", "ab") as f:
        f.write(b"\0" * 64)


def _flip_a_value(out):
    """One byte of a line's array changed in place: the file keeps its size and its structure."""
    path = out / "shard-00001.hdf5"
    with h5py.File(path, "r") as f:
        offset = next(f[k].id.get_offset() for k in f if k != "sentence_to_index" and f[k].size)
    data = bytearray(path.read_bytes())
    data[offset + 1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "edit, shard, on_open",
    [
        # overlaps the next
        (
            _edit_manifest(lambda m: m["ranges"].__setitem__(0, [0, 160])),
            0,
            True,
        ),
        # the last range shortened
        (
            _edit_manifest(lambda m: m["ranges"].__setitem__(3, [450, 550])),
            3,
            True,
        ),
        # the last shard left out of the manifest: its lines would be missing
        (
            _edit_manifest(lambda m: [m[k].pop() for k in ("ranges", "complete", "shards")]),
            3,
            True,
        ),
        # a shard's record edited: another range than the manifest gives it
        (
            _edit_manifest(lambda m: m["shards"][1].__setitem__("range", [0, 150])),
            1,
            True,
        ),
        (_swap, 1, True),
        (_truncate, 2, True),
        (_append, 2, True),
        # found by its sha256: a rerun, or open_embeddings(..., verify=True)
        (
            _flip_a_value,
            1,
            False,
        ),
    ],
)
def test_a_shard_that_disagrees_with_the_manifest_is_named(
    sharded, fixture_dir, tmp_path, capsys, edit, shard, on_open
):
    """Overlapping or shortened ranges, swapped or truncated shards, a changed value:
    open_embeddings and a rerun each raise one error naming the shard (they gave KeyErrors, 9,500 of
    10,000 lines, and "complete already")."""
    text, source = sharded
    out = tmp_path / "out"
    shutil.copytree(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for i, record in enumerate(manifest["shards"]):
        file = out / f"shard-{i:05d}.hdf5"
        assert record == {
            "range": manifest["ranges"][i],
            "lines": 150,
            "bytes": file.stat().st_size,
            "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        }
    edit(out)
    name = f"shard-{shard:05d}.hdf5"
    for verify in (True, False) if on_open else (True,):
        with pytest.raises(ElmoFileError, match=name):
            with open_embeddings(out, verify=verify) as reader:
                for _ in reader:
                    pass
    capsys.readouterr()
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 1
    assert name in one_error_line(capsys.readouterr().err)


def test_a_manifest_of_another_format_is_refused(sharded, tmp_path):
    """A manifest that names another format (a later version's) is not read as this one's."""
    _, source = sharded
    out = tmp_path / "out"
    shutil.copytree(source, out)
    _edit_manifest(lambda m: m.update(format="spacy_elmo.embed/2"))(out)
    with pytest.raises(ElmoFileError, match="manifest.json: not a manifest .*spacy_elmo.embed/1"):
        open_embeddings(out)


def test_a_manifest_with_fewer_shard_records_than_shards_is_refused_on_a_rerun(
    sharded, fixture_dir, tmp_path, capsys
):
    """A record dropped from the manifest: a rerun says so, naming the manifest, where it would
    have dropped the last shard's record and left that shard unchecked."""
    text, source = sharded
    out = tmp_path / "out"
    shutil.copytree(source, out)
    _edit_manifest(lambda m: m["shards"].pop())(out)
    capsys.readouterr()
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "manifest.json: 3 shard records for 4 shards" in line, line


def test_a_manifest_without_shard_records_gets_them_on_a_rerun(
    sharded, fixture_dir, tmp_path, capsys
):
    """A manifest of an earlier version (no per-shard records): open_embeddings says to run the
    command again, which records each shard's size and sha256; then it reads."""
    text, source = sharded
    out = tmp_path / "out"
    shutil.copytree(source, out)
    _edit_manifest(lambda m: m.pop("shards"))(out)
    with pytest.raises(ElmoFileError, match="run the same embed command again"):
        open_embeddings(out)
    assert run_cli(*args(text, out, fixture_dir, "--shards", 4)) == 0
    assert "complete already (600 lines)" in capsys.readouterr().err
    assert len(json.loads((out / "manifest.json").read_text())["shards"]) == 4
    assert_same_lines(source, out)


def test_help_says_a_kill_loses_the_shard_in_progress(capsys):
    """`--flush-every`'s help: a single file loses at most the part being written, but a shard is
    one file written whole, so a kill under --shards N loses the shard in progress."""
    assert run_cli("embed", "--help") == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "a kill loses at most the part being written" in text, text
    assert "each shard is one file, written whole: a kill loses the shard in progress" in text
