"""`python -m spacy_elmo embed`: output equal to the API, the AllenNLP layout, tokenizers, bad
input, resume after an interruption or a kill (crash safety in depth: test_safety.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_elmo import load_bilm, save_bilm
from spacy_elmo.bilm import average_layers

from ..helpers import (
    ENV,
    FLOAT32_ATOL,
    LINES,
    REPO,
    generated,
    interrupt_embed_at_line,
    one_error_line,
    read_output,
    run_cli,
    write_lines,
)


@pytest.mark.parametrize("layer", ["all", "top", "average", "1"])
def test_embed_equals_the_api(weights, tmp_path, layer):
    text = write_lines(tmp_path / "in.txt", LINES)
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "out.hdf5",
            "--weights",
            weights,
            "--whitespace",
            "--layer",
            layer,
            "--batch-size",
            2,
            "--no-progress",
        )
        == 0
    )
    arrays, index, _ = read_output(tmp_path / "out.hdf5")
    expected = load_bilm(weights).embed([line.split() for line in LINES])
    assert sorted(arrays, key=int) == [str(i) for i in range(len(LINES))]
    for i, full in enumerate(expected):
        want = {"all": full, "top": full[-1], "average": average_layers(full), "1": full[1]}[layer]
        assert arrays[str(i)].dtype == np.float32
        np.testing.assert_array_equal(arrays[str(i)], want)
    assert arrays["1"].shape == ((3, 0, full.shape[-1]) if layer == "all" else (0, full.shape[-1]))
    assert index == {
        "The cat sat on the mat .": "3",
        "": "1",
        "Hello world": "2",
        "a b c d e f g h i j k l": "4",
    }


def test_without_state_embed_takes_the_weights_own_policy(fixture_dir, tmp_path):
    """--state's default (its help): the weights' own, here a model saved under "zero"."""
    zero = save_bilm(load_bilm(fixture_dir), tmp_path / "zero", state="zero")
    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5"
    assert run_cli("embed", text, out, "--weights", zero, "--whitespace", "--no-progress") == 0
    arrays, _, _ = read_output(out)
    sentences = [line.split() for line in LINES]
    for i, (own, warm) in enumerate(
        zip(load_bilm(zero).embed(sentences), load_bilm(zero, state="warm").embed(sentences))
    ):
        np.testing.assert_array_equal(arrays[str(i)], own)
        assert own.shape[1] == 0 or not np.array_equal(own, warm)


def test_embed_average_is_the_components_average_mix(fixture_dir, tmp_path):
    """`embed --layer average` and `doc._.elmo` (mix "average") of the same sentences are one
    average of the same layers: the same bits (one function in the core computes both)."""
    lines = LINES + ["Colorless green ideas sleep furiously !", "über x1 and dog ran far"]
    lines = [line for line in lines if line]
    text = write_lines(tmp_path / "in.txt", lines)
    for layer in ("all", "average"):
        args = ["embed", text, tmp_path / f"{layer}.hdf5", "-w", fixture_dir, "--whitespace"]
        assert run_cli(*args, "--layer", layer, "--no-progress") == 0
    layers, averages = (read_output(tmp_path / f"{x}.hdf5")[0] for x in ("all", "average"))
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": "average"})
    docs = nlp.pipe(Doc(nlp.vocab, words=line.split()) for line in lines)  # one batch, as embed's
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(doc._.elmo_layers, layers[str(i)])  # the same layers
        np.testing.assert_array_equal(doc._.elmo, averages[str(i)])


def test_embed_index_of_non_ascii_and_repeated_lines(fixture_dir, tmp_path):
    """sentence_to_index is ASCII JSON (non-ASCII escaped), written without a copy as one
    fixed-length string; a repeated line maps to its last index, as AllenNLP's did. The file is in
    HDF5 1.8's format."""
    lines = ["Straße 是 😀 café", 'a \\ " quote', "Straße 是 😀 café", "x"]
    text = write_lines(tmp_path / "in.txt", lines)
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "out.hdf5",
            "--weights",
            fixture_dir,
            "--whitespace",
            "--no-progress",
        )
        == 0
    )
    _, index, _ = read_output(tmp_path / "out.hdf5")
    assert index == {"Straße 是 😀 café": "2", 'a \\ " quote': "1", "x": "3"}
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert f["sentence_to_index"].shape == (1,) and f["sentence_to_index"].asstr()[0].isascii()
        # fixed-length bytes, not a vlen str (the README): `json.loads(index[0])` reads both
        assert h5py.check_string_dtype(f["sentence_to_index"].dtype).length is not None
        assert json.loads(f["sentence_to_index"][0]) == index
        # superblock version 2: the HDF5 1.8 format, whose groups index their links (flat memory)
        assert f.id.get_create_plist().get_version()[0] == 2


def test_embed_bounds_the_kernel_cache(fixture_dir, tmp_path, monkeypatch):
    """embed keeps oneDNN's kernel cache small (flat memory over long files), unless the user set
    it."""
    text = write_lines(tmp_path / "in.txt", LINES)
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert (
        run_cli(
            "embed", text, tmp_path / "a.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress"
        )
        == 0
    )
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    assert (
        run_cli(
            "embed", text, tmp_path / "b.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress"
        )
        == 0
    )
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"


def test_other_blocks_are_within_float32_rounding_of_a_single_run(fixture_dir, tmp_path):
    """`--flush-every --help`: a line's arrays depend on its block, within float32 rounding."""
    text = generated(tmp_path / "in.txt", 300)
    outputs = []
    for flush in ([], ["--flush-every", "7"]):
        out = tmp_path / f"out{len(flush)}.hdf5"
        args = ["embed", text, out, "-w", fixture_dir, "--whitespace", "--batch-size", "4"]
        assert run_cli(*args, *flush, "--no-progress") == 0
        outputs.append(read_output(out))
    (single, index, _), (blocks, index_blocks, _) = outputs
    assert index == index_blocks and single.keys() == blocks.keys() and len(single) == 300
    for name, array in single.items():
        np.testing.assert_allclose(blocks[name], array, rtol=0, atol=FLOAT32_ATOL)


def test_embed_spacy_tokenizer_and_docbin(fixture_dir, fixture_bilm, tmp_path):
    lines = ["Hello, world! ", "It's  fine."]  # a sentence's key is stripped, from either input
    nlp = spacy.blank("en")
    tokens = [[t.text for t in nlp(line) if not t.is_space] for line in lines]
    expected = fixture_bilm.embed(tokens)
    write_lines(tmp_path / "in.txt", lines)
    DocBin(docs=[nlp(line) for line in lines]).to_disk(tmp_path / "in.spacy")
    for source in ("in.txt", "in.spacy"):
        out = tmp_path / f"{source}.hdf5"
        assert (
            run_cli(
                "embed", tmp_path / source, out, "-w", fixture_dir, "--lang", "en", "--no-progress"
            )
            == 0
        )
        arrays, index, _ = read_output(out)
        assert index == {"Hello, world!": "0", "It's  fine.": "1"}
        for i, arr in enumerate(expected):
            np.testing.assert_array_equal(arrays[str(i)], arr)


def test_whitespace_with_a_docbin_is_one_error(fixture_dir, tmp_path, capsys):
    """A DocBin's Docs are tokenized already: `--whitespace` cannot apply, and was ignored."""
    DocBin(docs=[spacy.blank("en")("Hello, world!")]).to_disk(tmp_path / "in.spacy")
    args = ["embed", tmp_path / "in.spacy", tmp_path / "o.hdf5", "-w", fixture_dir]
    assert run_cli(*args, "--whitespace") != 0
    line = one_error_line(capsys.readouterr().err)
    assert "--whitespace" in line and "in.spacy" in line and not (tmp_path / "o.hdf5").exists()


def test_embed_bad_input(fixture_dir, tmp_path, capsys):
    text = write_lines(tmp_path / "in.txt", LINES)
    cases = [
        (
            ["embed", tmp_path / "nope.txt", tmp_path / "o.hdf5", "-w", fixture_dir],
            "input not found",
        ),
        (["embed", text, tmp_path / "o.hdf5", "-w", tmp_path / "nowhere"], "not found"),
        (["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--layer", "3"], "--layer"),
        (["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--lang", "zz"], "zz"),
        (
            ["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--state", "carry", "--resume"],
            "deterministic",
        ),
    ]
    for args, expect in cases:
        assert run_cli(*args, "--no-progress") == 1
        err = capsys.readouterr().err
        assert err.startswith("error:") and expect in err and "Traceback" not in err, err
    assert (
        run_cli(
            "embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress"
        )
        == 0
    )
    capsys.readouterr()
    assert (
        run_cli(
            "embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress"
        )
        == 1
    )
    assert "--resume" in capsys.readouterr().err  # an existing output is never overwritten
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "o.hdf5",
            "-w",
            fixture_dir,
            "--layer",
            "top",
            "--whitespace",
            "--resume",
            "--no-progress",
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "other settings" in err and "layer: 'all' then, 'top' now" in err
    (tmp_path / "a_dir").mkdir()  # a directory is no single-file output, with or without --resume
    for resume in ([], ["--resume"]):
        args = ["embed", text, tmp_path / "a_dir", "-w", fixture_dir, "--no-progress", *resume]
        assert run_cli(*args) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {tmp_path / 'a_dir'} is a directory: name an output file")
        assert "--shards" in err and "pass --resume" not in err and "Traceback" not in err, err
    assert list((tmp_path / "a_dir").iterdir()) == []


@pytest.mark.parametrize(
    "option, value",
    [
        ("--layer", "²"),
        ("--layer", "١"),
        ("--shard", "²/3"),
        ("--shard", "0/³"),
        ("--shard", "١/3"),
    ],
)
def test_numbers_are_ascii_digits(fixture_dir, tmp_path, capsys, option, value):
    """Other Unicode digits (superscripts, Arabic-Indic) are no number: one error line."""
    text = write_lines(tmp_path / "in.txt", LINES)
    args = ["embed", text, tmp_path / "o", "-w", fixture_dir, "--whitespace", "--no-progress"]
    assert run_cli(*args, option, value) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{option} must be" in line and repr(value) in line, line


def test_a_temporary_file_not_named_by_a_pid_is_left_alone(fixture_dir, tmp_path):
    """A stray `.manifest.json.².x.tmp` (not an ASCII pid) in a shard directory is not taken for a
    process's leftover."""
    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out"
    out.mkdir()
    (out / ".manifest.json.².ab.tmp").write_text("")
    args = ["--whitespace", "--no-progress", "--shards", 2, "--flush-every", 1]
    assert run_cli("embed", text, out, "-w", fixture_dir, *args) == 0
    assert (out / ".manifest.json.².ab.tmp").exists()


def many_lines(n):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "."]
    return [" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(n)]


def test_embed_resume_after_an_interruption(weights, tmp_path, monkeypatch, capsys):
    """Interrupted while making dataset 32 (parts of 5 lines): parts 0-5 (lines up to 30) are
    complete and kept; part 6, half written, left nothing; the output does not exist yet."""
    text = write_lines(tmp_path / "in.txt", many_lines(57))
    args = [
        "--weights",
        weights,
        "--whitespace",
        "--batch-size",
        2,
        "--flush-every",
        5,
        "--no-progress",
    ]
    assert run_cli("embed", text, tmp_path / "full.hdf5", *args) == 0
    interrupt_embed_at_line(monkeypatch, 33)
    assert run_cli("embed", text, tmp_path / "part.hdf5", *args) == 130
    assert "--resume (from line 31, counting from 1)" in capsys.readouterr().err
    assert not (tmp_path / "part.hdf5").exists()
    work = tmp_path / "part.hdf5.partial"
    assert sorted(p.name for p in work.glob("part-*")) == [f"part-{i:05d}.hdf5" for i in range(6)]
    with h5py.File(work / "part-00005.hdf5", "r") as f:
        assert sorted(f) == ["25", "26", "27", "28", "29", "sentence_to_index"]
    monkeypatch.undo()  # no more Ctrl-C
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "part.hdf5",
            *[a for a in args if a != "--no-progress"],
            "--resume",
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "27 in this run" in err
    assert "100%" in err and "57/57" in err, err[-500:]  # the bar counts the lines kept from before
    full, part = read_output(tmp_path / "full.hdf5"), read_output(tmp_path / "part.hdf5")
    assert full[1] == part[1] and sorted(full[0]) == sorted(part[0])
    for key, arr in full[0].items():
        np.testing.assert_array_equal(part[0][key], arr)
    assert not work.exists()


def test_embed_resume_after_a_kill(fixture_dir, tmp_path):
    """A process killed (SIGKILL, no cleanup) in the middle of the file resumes to the same
    output."""
    text = write_lines(tmp_path / "in.txt", many_lines(90))
    args = [
        "--weights",
        str(fixture_dir),
        "--whitespace",
        "--batch-size",
        "2",
        "--flush-every",
        "7",
        "--threads",  # the run records its threads; this process's count depends on earlier tests
        "1",
        "--no-progress",
    ]
    script = (
        "import os, signal, sys\n"
        "import spacy_elmo.embed.job as ef\n"
        "real = ef.read_sentences\n"
        "def dying(*a, **k):\n"
        "    for i, item in enumerate(real(*a, **k)):\n"
        "        if i == 70:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        yield item\n"
        "ef.read_sentences = dying\n"
        "from spacy_elmo.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    killed = subprocess.run(
        [sys.executable, "-c", script, "embed", str(text), str(tmp_path / "part.hdf5"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert run_cli("embed", text, tmp_path / "part.hdf5", *args, "--resume") == 0
    assert run_cli("embed", text, tmp_path / "full.hdf5", *args) == 0
    full, part = read_output(tmp_path / "full.hdf5"), read_output(tmp_path / "part.hdf5")
    assert full[1] == part[1] and sorted(full[0]) == sorted(part[0])
    for key, arr in full[0].items():
        np.testing.assert_array_equal(part[0][key], arr)


def test_embed_help_documents_every_option():
    import typer.main

    from spacy_elmo.cli import app

    command = typer.main.get_command(app).commands["embed"]
    for param in command.params:
        assert getattr(param, "help", None), param.name


def test_each_failure_is_an_elmo_error_of_its_kind(fixture_dir, tmp_path):
    """Raised at the source, before the CLI: bad options ElmoConfigError, a missing or foreign input
    ElmoFileError naming it, a refused resume ElmoResumeError (an ElmoFileError)."""
    from spacy_elmo import ElmoConfigError, ElmoFileError, ElmoResumeError
    from spacy_elmo.embed import EmbedOptions, run

    text, out, weights = (
        write_lines(tmp_path / "in.txt", ["a b", "", "c"]),
        tmp_path / "o.hdf5",
        str(fixture_dir),
    )
    with pytest.raises(ElmoConfigError, match="--dtype"):
        run(EmbedOptions(text, out, weights, dtype="float64"))
    with pytest.raises(ElmoConfigError, match="go with --engine ray"):
        run(EmbedOptions(text, out, weights, workers=2))
    for carry in ({}, {"state": "carry"}):  # before anything is cut into blocks
        with pytest.raises(ElmoConfigError, match="batch_size must be an integer"):
            run(EmbedOptions(text, out, weights, batch_size=0, **carry))
        with pytest.raises(ElmoConfigError, match="--flush-every must be a positive"):
            run(EmbedOptions(text, out, weights, flush_every=0, **carry))
    with pytest.raises(ElmoConfigError, match="--engine ray writes every shard"):
        run(EmbedOptions(text, out, weights, engine="ray"))
    # Python's values the command line cannot give: shards=-1 wrote no shard and reported success
    for name, value in (("shards", -1), ("shards", 0), ("shards", "2"), ("workers", 0)):
        with pytest.raises(ElmoConfigError, match=f"--{name} must be a positive integer"):
            run(EmbedOptions(text, out, weights, **{name: value}))
    with pytest.raises(ElmoConfigError, match="--shard must be I/N"):
        run(EmbedOptions(text, out, weights, shard=1))
    with pytest.raises(ElmoConfigError, match="--layer must be"):
        run(EmbedOptions(text, out, weights, layer=1))
    assert not out.exists()
    with pytest.raises(ElmoFileError, match="input not found: .*missing.txt"):
        run(EmbedOptions(tmp_path / "missing.txt", out, weights))
    with pytest.raises(ElmoConfigError, match="--layer"):
        run(EmbedOptions(text, out, weights, layer="9"))
    (tmp_path / "bad.spacy").write_bytes(b"garbage")
    with pytest.raises(ElmoFileError, match="bad.spacy: not a spaCy DocBin"):
        run(EmbedOptions(tmp_path / "bad.spacy", out, weights))
    assert run(EmbedOptions(text, out, weights, whitespace=True)).wrote
    with pytest.raises(ElmoResumeError, match="exists: pass --resume"):
        run(EmbedOptions(text, out, weights, whitespace=True))
    with pytest.raises(ElmoResumeError, match="other settings"):
        run(EmbedOptions(text, out, weights, whitespace=True, resume=True, batch_size=3))


def test_a_long_line_is_written_in_pieces(fixture_dir, fixture_bilm, tmp_path):
    """A line of more than 256 x --batch-size tokens is computed and written in pieces (the
    recurrence carried across them): the arrays of the whole line, within float32 rounding, in every
    layer choice."""
    rng = np.random.default_rng(1)
    long = " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat", ".", "über"], size=1500))
    text = write_lines(tmp_path / "in.txt", ["A short one .", long, "", "and another"])
    expected = fixture_bilm.embed(
        [line.split() for line in ["A short one .", long, "", "and another"]]
    )
    for layer in ("all", "top", "1"):
        out = tmp_path / f"{layer}.hdf5"
        assert (
            run_cli(
                "embed",
                text,
                out,
                "-w",
                fixture_dir,
                "--whitespace",
                "--batch-size",
                "2",
                "--layer",
                layer,
                "--no-progress",
            )
            == 0
        )
        arrays, _, _ = read_output(out)
        for i, want in enumerate(expected):
            want = want if layer == "all" else want[-1 if layer == "top" else int(layer)]
            assert arrays[str(i)].shape == want.shape
            np.testing.assert_allclose(arrays[str(i)], want, atol=FLOAT32_ATOL, rtol=0)
    state = run_cli(
        "embed",
        text,
        tmp_path / "carry.hdf5",
        "-w",
        fixture_dir,
        "--whitespace",
        "--batch-size",
        "2",
        "--state",
        "carry",
        "--no-progress",
    )
    assert state == 1 and not (tmp_path / "carry.hdf5").exists()


MEASURE = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_is_bounded_by_the_batch_settings_not_the_line(fixture_dir, tmp_path):
    """A 120,000-token line peaks within 60 MB of a 10-token one (before, memory grew with the line:
    98 MB more at 120,000 tokens, 255 MB at 200,000, and a 400k-token line of a larger model
    exhausted a few GB)."""
    rng = np.random.default_rng(2)
    peaks = []
    for n in (10, 120_000):
        text = write_lines(
            tmp_path / f"{n}.txt", [" ".join(rng.choice(["the", "cat", "sat", ".", "x"], size=n))]
        )
        command = [
            sys.executable,
            "-m",
            "spacy_elmo",
            "embed",
            str(text),
            str(tmp_path / f"{n}.hdf5"),
            "-w",
            str(fixture_dir),
            "--whitespace",
            "--batch-size",
            "4",
            "--layer",
            "all",
            "--no-progress",
        ]
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, *command],
            capture_output=True,
            text=True,
            timeout=280,
            env={**ENV},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        peaks.append(int(done.stdout.split()[-1]) / 1024)  # MB
    with h5py.File(tmp_path / "120000.hdf5", "r") as f:
        assert f["0"].shape == (3, 120_000, 32)
    assert peaks[1] - peaks[0] < 60, peaks


def test_embed_threads_beyond_any_machine_is_one_error(fixture_dir, tmp_path, capsys):
    """`--threads 100000` crashed in torch ('could not create a primitive'; issue 32 item 8)."""
    from ..helpers import one_error_line

    text = write_lines(tmp_path / "in.txt", ["The cat sat ."])
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "out.hdf5",
            "-w",
            fixture_dir,
            "--whitespace",
            "--threads",
            "100000",
            "--no-progress",
        )
        == 1
    )
    assert "threads" in one_error_line(capsys.readouterr().err)


def _long_token_lines(path, n, size=100_000):
    return write_lines(path, [f"{i:05d}" + "t" * size for i in range(n)])


def test_memory_of_lines_of_one_long_token_is_bounded_by_the_block(fixture_dir, tmp_path):
    """Lines of one 100 KB token each (issue 34 item 4: 50 MB of input peaked at 474 MB): neither
    the char-id cache nor the output's `sentence_to_index` holds the whole input; a block
    (`--flush-every`) of lines is held."""
    import tracemalloc

    text = _long_token_lines(tmp_path / "in.txt", 200)  # 20 MB
    args = [
        "embed",
        text,
        tmp_path / "out.hdf5",
        "-w",
        fixture_dir,
        "--whitespace",
        "--flush-every",
        10,
        "--no-progress",
    ]
    tracemalloc.start()
    try:
        assert run_cli(*args) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    arrays, index, _ = read_output(tmp_path / "out.hdf5")
    assert len(arrays) == 200 and index[f"{7:05d}" + "t" * 100_000] == "7"
    assert peak < 10_000_000, f"peak {peak:,} bytes for 20 MB of input in blocks of 10 lines (1 MB)"


def test_a_large_index_is_written_in_pieces_to_the_same_bytes(fixture_dir, tmp_path, monkeypatch):
    """`sentence_to_index` of an assembled output is written a part at a time, byte for byte as
    written whole."""
    from spacy_elmo.embed import h5writer

    text = _long_token_lines(tmp_path / "in.txt", 30, size=1000)
    args = ["-w", fixture_dir, "--whitespace", "--flush-every", 4, "--no-progress"]
    monkeypatch.setattr(h5writer, "INDEX_IN_PIECES", 1 << 40)
    assert run_cli("embed", text, tmp_path / "whole.hdf5", *args) == 0
    monkeypatch.setattr(h5writer, "INDEX_IN_PIECES", 0)
    assert run_cli("embed", text, tmp_path / "pieces.hdf5", *args) == 0
    assert (tmp_path / "whole.hdf5").read_bytes() == (tmp_path / "pieces.hdf5").read_bytes()


def test_embed_says_what_auto_picked_and_records_it(fixture_dir, tmp_path, capsys):
    """`--precision auto` names the path it picked and why on stderr; the output's settings record
    the path (a resumed run or another shard on this host resolves it the same way)."""
    text = write_lines(tmp_path / "in.txt", ["a b c", "d e"])
    args = ("embed", text, tmp_path / "out.hdf5", "--weights", fixture_dir, "--whitespace")
    assert run_cli(*args, "--precision", "auto", "--no-progress") == 0
    bilm = load_bilm(fixture_dir, precision="auto")
    err = capsys.readouterr().err
    assert f"precision {bilm.precision} ({bilm.precision_reason})" in err
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert json.loads(f.attrs["spacy_elmo.settings"])["precision"] == bilm.precision
