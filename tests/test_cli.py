"""`python -m spacy_elmo info | embed | convert`."""
import json
import subprocess
import sys

import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.cli import main


def run_cli(*args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code


def test_info(fixture_dir, capsys):
    assert run_cli("info", str(fixture_dir)) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["output_dim"] == 32 and info["output_layers"] == 3 and info["state_policy"] == "warm"
    assert info["parameters"] == sum(p.numel() for p in load_bilm(fixture_dir).parameters())


def test_embed_writes_npz_matching_the_api(fixture_dir, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\n\nHello world\n", encoding="utf-8")
    assert run_cli("embed", str(fixture_dir), str(text), str(tmp_path / "out.npz")) == 0
    saved = np.load(tmp_path / "out.npz")
    expected = load_bilm(fixture_dir).embed([["The", "cat", "sat", "."], [], ["Hello", "world"]])
    assert sorted(saved.files, key=int) == ["0", "1", "2"]
    for i, arr in enumerate(expected):
        np.testing.assert_array_equal(saved[str(i)], arr)


def test_convert_both_ways(fixture_dir, tmp_path):
    assert run_cli("convert", str(fixture_dir), str(tmp_path / "own")) == 0
    assert run_cli("convert", str(tmp_path / "own"), str(tmp_path / "h5"), "--to", "hdf5", "--stem", "tiny") == 0
    assert (tmp_path / "h5" / "elmo_tiny_weights.hdf5").is_file()
    a = load_bilm(fixture_dir).embed([["a", "b"]])[0]
    b = load_bilm(tmp_path / "h5").embed([["a", "b"]])[0]
    np.testing.assert_array_equal(a, b)


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    assert run_cli("info", str(tmp_path / "absent")) == 1
    assert "not found" in capsys.readouterr().err


def test_module_entry_point(fixture_dir):
    out = subprocess.run([sys.executable, "-m", "spacy_elmo", "info", str(fixture_dir)],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["output_dim"] == 32
