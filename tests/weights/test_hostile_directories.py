"""A model directory and the model cache: which files a load takes, a directory that cannot be
listed, names that do not match, files that resolve outside the directory, a hostile cache
manifest. Each is refused with one ElmoFileError that names the file."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import spacy
import torch

from spacy_elmo import ElmoFileError, load_bilm

from ..efml_models import write_efml_model
from ..helpers import one_error_line, refused, run_cli
from ..model_files import hdf5_model, own_model, pipeline


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


def swapped_at_open(monkeypatch, opened: pathlib.Path, link: pathlib.Path, outside, nth=1):
    """Where `opened` is opened the `nth` time (by `os.open`, or by h5py), `link` (a symlink inside
    the model directory: `opened` or a directory above it) is first turned to `outside`: the race
    of a symlink swapped after the loader looked at it."""
    import h5py

    opens = {"count": 0}

    def swap(path):
        if os.fspath(path) == os.fspath(opened):
            opens["count"] += 1
            if opens["count"] == nth:
                link.unlink()
                link.symlink_to(outside)

    real_open, real_h5 = os.open, h5py.File
    monkeypatch.setattr(os, "open", lambda path, *a, **k: (swap(path), real_open(path, *a, **k))[1])
    monkeypatch.setattr(h5py, "File", lambda path, *a, **k: (swap(path), real_h5(path, *a, **k))[1])
    return opens


def linked_inside(directory: pathlib.Path, name: str, outside_root: pathlib.Path):
    """`directory / name` moved to `directory / kept / NAME` and symlinked there (inside: read as
    before), and a copy of it at `outside_root / name` -> (the link, the copy)."""
    link = directory / name
    kept = directory / "kept" / name
    kept.parent.mkdir(parents=True)
    shutil.move(link, kept)
    link.symlink_to(kept)
    outside = outside_root / name
    outside.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if kept.is_dir() else shutil.copy)(kept, outside)
    return link, outside


TURNED = [
    ("hdf5", "weights.hdf5", "weights.hdf5"),
    ("hdf5", "options.json", "options.json"),
    ("own", "bilm.json", "bilm.json"),
    ("own", "weights.pt", "weights.pt"),
    ("pretrain", "model", "model/weights.pt"),  # the directory above the file
    ("efml", "encoder.pkl", "encoder.pkl"),
    ("efml", "char.dic", "char.dic"),
    ("pipeline", "elmo/model", "elmo/model"),
]


@pytest.mark.parametrize(
    "load, kind, name, opened",
    [(load, *case) for load in ("load_bilm", "info") for case in TURNED]
    + [("spacy.load", *case) for case in TURNED if case[0] == "pipeline"],
)
def test_a_symlink_turned_outside_as_the_file_is_opened_is_refused(
    fixture_dir, tmp_path, monkeypatch, capsys, load, kind, name, opened
):
    """`inside_dir` looks at a file before it is opened: a symlink inside the model directory turned
    to a file outside in between was followed, and the outside file read as the model's (here a copy
    of the same: the load went on, silently). Now each file is checked once open, on its
    descriptor, to be the one its path resolves to inside the directory."""
    directory = tmp_path / "m"
    if kind == "hdf5":
        hdf5_model(fixture_dir, directory)
    elif kind == "efml":
        write_efml_model(directory)
    elif kind == "pipeline":
        pipeline(fixture_dir, directory)
    else:
        own_model(fixture_dir, directory / "model" if kind == "pretrain" else directory)
    link, outside = linked_inside(directory, name, tmp_path / "elsewhere")
    assert load_bilm(directory).output_dim > 0  # a symlink inside is read
    nth = 2 if load == "info" else 1  # info: the load, then the sha256
    opens = swapped_at_open(monkeypatch, directory / opened, link, outside, nth)
    message = "turned outside as it was opened"
    if load == "load_bilm":
        with pytest.raises(ElmoFileError, match=message) as err:
            load_bilm(directory)
        assert str(directory / opened) in str(err.value)
    elif load == "spacy.load":
        with pytest.raises(ElmoFileError, match=message):
            spacy.load(directory)
    else:
        assert run_cli("info", directory) == 1
        assert message in one_error_line(capsys.readouterr().err)
    assert opens["count"] >= nth


@pytest.mark.parametrize("name", ["vocab.txt", "lm_head.pt"])
def test_convert_copies_no_extra_file_turned_outside_as_it_is_opened(
    fixture_dir, tmp_path, monkeypatch, capsys, name
):
    """`convert` copies `pretrain`'s files beside a model (its softmax, its vocabulary): one whose
    symlink inside is turned outside as it is opened is refused, nothing written."""
    directory = own_model(fixture_dir, tmp_path / "m")
    if name == "vocab.txt":
        (directory / name).write_text("<S>\n</S>\n<UNK>\nthe\n")
    else:
        torch.save({"weight": torch.zeros(4, 16), "bias": torch.zeros(4)}, directory / name)
    link, outside = linked_inside(directory, name, tmp_path / "elsewhere")
    swapped_at_open(monkeypatch, directory / name, link, outside, nth=1)
    assert run_cli("convert", directory, tmp_path / "out", "--to", "own") == 1
    assert "turned outside as it was opened" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_where_the_system_does_not_say_where_a_file_is_its_path_is_checked(
    fixture_dir, tmp_path, monkeypatch
):
    """Without Linux's /proc/self/fd, a file open is taken to be where its path leads now: the
    symlink turned outside is still refused."""
    from spacy_elmo import files

    directory = own_model(fixture_dir, tmp_path / "m")
    link, outside = linked_inside(directory, "weights.pt", tmp_path / "elsewhere")
    monkeypatch.setattr(files, "_opened_path", lambda fd: None)
    assert load_bilm(directory).output_dim == 32
    swapped_at_open(monkeypatch, directory / "weights.pt", link, outside)
    with pytest.raises(ElmoFileError, match="turned outside as it was opened"):
        load_bilm(directory)
