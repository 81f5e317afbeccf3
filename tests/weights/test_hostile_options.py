"""Options files (options.json) of the wrong shape, type or size, or out of float32's range: each
is refused with one ElmoFileError that names the file and the key."""

from __future__ import annotations

import json

import pytest

from spacy_elmo import ElmoConfigError, export_hdf5, load_bilm, save_bilm

from ..helpers import refused
from ..model_files import fixture_options, hdf5_model


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda o: o.update(lstm=[1, 2]), "'lstm'"),
        (lambda o: o.update(char_cnn="cnn"), "'char_cnn'"),
        (lambda o: o["char_cnn"].update(embedding=4), "char_cnn.embedding"),
        (lambda o: o["char_cnn"].update(filters=7), "char_cnn.filters"),
        (lambda o: o["char_cnn"].update(filters=[[1, 2, 3]]), "char_cnn.filters"),
        (lambda o: o.update(spacy_elmo_weights_sha256="ab" * 31), "must be a sha256"),
        (lambda o: o.update(spacy_elmo_weights_sha256=list("ab" * 32)), "must be a sha256"),
    ],
)
def test_options_of_the_wrong_shape(fixture_dir, tmp_path, edit, key):
    opts = fixture_options(fixture_dir)
    edit(opts)
    refused(hdf5_model(fixture_dir, tmp_path / "m", opts), "options.json", key)


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda o: o["char_cnn"].update(filters=[["1", "4"], ["2", "8"]]), "char_cnn.filters"),
        (lambda o: o["char_cnn"].update(filters=[[1, 4], [2, 8.0]]), "char_cnn.filters"),
        (lambda o: o["char_cnn"].update(filters=[[1.9, 4]]), "char_cnn.filters"),
        (lambda o: o["lstm"].update(use_skip_connections="false"), "lstm.use_skip_connections"),
        (lambda o: o["lstm"].update(use_skip_connections=1), "lstm.use_skip_connections"),
        (lambda o: o["char_cnn"].update(n_characters=262.0), "char_cnn.n_characters"),
        (lambda o: o["lstm"].update(dim=64.0), "lstm.dim"),
        (lambda o: o["lstm"].update(cell_clip="3"), "lstm.cell_clip"),
    ],
)
def test_options_of_the_wrong_type(fixture_dir, tmp_path, edit, key):
    opts = fixture_options(fixture_dir)
    edit(opts)
    refused(hdf5_model(fixture_dir, tmp_path / "m", opts), "options.json", key)


@pytest.mark.parametrize(
    "text, problem",
    [
        (lambda opts: "[" * 100_000, "not a valid JSON"),
        (lambda opts: "9" * 5000, "Exceeds the limit (4300 digits)"),
        (lambda opts: json.dumps(opts) + " " * (2 << 20), "too large"),
    ],
)
def test_deeply_nested_or_huge_json_options(fixture_dir, tmp_path, text, problem):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    (directory / "options.json").write_text(text(fixture_options(fixture_dir)))
    refused(directory, "options.json", problem)


def test_a_stray_json_file_of_too_many_digits_is_not_an_options_file(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    (directory / "x.json").write_text("9" * 5000)
    assert load_bilm(directory).options == load_bilm(fixture_dir).options


def test_a_character_table_in_the_options_of_an_hdf5_pair_is_refused(fixture_dir, tmp_path):
    options = fixture_options(fixture_dir)
    options["char_cnn"]["char_table"] = True
    refused(hdf5_model(fixture_dir, tmp_path / "m", options), "options.json", "char_table")


def test_a_forget_bias_out_of_float32_range_in_options_json_is_refused(fixture_dir, tmp_path):
    options = fixture_options(fixture_dir)
    options["lstm"]["forget_bias"] = 1e39
    refused(hdf5_model(fixture_dir, tmp_path / "m", options), "options.json", "lstm.forget_bias")


@pytest.mark.parametrize("bias", [0.0, 2.5])
def test_a_forget_bias_other_than_1_in_an_hdf5_pair_is_refused(fixture_dir, tmp_path, bias):
    """bilm-tf and AllenNLP fix the forget gate's bias at 1 in this layout and ignore the key: a
    file that set it loaded here with other vectors than there (up to 0.33 apart in a layer)."""
    options = fixture_options(fixture_dir)
    options["lstm"]["forget_bias"] = bias
    refused(hdf5_model(fixture_dir, tmp_path / "m", options), "options.json", "lstm.forget_bias")
    options["lstm"]["forget_bias"] = 1.0  # what the layout means anyway
    assert load_bilm(hdf5_model(fixture_dir, tmp_path / "one", options)).options.forget_bias == 1


def test_export_hdf5_refuses_a_forget_bias_other_than_1(fixture_dir, tmp_path):
    save_bilm(load_bilm(fixture_dir), tmp_path / "own")
    config = json.loads((tmp_path / "own" / "bilm.json").read_text())
    config["options"]["lstm"]["forget_bias"] = 0.0
    (tmp_path / "own" / "bilm.json").write_text(json.dumps(config))
    with pytest.raises(ElmoConfigError, match="forget gate bias is 0"):
        export_hdf5(load_bilm(tmp_path / "own"), tmp_path / "h5")
    assert not (tmp_path / "h5" / "weights.hdf5").exists()
