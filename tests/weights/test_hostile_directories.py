"""A model directory and the model cache: which files a load takes, a directory that cannot be
listed, names that do not match, files that resolve outside the directory, a hostile cache
manifest. Each is refused with one ElmoFileError that names the file."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from spacy_elmo import ElmoFileError, load_bilm

from ..helpers import refused
from ..model_files import hdf5_model, own_model


def test_sentences_json_is_not_an_options_file(fixture_dir, tmp_path):
    directory = tmp_path / "m"
    directory.mkdir()
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / "weights.hdf5")
    shutil.copy(fixture_dir / "sentences.json", directory / "sentences.json")
    with pytest.raises(ElmoFileError, match="no options file found") as err:
        load_bilm(directory)
    assert "sentences.json" in str(err.value)


def test_a_json_with_an_lstm_section_alone_is_not_an_options_file(fixture_dir, tmp_path):
    """Options have both 'lstm' and 'char_cnn': a training config beside the model that has an
    'lstm' section only is not taken for a second options file (the load is not ambiguous)."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    (directory / "training.json").write_text(json.dumps({"lstm": {"dim": 4096}, "epochs": 10}))
    assert load_bilm(directory).embed([["a", "b"]])[0].shape == (3, 2, 32)


def test_unlistable_directory_says_permission_denied(fixture_dir, tmp_path, monkeypatch):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    listing = pathlib.Path.iterdir

    def iterdir(self):
        if self == directory:
            raise PermissionError(13, "Permission denied", str(self))
        return listing(self)

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    refused(directory, str(directory), "permission denied")


def test_published_options_beside_plain_options_is_ambiguous(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    shutil.copy(directory / "options.json", directory / "elmo_x_options.json")
    refused(directory, "elmo_x_options.json", "options.json", "several")


def test_mismatched_stems_refused(fixture_dir, tmp_path):
    directory = tmp_path / "m"
    directory.mkdir()
    shutil.copy(fixture_dir / "options.json", directory / "elmo_a_options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / "elmo_b_weights.hdf5")
    refused(directory, "elmo_a_options.json", "elmo_b_weights.hdf5")


@pytest.mark.parametrize(
    "kind, name",
    [
        ("hdf5", "options.json"),
        ("hdf5", "weights.hdf5"),
        ("own", "bilm.json"),
        ("own", "weights.pt"),
        ("pretrain", "model/weights.pt"),
    ],
)
def test_a_model_file_symlinked_outside_its_directory_is_refused(fixture_dir, tmp_path, kind, name):
    """A model directory is read from itself: a file that resolves outside it is refused, the same
    file inside (a symlink within the directory) is read."""
    directory = tmp_path / "m"
    if kind == "hdf5":
        hdf5_model(fixture_dir, directory)
    else:
        own_model(fixture_dir, directory / "model" if kind == "pretrain" else directory)
    target = tmp_path / "elsewhere" / pathlib.Path(name).name
    target.parent.mkdir()
    shutil.move(directory / name, target)
    (directory / name).symlink_to(target)
    refused(directory, f"{directory / name}: refused", "outside the model directory")
    kept = (directory / name).parent / "kept"
    shutil.move(target, kept)
    (directory / name).unlink()
    (directory / name).symlink_to(kept)
    assert load_bilm(directory).output_dim == 32


@pytest.mark.parametrize("content", ["{}", json.dumps({"lstm": {}, "char_cnn": {}})])
def test_a_json_file_symlinked_outside_the_directory_is_refused(fixture_dir, tmp_path, content):
    """Another JSON file of a directory of options.json and weights.hdf5, which a load looks at to
    find the options, is not read where it resolves outside the directory."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    outside = tmp_path / "elsewhere.json"
    outside.write_text(content)
    (directory / "notes.json").symlink_to(outside)
    refused(directory, f"{directory / 'notes.json'}: refused", "outside the model directory")


@pytest.mark.parametrize("entry", [None, 3, {"bytes": "2"}, {"bytes": 2, "sha256": ["x"]}])
def test_hostile_manifest_names_the_file(tmp_path, entry):
    from spacy_elmo.weights import hub

    names = [name for name, _ in hub.published_files("small")]
    for name in names:
        (tmp_path / name).write_text("{}")
    manifest = {"files": [] if entry is None else dict.fromkeys(names, entry)}
    (tmp_path / hub.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ElmoFileError, match="manifest.json"):
        hub.verify(tmp_path, "small")
