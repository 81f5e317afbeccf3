"""The offline route of the quick start: `python -m spacy_elmo init-random DIR --size small` writes
random, untrained weights in the published layout, labelled so (the options file, a warning at load,
`info`), and the README's examples run with DIR where they say "small" (issue 34 item 8)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.errors import ElmoUntrainedWarning
from spacy_elmo.weights import hub

from ..helpers import ENV, run_cli, write_lines
from ..readme_blocks import README, readme_blocks


@pytest.fixture(scope="module")
def random_small(tmp_path_factory):
    """What a user without network runs first, as the README gives it."""
    root = tmp_path_factory.mktemp("offline")
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "init-random", "my_elmo", "--size", "small"],
        cwd=root,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "untrained" in done.stdout + done.stderr
    return root / "my_elmo"


@pytest.mark.parametrize("output", [".", "../link"], ids=["the current directory", "a symlink"])
def test_into_an_empty_directory_named_so(tmp_path, monkeypatch, output):
    from spacy_elmo.cli import init_random

    def write(directory, size, seed):
        return [Path(shutil.copy(__file__, directory / "written"))]

    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    monkeypatch.chdir(tmp_path / "empty")
    monkeypatch.setattr(init_random, "write_untrained", write)
    assert run_cli("init-random", output) == 0
    assert (tmp_path / "link").is_symlink() and (tmp_path / "empty" / "written").is_file()


def test_the_published_layout_labelled_untrained(random_small):
    stem = hub.PUBLISHED["small"]
    assert sorted(p.name for p in random_small.iterdir()) == [
        f"elmo_{stem}_options.json",
        f"elmo_{stem}_weights.hdf5",
    ]
    options = json.loads((random_small / f"elmo_{stem}_options.json").read_text(encoding="utf-8"))
    assert "untrained" in options["untrained"]
    assert options["lstm"]["dim"] == 1024 and options["lstm"]["projection_dim"] == 128
    with pytest.warns(ElmoUntrainedWarning, match="untrained"):
        bilm = load_bilm(random_small)
    assert bilm.output_dim == 256 and bilm.num_output_layers == 3
    assert bilm.embed([["The", "cat", "."]])[0].shape == (3, 3, 256)


def datasets(directory: Path) -> dict:
    """`{name: array}` of every dataset in the weight file of `directory`."""
    found = {}
    with h5py.File(next(directory.glob("*.hdf5")), "r") as f:
        f.visititems(
            lambda n, o: found.update({n: o[...]}) if isinstance(o, h5py.Dataset) else None
        )
    return found


def test_the_same_seed_writes_the_same_weights(tmp_path):
    """Its defaults are --size small and --seed 0; another seed writes other weights."""
    assert run_cli("init-random", tmp_path / "default") == 0
    assert run_cli("init-random", tmp_path / "zero", "--size", "small", "--seed", "0") == 0
    assert run_cli("init-random", tmp_path / "one", "--seed", "1") == 0
    default, zero, one = (datasets(tmp_path / n) for n in ("default", "zero", "one"))
    stem = hub.PUBLISHED["small"]
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == [
        f"elmo_{stem}_options.json",
        f"elmo_{stem}_weights.hdf5",
    ]
    assert default.keys() == zero.keys() == one.keys()
    assert all(np.array_equal(default[k], zero[k]) for k in default)
    assert not any(np.array_equal(default[k], one[k]) for k in default if default[k].std() > 0)


def test_info_says_untrained(random_small, capsys):
    assert run_cli("info", random_small, "--json") == 0
    assert "untrained" in json.loads(capsys.readouterr().out)["untrained"]
    assert run_cli("info", random_small) == 0
    assert "untrained" in capsys.readouterr().out


def test_init_random_refuses_a_directory_in_use(random_small, tmp_path, capsys):
    write_lines(tmp_path / "x.txt", ["x"])
    assert run_cli("init-random", tmp_path, "--size", "small") == 1
    assert "not an empty directory" in capsys.readouterr().err
    assert run_cli("init-random", tmp_path / "new", "--size", "large") == 1
    assert capsys.readouterr().err.startswith("error:")


@pytest.mark.timeout(600)
def test_the_quick_start_runs_offline_with_it(random_small):
    """The README's quick start block, with the random model where it says "small"."""
    block = next(
        b
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b.lang == "python" and 'load_bilm("small")' in b.code
    )
    code = block.code.replace('"small"', '"my_elmo"')
    root = random_small.parent
    write_lines(root / "corpus.txt", ["The cat sat on the mat .", "Hello !"])
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**ENV, "SPACY_ELMO_CACHE": str(root / "none")},
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "untrained" in done.stderr  # the warning


@pytest.mark.timeout(300)
def test_pretraining_from_it_drops_the_label(random_small, tmp_path):
    """`pretrain --init-from` the random model trains it: the model it saves is not labelled
    untrained. It says once that it starts from untrained weights (it said so twice: the model is
    read to check it, then again after the run's seed)."""
    train = write_lines(tmp_path / "train.txt", ["the cat sat .", "a dog ran far ."] * 10)
    with pytest.warns(ElmoUntrainedWarning) as warned:
        code = run_cli(
            "pretrain",
            tmp_path / "out",
            "--no-progress",
            "--init-from",
            random_small,
            "--train",
            train,
            "--whitespace",
            "--training.max_steps",
            "1",
            "--softmax.type",
            "full",
            "--training.batch_tokens",
            "80",
            "--training.window",
            "10",
            "--training.eval_every",
            "null",
            "--vocab.size",
            "null",
        )
    assert code == 0
    assert len([w for w in warned if w.category is ElmoUntrainedWarning]) == 1
    saved = json.loads((tmp_path / "out" / "model" / "bilm.json").read_text(encoding="utf-8"))
    assert "untrained" not in saved["options"]
