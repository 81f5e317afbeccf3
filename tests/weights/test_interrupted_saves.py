"""A model written over another, interrupted (the writer killed between its files' renames) or read
while it is written: the directory loads as the old model, as the new one or as one ElmoFileError,
never silently as files of two saves paired."""

import importlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoFileError, export_hdf5, load_bilm, save_bilm

from ..efml_models import write_efml_model
from ..model_files import unrecorded
from ..reference_bilm import TINY_OPTIONS, write_random_weights

SENTS = [["The", "cat", "sat", "."], ["Hello"]]
MIXED = "come from different saves"
# runs WRITER(load_bilm(SOURCE), DIRECTORY), killing itself (SIGKILL) as it renames a file to NAME
KILLED_AT_RENAME = """
import os, signal, sys
name, writer, source, directory = sys.argv[1:]
real = os.replace
def replace(src, dst, *a, **k):
    if os.path.basename(str(dst)) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
import spacy_elmo
getattr(spacy_elmo, writer)(spacy_elmo.load_bilm(source), directory)
"""
# saves model A, then model B into DIRECTORY, ROUNDS times
ALTERNATING = """
import sys, spacy_elmo
a, b, directory, rounds = sys.argv[1:]
models = [spacy_elmo.load_bilm(a), spacy_elmo.load_bilm(b)]
for _ in range(int(rounds)):
    for model in models:
        spacy_elmo.save_bilm(model, directory)
"""


def outputs(path):
    return load_bilm(path).embed(SENTS)


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def own_pair(fixture_dir, tmp_path):
    """Model A (the fixture, state zero) and model B (other weights, warm) in this project's
    format."""
    save_bilm(load_bilm(fixture_dir, state="zero"), tmp_path / "A")
    b = load_bilm(fixture_dir)
    with torch.no_grad():
        for p in b.network.parameters():
            p.mul_(1.5)
    save_bilm(b, tmp_path / "B", state="warm")
    return tmp_path / "A", tmp_path / "B"


def write_killed(name, writer, source, directory):
    run = subprocess.run(
        [sys.executable, "-c", KILLED_AT_RENAME, name, writer, str(source), str(directory)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == -9, run.stderr[-3000:]


def check_old_new_or_refused(directory, old, new):
    """`directory` loads as `old` or `new` (their outputs), or is one ElmoFileError saying its
    files come from different saves."""
    try:
        got = outputs(directory)
    except ElmoFileError as err:
        assert MIXED in str(err) and str(directory) in str(err), err
        return "refused"
    assert same(got, old) or same(got, new), "loads silently as neither model"
    return "old" if same(got, old) else "new"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["weights.pt", "bilm.json"])
def test_save_bilm_killed_between_its_renames(fixture_dir, tmp_path, name):
    a, b = own_pair(fixture_dir, tmp_path)
    directory = tmp_path / "D"
    shutil.copytree(a, directory)
    write_killed(name, "save_bilm", b, directory)
    outcome = check_old_new_or_refused(directory, outputs(a), outputs(b))
    # killed before any file was replaced: the old model; between weights and config: refused
    assert outcome == {"weights.pt": "old", "bilm.json": "refused"}[name]


@pytest.mark.timeout(300)
def test_save_bilm_killed_over_a_model_saved_before_configs_recorded_digests(fixture_dir, tmp_path):
    """The old bilm.json, which records nothing to check, is removed before the new weights replace
    the old: the directory is then one ElmoFileError (it lacks a config)."""
    a, b = own_pair(fixture_dir, tmp_path)
    directory = tmp_path / "D"
    unrecorded(save_bilm(load_bilm(a), directory))
    write_killed("bilm.json", "save_bilm", b, directory)
    assert not (directory / "bilm.json").exists() and (directory / "weights.pt").exists()
    with pytest.raises(ElmoFileError, match=str(directory)):
        load_bilm(directory)


@pytest.mark.parametrize("config", [b"{not json", b"\x80 not UTF-8"])
def test_a_save_over_a_config_that_cannot_be_read_replaces_it(fixture_dir, tmp_path, config):
    """A config that cannot be read (not JSON, not UTF-8) records nothing: removed as one without a
    record before the new files replace the old, and the save goes through (save_bilm's
    bilm.json, export_hdf5's options.json)."""
    model = load_bilm(fixture_dir)
    for writer, name in ((save_bilm, "bilm.json"), (export_hdf5, "options.json")):
        directory = tmp_path / name
        directory.mkdir()
        (directory / name).write_bytes(config)
        writer(model, directory)
        assert same(outputs(directory), model.embed(SENTS)), name


@pytest.mark.timeout(300)
def test_loads_while_save_bilm_writes_two_models_in_turn(fixture_dir, tmp_path):
    a, b = own_pair(fixture_dir, tmp_path)
    directory = tmp_path / "D"
    shutil.copytree(a, directory)
    old, new = outputs(a), outputs(b)
    writer = subprocess.Popen(
        [sys.executable, "-c", ALTERNATING, str(a), str(b), str(directory), "150"],
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = {"old": 0, "new": 0, "refused": 0}
    try:
        while writer.poll() is None:
            seen[check_old_new_or_refused(directory, old, new)] += 1
    finally:
        writer.kill()
        _, err = writer.communicate()
    assert writer.returncode == 0, err[-3000:]
    assert seen["new"] > 0, seen


def test_weights_of_another_save_are_refused_naming_the_directory(fixture_dir, tmp_path):
    a, b = own_pair(fixture_dir, tmp_path)
    shutil.copy(b / "weights.pt", a / "weights.pt")
    with pytest.raises(ElmoFileError, match=MIXED) as err:
        load_bilm(a)
    assert f"the files of {a} {MIXED}" in str(err.value)


def test_a_model_saved_without_digests_loads_as_before(fixture_dir, tmp_path):
    """Saved before its config recorded its files' digests: read as it was."""
    a, _ = own_pair(fixture_dir, tmp_path)
    reference = outputs(a)
    assert same(outputs(unrecorded(a)), reference)


def test_weights_saved_without_crc32s_are_tied_by_their_sha256(fixture_dir, tmp_path):
    """torch.save writes no CRC-32s where told not to: the sha256 of weights.pt ties it then."""
    torch.serialization.set_crc32_options(False)
    try:
        a, b = own_pair(fixture_dir, tmp_path)
    finally:
        torch.serialization.set_crc32_options(True)
    assert "archive_crc32" not in json.loads((a / "bilm.json").read_text())
    assert same(outputs(a), outputs(a))
    shutil.copy(b / "weights.pt", a / "weights.pt")
    with pytest.raises(ElmoFileError, match=MIXED):
        load_bilm(a)


def test_a_character_table_of_another_save_is_refused(tmp_path):
    """Here one whose words 'Der' and 'Die' swapped ids: a valid table of the same sizes."""
    directory = save_bilm(load_bilm(write_efml_model(tmp_path / "efml")), tmp_path / "own")
    table = json.loads((directory / "char_table.json").read_text(encoding="utf-8"))
    words = table["words"]
    words["Der"], words["Die"] = words["Die"], words["Der"]
    (directory / "char_table.json").write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(ElmoFileError, match=f"{MIXED}.*another char_table.json"):
        load_bilm(directory)
    assert outputs(unrecorded(directory))  # a valid table: read where nothing ties it


# ----------------------------------------------------------------------------------------------
# export_hdf5
def hdf5_pair(tmp_path):
    """Models A and B in the bilm-tf layout: the same shapes, other weights and other clips."""
    other = json.loads(json.dumps(TINY_OPTIONS))
    other["lstm"].update(cell_clip=0.5, proj_clip=0.3)
    a = write_random_weights(tmp_path / "A", TINY_OPTIONS, seed=1)
    b = write_random_weights(tmp_path / "B", other, seed=2)
    (b / "options.json").write_text(json.dumps(other))
    return a, b


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["weights.hdf5", "options.json"])
def test_export_hdf5_killed_between_its_renames(tmp_path, name):
    a, b = hdf5_pair(tmp_path)
    directory = tmp_path / "D"
    export_hdf5(load_bilm(a), directory)
    write_killed(name, "export_hdf5", b, directory)
    outcome = check_old_new_or_refused(directory, outputs(a), outputs(b))
    assert outcome == {"weights.hdf5": "old", "options.json": "refused"}[name]


@pytest.mark.timeout(300)
def test_export_hdf5_killed_over_options_without_a_digest(tmp_path):
    """As bilm-tf writes them: the options are removed before the new weights replace the old."""
    a, b = hdf5_pair(tmp_path)
    directory = shutil.copytree(a, tmp_path / "D")
    write_killed("options.json", "export_hdf5", b, directory)
    assert not (directory / "options.json").exists() and (directory / "weights.hdf5").exists()
    with pytest.raises(ElmoFileError, match=str(directory)):
        load_bilm(directory)


def test_the_exported_digest_is_checked_and_kept_out_of_the_options(tmp_path):
    a, _ = hdf5_pair(tmp_path)
    options, _ = export_hdf5(load_bilm(a), tmp_path / "D")
    assert len(json.loads(options.read_text())["spacy_elmo_weights_sha256"]) == 64
    loaded = load_bilm(tmp_path / "D")
    assert same(loaded.embed(SENTS), outputs(a))
    # read, not kept: a model saved or exported again records its own files' digest only
    assert "spacy_elmo_weights_sha256" not in loaded.options.to_dict()
    save_bilm(loaded, tmp_path / "own")
    assert "spacy_elmo_weights_sha256" not in (tmp_path / "own" / "bilm.json").read_text()


MIXED_SAVE_PAUSE = 0.05  # the first pause of a reader that found files of two saves


def read_as_the_save_ends(monkeypatch, directory, last):
    """Load `directory`, whose save has renamed every file but `last`, which it renames while the
    reader pauses -> the pauses taken (seconds)."""
    pauses = []

    def pause(seconds):
        pauses.append(seconds)
        shutil.copy(last, directory / last.name)

    monkeypatch.setattr(
        importlib.import_module("spacy_elmo.weights.load"), "pause", pause, raising=False
    )
    load_bilm(directory)
    monkeypatch.undo()
    return pauses


def test_a_directory_read_as_its_save_ends_loads_as_the_new_model(
    fixture_dir, tmp_path, monkeypatch
):
    """A directory read while `save_bilm` writes it (its weights renamed, its config not yet) was
    one ElmoFileError for a reader that came a moment too early: it is read again after a pause."""
    a, b = own_pair(fixture_dir, tmp_path)
    directory = tmp_path / "D"
    shutil.copytree(a, directory)
    for path in b.iterdir():
        if path.name != "bilm.json":
            shutil.copy(path, directory / path.name)
    assert read_as_the_save_ends(monkeypatch, directory, b / "bilm.json") == [MIXED_SAVE_PAUSE]
    assert same(outputs(directory), outputs(b))


def test_an_export_of_other_sizes_read_as_it_ends_loads_as_the_new_model(tmp_path, monkeypatch):
    """`export_hdf5` of a model of other sizes over another: a reader between its renames saw
    weights of other shapes than the options and was refused ("do not belong together") at once,
    without reading again."""
    wider = json.loads(json.dumps(TINY_OPTIONS))
    wider["lstm"].update(dim=32, projection_dim=12)
    a = write_random_weights(tmp_path / "A", TINY_OPTIONS, seed=1)
    b = write_random_weights(tmp_path / "B", wider, seed=2)
    (b / "options.json").write_text(json.dumps(wider))
    old, new = tmp_path / "old", tmp_path / "new"
    export_hdf5(load_bilm(a), old)
    export_hdf5(load_bilm(b), new)
    directory = tmp_path / "D"
    shutil.copytree(old, directory)
    shutil.copy(new / "weights.hdf5", directory / "weights.hdf5")  # renamed first
    assert read_as_the_save_ends(monkeypatch, directory, new / "options.json") == [MIXED_SAVE_PAUSE]
    assert same(outputs(directory), outputs(new))
