"""`python -m spacy_elmo convert | info`, the entry points and every command's help, on the fixture
and on random tiny weights (`embed`: tests/embed/; `download`: tests/weights/test_download.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm, save_bilm
from spacy_elmo.files import sha256_file

from ..helpers import ENV, REPO, SENTS, full_disk_in_torch_save, one_error_line, run_cli, tmpfs
from ..model_files import lowercasing_model
from ..readme_blocks import README


# ------------------------------------------------------------------------------------------------
# info
def test_info_json(weights, capsys):
    assert run_cli("info", weights, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    bilm = load_bilm(weights)
    assert (
        info["parameters"]
        == sum(p.numel() for p in bilm.parameters())
        == sum(info["parameters_by_part"].values())
    )
    n_layers = bilm.options.n_layers
    assert info["output_layers"] == n_layers + 1 and info["output_dim"] == bilm.output_dim
    assert [k for k in info["parameters_by_part"] if k.startswith("LSTM")] == [
        f"LSTM layer {i} {d}" for i in range(n_layers) for d in ("forward", "backward")
    ]
    assert (
        info["parameters_by_part"]["LSTM layer 0 forward"]
        == info["parameters_by_part"]["LSTM layer 0 backward"]
    )
    assert info["widths"]["ELMo layers"] == bilm.output_dim and info["softmax_parameters"] is None
    for entry in info["files"]:
        with open(entry["path"], "rb") as f:
            assert entry["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert len(info["files"]) == 2


def test_info_reports_the_state_policy_given_else_the_weights_own(fixture_dir, capsys):
    """`--state` chooses the policy `info` loads the biLM with (hdf5 weights': warm); another value
    is one error line."""
    for args, policy in [
        ((), "warm"),
        (("--state", "zero"), "zero"),
        (("--state", "carry"), "carry"),
    ]:
        assert run_cli("info", fixture_dir, "--json", *args) == 0
        assert json.loads(capsys.readouterr().out)["state_policy"] == policy
    assert run_cli("info", fixture_dir, "--state", "zero") == 0
    assert "zero" in capsys.readouterr().out
    assert run_cli("info", fixture_dir, "--state", "cold") == 1
    assert "cold" in one_error_line(capsys.readouterr().err)


def test_info_table_and_softmax(fixture_dir, tmp_path, capsys):
    save_bilm(load_bilm(fixture_dir), tmp_path)
    torch.save({"weight": torch.zeros(10, 16), "bias": torch.zeros(10)}, tmp_path / "lm_head.pt")
    assert run_cli("info", tmp_path) == 0
    out = capsys.readouterr().out
    assert (
        "LSTM layer 1 backward" in out
        and "highway 1" in out
        and "softmax (lm_head.pt)" in out
        and "170" in out
    )
    assert sha256_file(tmp_path / "weights.pt") in out


@pytest.mark.parametrize("name", ["char_table.json", "vocab.txt"])
def test_info_refuses_a_file_symlinked_outside_the_model_directory(
    fixture_dir, tmp_path, capsys, name
):
    """info hashed a char_table.json symlinked to a file outside the model directory (one the
    loader never reads: this model has no character table): every file info reads is looked up
    inside the directory, as the loader's are."""
    outside = tmp_path / "outside.txt"
    outside.write_text("a file outside the model directory", encoding="utf-8")
    model = tmp_path / "own"
    save_bilm(load_bilm(fixture_dir), model)
    (model / name).symlink_to(outside)
    assert run_cli("info", model, "--json") == 1
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert f"{model / name}: refused" in line and "outside the model directory" in line, line
    assert sha256_file(outside) not in out + err
    (model / name).unlink()
    (model / name).symlink_to(model / "bilm.json")  # inside: hashed
    assert run_cli("info", model, "--json") == 0
    assert str(model / name) in capsys.readouterr().out


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    assert run_cli("info", tmp_path / "absent") == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "not found" in err and "Traceback" not in err


def test_an_options_file_of_too_many_digits_is_one_error_line(fixture_dir, tmp_path, capsys):
    (tmp_path / "options.json").write_text("9" * 5000)
    (tmp_path / "weights.hdf5").write_bytes((fixture_dir / "lm_weights.hdf5").read_bytes())
    assert run_cli("info", tmp_path) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "options.json" in line and "4300 digits" in line and "set_int_max" not in line


@pytest.mark.parametrize(
    "args",
    [
        ("info", "LONG"),
        ("init-random", "LONG"),
        ("convert", "FIXTURE", "LONG"),
        ("convert", "LONG", "out"),
    ],
)
def test_a_name_too_long_is_one_error_line(fixture_dir, tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    named = {"LONG": "a" * 300, "FIXTURE": str(fixture_dir)}
    assert run_cli(*(named.get(a, a) for a in args)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "a" * 300 in line and "File name too long" in line
    assert list(tmp_path.iterdir()) == []


def test_module_entry_point_and_help(fixture_dir, capsys):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "info", str(fixture_dir), "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=REPO,
    )
    assert json.loads(out.stdout)["output_dim"] == 32
    for command in ("embed", "convert", "info", "download", "init-config", "init-random"):
        assert run_cli(command, "--help") == 0
        out = capsys.readouterr().out
        assert "Usage" in out
        if command == "download":  # the README's table names the mirror's variable
            assert "SPACY_ELMO_BASE_URL" in out
    assert run_cli("pretrain", "--help") == 0  # argparse's own help, with the dotted overrides
    assert "--section.key" in capsys.readouterr().out


def test_the_readmes_command_table_names_every_command():
    """Each command `python -m spacy_elmo` has is a row of the README's command table, and each row
    a command it has (a command added or renamed without its row fails)."""
    from spacy_elmo.cli import app

    text = README.read_text(encoding="utf-8").split("## Command line", 1)[1].split("\n\n")[2]
    rows = [line.split(" | ")[0] for line in text.splitlines()[2:]]
    named = {m for row in rows for m in re.findall(r"`([a-z-]+)(?: [A-Z]+)+`", row)}
    assert named == {command.name for command in app.registered_commands}


def test_every_command_documents_itself_and_each_argument_and_option():
    """The README: `COMMAND --help` documents each, every argument and option with its help."""
    import typer.main

    from spacy_elmo.cli import app

    for name, command in typer.main.get_command(app).commands.items():
        assert command.help, name
        assert [p.name for p in command.params if not getattr(p, "help", None)] == [], name


# ---------------------------------------------------------------------------------------------
# convert


def test_convert_round_trips_exactly(weights, tmp_path, capsys):
    assert run_cli("convert", weights, tmp_path / "own") == 0  # hdf5 -> own, detected
    assert (tmp_path / "own" / "bilm.json").is_file()
    # own -> hdf5, detected
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5", "--stem", "tiny") == 0
    assert (tmp_path / "h5" / "elmo_tiny_weights.hdf5").is_file()
    original = load_bilm(weights).embed(SENTS)
    for converted in (tmp_path / "own", tmp_path / "h5"):
        for a, b in zip(original, load_bilm(converted).embed(SENTS)):
            np.testing.assert_array_equal(a, b)
    with (
        h5py.File(next(weights.glob("*.hdf5"))) as a,
        h5py.File(tmp_path / "h5" / "elmo_tiny_weights.hdf5") as b,
    ):
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(a[name][...], b[name][...])
    assert run_cli("convert", weights, tmp_path / "h5") == 1  # never into a non-empty directory
    assert "not an empty directory" in capsys.readouterr().err


@pytest.mark.parametrize("stem", ["../x", "a/b", "", "a b", ".hidden", "x" * 101, "naïve"])
def test_convert_refuses_a_stem_that_is_no_file_name_part(fixture_dir, tmp_path, capsys, stem):
    """A stem that would write elsewhere, fail deep in the write ('cannot write DEST'), be dropped
    (an empty one wrote plain names) or make names of spaces is one error naming the rule, before
    any model is read or any file written."""
    assert run_cli("convert", fixture_dir, tmp_path / "h5", "--to", "hdf5", "--stem", stem) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "stem must be 1 to 100 ASCII letters" in line and repr(stem) in line, line
    assert not (tmp_path / "h5").exists() and not (tmp_path / "x_options.json").exists()


def test_convert_refuses_a_stem_for_this_projects_format(fixture_dir, tmp_path, capsys):
    """`--stem` names hdf5 files: with `--to own` (or SRC in the hdf5 layout, so own by default)
    it was silently ignored."""
    for to in (["--to", "own"], []):
        assert run_cli("convert", fixture_dir, tmp_path / "own", *to, "--stem", "tiny") == 1
        assert "--stem names the files of the hdf5 layout" in one_error_line(
            capsys.readouterr().err
        )
        assert not (tmp_path / "own").exists()


def test_convert_carries_the_softmax_and_vocabulary_of_a_pretrained_model(
    fixture_dir, tmp_path, capsys
):
    """lm_head.pt and vocab.txt (written by `pretrain`) travel both ways, so `--init-from` keeps
    them."""
    save_bilm(load_bilm(fixture_dir), tmp_path / "own")
    torch.save(
        {"weight": torch.randn(4, 16), "bias": torch.randn(4)}, tmp_path / "own" / "lm_head.pt"
    )
    (tmp_path / "own" / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5") == 0
    assert run_cli("convert", tmp_path / "h5", tmp_path / "back") == 0
    assert "lm_head.pt" in capsys.readouterr().out
    for name in ("lm_head.pt", "vocab.txt"):
        for converted in ("h5", "back"):
            assert (tmp_path / converted / name).read_bytes() == (
                tmp_path / "own" / name
            ).read_bytes()
    assert run_cli("info", tmp_path / "h5") == 0
    assert "softmax (lm_head.pt)" in capsys.readouterr().out


def test_convert_finds_the_softmax_of_a_pretrain_output_in_its_model_directory(
    fixture_dir, tmp_path, capsys
):
    model = tmp_path / "out" / "model"  # what `pretrain OUT` writes
    save_bilm(load_bilm(fixture_dir), model)
    torch.save({"weight": torch.randn(4, 16), "bias": torch.randn(4)}, model / "lm_head.pt")
    (model / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    (tmp_path / "out" / "vocab.txt").write_bytes((model / "vocab.txt").read_bytes())
    assert run_cli("convert", tmp_path / "out", tmp_path / "h5") == 0
    for name in ("lm_head.pt", "vocab.txt"):
        assert (tmp_path / "h5" / name).read_bytes() == (model / name).read_bytes()


@pytest.mark.parametrize("dest", [".", "../link"], ids=["the current directory", "a symlink"])
def test_convert_into_an_empty_directory_named_so(fixture_dir, tmp_path, monkeypatch, dest):
    """DEST `.` had an empty name; DEST a symlink to an empty directory was "Not a directory"."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    monkeypatch.chdir(tmp_path / "empty")
    assert run_cli("convert", fixture_dir, dest) == 0
    assert (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["bilm.json", "weights.pt"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("to", ["hdf5", "own"])
def test_convert_on_a_full_disk_leaves_nothing(fixture_dir, tmp_path, to):
    """A real full disk (a 300 KB tmpfs; the fixture's weights take 450 KB): one line, exit 1,
    nothing left on the disk (HDF5 itself never meets the full disk: it would crash); with space
    freed the same command succeeds."""
    with tmpfs(tmp_path / "disk", "300k") as disk:
        command = [
            sys.executable,
            "-m",
            "spacy_elmo",
            "convert",
            str(fixture_dir),
            str(disk / "out"),
            "--to",
            to,
        ]
        done = subprocess.run(
            command, env=ENV, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 1 and one_error_line(done.stderr) == (
            f"error: disk full while writing {disk / 'out'}: free space and run again"
        ), done.stderr[-2000:]
        assert list(disk.iterdir()) == []
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        assert run_cli("convert", fixture_dir, disk / "out", "--to", to) == 0


def test_convert_meeting_a_full_disk_in_torch_save(fixture_dir, tmp_path, capsys, monkeypatch):
    """The same, ENOSPC injected (no root needed): into an existing empty directory, which stays
    empty."""
    (tmp_path / "out").mkdir()
    full_disk_in_torch_save(monkeypatch, "weights.pt")
    assert run_cli("convert", fixture_dir, tmp_path / "out", "--to", "own") == 1
    assert one_error_line(capsys.readouterr().err) == (
        f"error: disk full while writing {tmp_path / 'out'}: free space and run again"
    )
    assert (
        list(tmp_path.iterdir()) == [tmp_path / "out"] and list((tmp_path / "out").iterdir()) == []
    )
    monkeypatch.undo()
    assert run_cli("convert", fixture_dir, tmp_path / "out", "--to", "own") == 0


def test_convert_refuses_a_warm_state_the_hdf5_layout_would_lose(fixture_dir, tmp_path, capsys):
    """The hdf5 layout keeps no state: loading it reads the built-in warm-up text again, so a warm
    state read from other text cannot go there (the outputs would change); the default one can."""
    bilm = load_bilm(fixture_dir)
    bilm.network.compute_warm_state([["Der", "Hund", "bellt", "."]])
    save_bilm(bilm, tmp_path / "own", state="warm")
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5", "--to", "hdf5") == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "warm state" in err and "Traceback" not in err, err
    assert not (tmp_path / "h5").exists()
    assert run_cli("convert", fixture_dir, tmp_path / "own2") == 0
    assert run_cli("convert", tmp_path / "own2", tmp_path / "h5") == 0


def test_convert_refuses_a_policy_the_hdf5_layout_cannot_hold(fixture_dir, tmp_path, capsys):
    """The hdf5 layout records no state policy and loads as warm: a zero model converted to it
    wrote a pair whose outputs differ from the model's unless loaded with state="zero" (a note on
    stderr said so). Refused now, as `export_hdf5` refuses it; nothing written."""
    save_bilm(load_bilm(fixture_dir, state="zero"), tmp_path / "own")
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5", "--to", "hdf5") == 1
    assert one_error_line(capsys.readouterr().err) == (
        f"error: {tmp_path / 'own' / 'weights.pt'}: the biLM's state policy is 'zero'; the "
        "bilm-tf hdf5 layout records none and loads as 'warm' (bilm-tf and AllenNLP carry states "
        "over), so its outputs would change: keep it in this project's format (save_bilm, "
        "convert --to own)"
    )
    assert not (tmp_path / "h5").exists()


def test_convert_and_info_of_a_model_that_reads_lowercased_tokens(fixture_dir, tmp_path, capsys):
    """`convert --to hdf5` wrote a pair that bilm-tf and AllenNLP read with cased text, which the
    model never saw in training; `info` said nothing of it. Now refused (nothing written), kept by
    `convert --to own`, shown by `info`."""
    model = lowercasing_model(fixture_dir, tmp_path / "lower")
    assert run_cli("convert", model, tmp_path / "h5", "--to", "hdf5") == 1
    line = one_error_line(capsys.readouterr().err)
    assert "reads each token lowercased" in line and "convert --to own" in line
    assert not (tmp_path / "h5").exists()
    assert run_cli("convert", model, tmp_path / "own", "--to", "own") == 0
    capsys.readouterr()
    assert load_bilm(tmp_path / "own").options.lowercase
    assert run_cli("info", tmp_path / "own", "--json") == 0
    assert json.loads(capsys.readouterr().out)["options"]["lowercase"] is True
    assert run_cli("info", tmp_path / "own") == 0
    assert "lowercased (char_cnn.lowercase)" in capsys.readouterr().out
    assert run_cli("info", fixture_dir) == 0
    assert "as written" in capsys.readouterr().out
