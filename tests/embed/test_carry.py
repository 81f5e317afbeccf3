"""`embed --state carry`: bilm-tf's and AllenNLP's batches (consecutive rows of --batch-size, row i
carrying row i's state) over the whole input, whatever --flush-every cuts it into."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.embed import EmbedOptions, run
from spacy_elmo.embed import options as options_module

from ..helpers import FLOAT32_ATOL, generated, read_output, run_cli, write_lines


def tensorflow_order(fixture_dir):
    """The fixture's 30 sentences as the TF reference read them (10 batches of 3, row k of batch i
    = `sentences[k][i]`) -> (lines, the top layer `(n_tokens, 32)` it computed for each)."""
    sentences = json.loads((fixture_dir / "sentences.json").read_text())
    lines, tops = [], []
    for i in range(10):
        for k in range(3):
            with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
                forward, backward = f[str(i)][...]  # (n_tokens, 16) each
            lines.append(sentences[k][i])
            tops.append(np.concatenate([forward, backward], axis=-1))
    return lines, tops


@pytest.mark.parametrize(
    "flush, default_block",
    [(["--flush-every", "10"], None), (["--flush-every", "4"], None), ([], 10)],
    ids=["flush-10", "flush-4", "default-10"],
)
def test_carry_matches_tensorflow_over_blocks(
    fixture_dir, tmp_path, monkeypatch, flush, default_block
):
    """Blocks of 10 or 4 lines (given, or the default block size made 10 here) with batches of 3:
    every line is TF's, and the file records the block size used, a multiple of 3."""
    if default_block is not None:
        monkeypatch.setattr(options_module, "DEFAULT_BLOCK", default_block)
    lines, tops = tensorflow_order(fixture_dir)
    text, out = write_lines(tmp_path / "in.txt", lines), tmp_path / "out.hdf5"
    args = ["-w", fixture_dir, "--whitespace", "--state", "carry", "--batch-size", "3"]
    assert run_cli("embed", text, out, *args, "--layer", "top", "--no-progress", *flush) == 0
    arrays, _, attrs = read_output(out)
    worst = max(float(np.abs(arrays[str(j)] - top).max()) for j, top in enumerate(tops))
    assert worst <= FLOAT32_ATOL, worst
    assert json.loads(attrs["spacy_elmo.settings"])["flush_every"] == (6 if "4" in flush else 12)


def test_run_under_carry_reads_the_input_in_whole_batches(fixture_dir, tmp_path):
    """`spacy_elmo.embed.run` under carry with blocks of 7 lines and batches of 4, empty lines among
    them: the API's sequential carried batches over the whole input."""
    text = generated(tmp_path / "in.txt", 45, seed=5)
    lines = text.read_text(encoding="utf-8").splitlines()
    carry = {"state": "carry", "batch_size": 4, "flush_every": 7}
    assert run(
        EmbedOptions(text, tmp_path / "out.hdf5", str(fixture_dir), whitespace=True, **carry)
    ).wrote
    arrays, _, attrs = read_output(tmp_path / "out.hdf5")
    expected = load_bilm(fixture_dir, state="carry").embed([s.split() for s in lines], 4)
    for j, want in enumerate(expected):
        np.testing.assert_allclose(arrays[str(j)], want, atol=FLOAT32_ATOL, rtol=0)
    assert json.loads(attrs["spacy_elmo.settings"])["flush_every"] == 8
