"""Weight files: exact export back to the bilm-tf layout, our own format, and clear errors."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import ElmoConfigError, ElmoFileError, export_hdf5, load_bilm, save_bilm
from spacy_elmo.bilm import BiLMOptions
from spacy_elmo.files import sha256_file
from spacy_elmo.weights import hub, read_options
from spacy_elmo.weights.hdf5_export import check_stem

from ..efml_models import write_efml_model
from ..helpers import iter_hdf5_datasets
from ..model_files import hdf5_model, lowercasing_model, own_model, pipeline
from ..reference_bilm import TINY_OPTIONS, write_random_weights

SENTS = [["The", "cat", "sat", "."], ["Hello"]]


def test_export_reproduces_every_dataset(fixture_dir, tmp_path):
    bilm = load_bilm(fixture_dir)
    opts_path, weights_path = export_hdf5(bilm, tmp_path)
    original = dict(iter_hdf5_datasets(fixture_dir / "lm_weights.hdf5"))
    exported = dict(iter_hdf5_datasets(weights_path))
    assert set(original) == set(exported)
    assert exported["char_embed"].shape == (261, 4)
    for name, arr in original.items():
        assert exported[name].dtype == np.float32, name
        assert np.array_equal(exported[name], arr), name
    options = json.loads(opts_path.read_text())
    # and the sha256 of the weights, which bilm-tf and AllenNLP ignore
    assert options.pop("spacy_elmo_weights_sha256") == sha256_file(weights_path)
    assert options == json.loads((fixture_dir / "options.json").read_text())


def test_published_file_names_and_explicit_pair(fixture_dir, tmp_path):
    stem = "2x64_16_124cnn_2xhighway"
    shutil.copy(fixture_dir / "options.json", tmp_path / f"elmo_{stem}_options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / f"elmo_{stem}_weights.hdf5")
    a = load_bilm(tmp_path).embed(SENTS)
    b = load_bilm((fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")).embed(SENTS)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("state", ["warm", "zero"])
def test_own_format_round_trip(fixture_dir, tmp_path, state):
    bilm = load_bilm(fixture_dir, state=state)
    save_bilm(bilm, tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["bilm.json", "weights.pt"]
    loaded = load_bilm(tmp_path / "model")
    assert loaded.state_policy == state
    assert loaded.fingerprint() == bilm.fingerprint()
    for x, y in zip(bilm.embed(SENTS), loaded.embed(SENTS)):
        assert np.array_equal(x, y)
    # and back out to hdf5, unchanged (a zero model once it is said to read warm: see below)
    loaded.state_policy = "warm"
    _, weights = export_hdf5(loaded, tmp_path / "h5")
    original = dict(iter_hdf5_datasets(fixture_dir / "lm_weights.hdf5"))
    for name, arr in iter_hdf5_datasets(weights):
        assert np.array_equal(arr, original[name]), name


@pytest.mark.parametrize("state", ["zero", "carry"])
def test_export_hdf5_refuses_a_model_whose_policy_is_not_warm(fixture_dir, tmp_path, state):
    """The hdf5 layout records no state policy and loads as warm: a zero (or carry) model exported
    there read other vectors than it does (pretrain's sentences scheme: up to 1.2 apart), and
    nothing said so. Refused, nothing written; the same weights read warm export."""
    save_bilm(load_bilm(fixture_dir, state=state), tmp_path / "own")
    model = load_bilm(tmp_path / "own")
    with pytest.raises(ElmoConfigError) as info:
        export_hdf5(model, tmp_path / "h5")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'own' / 'weights.pt'}: the biLM's state policy is")
    assert f"'{state}'" in message and "keep it in this project's format" in message
    assert not (tmp_path / "h5").exists()
    model.state_policy = "warm"
    export_hdf5(model, tmp_path / "h5")
    for a, b in zip(model.embed(SENTS), load_bilm(tmp_path / "h5").embed(SENTS)):
        assert np.array_equal(a, b)


def test_saving_onto_a_file_is_one_error_naming_it(fixture_dir, tmp_path):
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    with pytest.raises(ElmoFileError, match="taken.*not a directory"):
        save_bilm(load_bilm(fixture_dir), tmp_path / "taken")
    assert (tmp_path / "taken").read_text(encoding="utf-8") == "a file"


@pytest.mark.parametrize(
    "write, names",
    [(save_bilm, ["weights.pt", "bilm.json"]), (export_hdf5, ["options.json", "weights.hdf5"])],
)
def test_saving_never_writes_through_a_symlink_at_a_temporary_name(
    fixture_dir, tmp_path, write, names
):
    """A fixed temporary name (NAME.tmp) was written through a symlink placed there."""
    outside = tmp_path / "outside"
    outside.write_text("kept", encoding="utf-8")
    (tmp_path / "m").mkdir()
    for name in names:
        (tmp_path / "m" / f"{name}.tmp").symlink_to(outside)
    write(load_bilm(fixture_dir), tmp_path / "m")
    assert outside.read_text(encoding="utf-8") == "kept"
    assert all((tmp_path / "m" / f"{name}.tmp").is_symlink() for name in names)
    load_bilm(tmp_path / "m")


def test_saving_removes_the_temporary_files_killed_processes_left(fixture_dir, tmp_path):
    """kill -9 during a save leaves `.NAME.PID.RANDOM.tmp` (up to a model's size): the next save
    of the same file removes those of processes that no longer run, not those of running ones."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    save_bilm(load_bilm(fixture_dir), tmp_path)
    left = {pid: tmp_path / f".weights.pt.{pid}.0123abcd.tmp" for pid in (gone.pid, os.getppid())}
    for path in left.values():
        path.write_bytes(b"part of a model")
    save_bilm(load_bilm(fixture_dir), tmp_path)
    assert not left[gone.pid].exists() and left[os.getppid()].exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == [
        left[os.getppid()].name
    ]
    load_bilm(tmp_path)


def test_own_format_is_not_unpickled(fixture_dir, tmp_path):
    """A weights.pt carrying arbitrary Python objects is refused (weights_only=True)."""
    save_bilm(load_bilm(fixture_dir), tmp_path)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"x": Evil()}, tmp_path / "weights.pt")
    with pytest.raises(ElmoFileError, match="weights.pt"):
        load_bilm(tmp_path)


@pytest.mark.parametrize(
    "code", [os.system, shutil.rmtree], ids=["blocked module", "not allowed"]
)  # not print: Ray Data's progress bars replace builtins.print in a process that ran them
def test_code_is_refused_without_torchs_advice_to_unpickle_it(fixture_dir, tmp_path, code):
    save_bilm(load_bilm(fixture_dir), tmp_path)
    torch.save({"x": torch.zeros(2), "code": code}, tmp_path / "weights.pt")
    with pytest.raises(ElmoFileError) as err:
        load_bilm(tmp_path)
    message = str(err.value)
    assert "weights.pt: refused" in message and code.__name__ in message
    assert "weights_only" not in message and "\n" not in message


@pytest.mark.parametrize("path", [5, None, b"/x", ("options.json", 5)])
def test_what_is_no_path_is_a_config_error(path):
    with pytest.raises(ElmoConfigError, match="pass a path"):
        load_bilm(path)


@pytest.mark.parametrize("n", [1, 3])
def test_a_pair_of_other_than_two_paths_is_a_config_error(fixture_dir, n):
    """One path or three in a tuple is no (options_file, weight_file) pair."""
    files = ("options.json", "lm_weights.hdf5", "options.json")[:n]
    with pytest.raises(ElmoConfigError, match=f"got {n} paths"):
        load_bilm(tuple(fixture_dir / f for f in files))


def test_a_path_holding_a_nul_character_is_one_error_naming_it(fixture_dir, tmp_path):
    """load_bilm("a\\x00b"), and save_bilm or export_hdf5 into it, raised ValueError (embedded
    null byte) from os.stat."""
    path = str(tmp_path / "a\x00b")
    with pytest.raises(
        ElmoFileError, match=r"a\\x00b': a NUL character in the path of the ELMo weights$"
    ):
        load_bilm(path)
    for write in (save_bilm, export_hdf5):
        with pytest.raises(
            ElmoFileError, match=r"a\\x00b': a NUL character in the path of the output directory$"
        ):
            write(load_bilm(fixture_dir), path)
    assert list(tmp_path.iterdir()) == []


def test_missing_files(tmp_path, fixture_dir):
    with pytest.raises(ElmoFileError, match="nowhere"):
        load_bilm(tmp_path / "nowhere")
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    with pytest.raises(ElmoFileError, match="hdf5"):
        load_bilm(tmp_path)
    with pytest.raises(ElmoFileError, match="weights.hdf5"):
        load_bilm((tmp_path / "options.json", tmp_path / "weights.hdf5"))


def test_mismatched_options_name_dataset_and_shapes(fixture_dir, tmp_path):
    opts = json.loads((fixture_dir / "options.json").read_text())
    opts["lstm"]["dim"] = 32
    (tmp_path / "options.json").write_text(json.dumps(opts))
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    with pytest.raises(ElmoFileError) as err:
        load_bilm(tmp_path)
    msg = str(err.value)
    assert "W_0" in msg and "(32, 256)" in msg and "(32, 128)" in msg and "weights.hdf5" in msg


def test_missing_dataset(fixture_dir, tmp_path):
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    with (
        h5py.File(fixture_dir / "lm_weights.hdf5", "r") as src,
        h5py.File(tmp_path / "weights.hdf5", "w") as dst,
    ):
        for name in ("char_embed", "CNN"):
            src.copy(name, dst)
    with pytest.raises(ElmoFileError, match="CNN_high_0/W_transform.*missing"):
        load_bilm(tmp_path)


def test_truncated_and_corrupt_hdf5(fixture_dir, tmp_path):
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    data = (fixture_dir / "lm_weights.hdf5").read_bytes()
    (tmp_path / "weights.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(ElmoFileError, match="weights.hdf5.*(truncated|corrupt)"):
        load_bilm(tmp_path)
    (tmp_path / "weights.hdf5").write_bytes(b"not an hdf5 file at all" * 10)
    with pytest.raises(ElmoFileError, match="weights.hdf5"):
        load_bilm(tmp_path)


def test_nan_weights_refused(fixture_dir, tmp_path):
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    with h5py.File(tmp_path / "weights.hdf5", "r+") as f:
        f["CNN_proj/b_proj"][0] = np.nan
    with pytest.raises(ElmoFileError, match="CNN_proj/b_proj.*NaN"):
        load_bilm(tmp_path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda o: o["char_cnn"].update(activation="gelu"), "activation"),
        (lambda o: o.pop("char_cnn"), "char_cnn"),
        (lambda o: o["lstm"].update(n_layers=0), "n_layers"),
        (lambda o: o["char_cnn"].update(filters=[[60, 4]]), "wider"),
        (lambda o: o.update(bidirectional=False), "bidirectional"),
        (lambda o: o["lstm"].pop("dim"), "lstm.dim"),
    ],
)
def test_unsupported_options(fixture_dir, tmp_path, edit, message):
    opts = json.loads((fixture_dir / "options.json").read_text())
    edit(opts)
    (tmp_path / "options.json").write_text(json.dumps(opts))
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    with pytest.raises(ElmoFileError, match=message) as err:
        load_bilm(tmp_path)
    assert "options.json" in str(err.value)


def test_options_round_trip(fixture_dir):
    opts = read_options(fixture_dir / "options.json")
    assert BiLMOptions.from_dict(opts.to_dict()) == opts
    assert opts.output_dim == 32 and opts.n_filters == 124


def test_a_published_name_is_a_name_and_a_path_is_a_path(fixture_dir, tmp_path, monkeypatch):
    """`small` is the cached model, never a directory `./small` in the working directory; `./small`,
    `small/`, an absolute path and a Path are paths."""
    from pathlib import Path

    from spacy_elmo.weights import hub

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    save_bilm(load_bilm(fixture_dir, state="zero"), tmp_path / "small")
    with pytest.raises(
        ElmoFileError, match="not in the cache .* run `python -m spacy_elmo download small`"
    ):
        load_bilm("small")
    for path in ("./small", "small/", str(tmp_path / "small"), Path("small")):
        assert load_bilm(path).state_policy == "zero", path
    cached = tmp_path / "cache" / "small"
    cached.mkdir(parents=True)
    for (name, _), source in zip(hub.published_files("small"), ("options.json", "lm_weights.hdf5")):
        shutil.copy(fixture_dir / source, cached / name)
    assert load_bilm("small").state_policy == "warm"


def test_export_takes_the_published_stems_and_refuses_a_path(fixture_dir, tmp_path):
    """`export_hdf5(stem=...)` names files `elmo_<stem>_*`: every published model's stem is one, a
    path or an empty stem is an ElmoConfigError before anything is written."""
    for name in hub.PUBLISHED.values():
        check_stem(name)
    bilm = load_bilm(fixture_dir)
    for stem in ("../x", "", "a/b"):
        with pytest.raises(ElmoConfigError, match="stem must be"):
            export_hdf5(bilm, tmp_path / "out", stem=stem)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x_options.json").exists()


def test_writing_where_a_file_stands_is_one_error(fixture_dir, tmp_path):
    """export_hdf5 and save_bilm over a file, or under one, raised FileExistsError and
    NotADirectoryError; a bad state made save_bilm's directory before refusing."""
    bilm = load_bilm(fixture_dir)
    file = tmp_path / "afile"
    file.write_text("x")
    for write in (save_bilm, export_hdf5):
        with pytest.raises(ElmoFileError, match="exists and is not a directory"):
            write(bilm, file)
        with pytest.raises(ElmoFileError, match="cannot write .*afile/x"):
            write(bilm, file / "x")
    with pytest.raises(ElmoConfigError, match="unknown state policy"):
        save_bilm(bilm, tmp_path / "new", state="bogus")
    assert not (tmp_path / "new").exists()


def _model_of_kind(fixture_dir, directory, kind):
    """`directory` holding the fixture (an ELMoForManyLangs model for "efml") as `kind`."""
    if kind == "efml":
        write_efml_model(directory)
    elif kind == "pipeline":
        pipeline(fixture_dir, directory)
    elif kind == "hdf5":
        hdf5_model(fixture_dir, directory)
    else:
        own_model(fixture_dir, directory / "model" if kind == "pretrain" else directory)


@pytest.mark.parametrize(
    "write, kind, fragments",
    [
        (export_hdf5, "own", ["this project's format", "bilm.json"]),
        (export_hdf5, "pretrain", ["this project's format", "model/bilm.json"]),
        (export_hdf5, "efml", ["ELMoForManyLangs", "char.dic"]),
        (export_hdf5, "pipeline", ["spaCy pipeline", "config.cfg"]),
        (save_bilm, "hdf5", ["hdf5", "weights.hdf5"]),
        (save_bilm, "efml", ["ELMoForManyLangs", "token_embedder.pkl"]),
        (save_bilm, "pipeline", ["spaCy pipeline", "meta.json"]),
    ],
)
def test_a_model_is_never_written_beside_one_of_another_format(
    fixture_dir, tmp_path, write, kind, fragments
):
    """export_hdf5 into save_bilm's directory reported success, and load_bilm kept reading the old
    model (this project's format is found first): one error naming the directory and what it
    holds, and nothing written. Over a model of its own format, each writes as before."""
    directory = tmp_path / "m"
    _model_of_kind(fixture_dir, directory, kind)
    before = sorted(p.relative_to(directory) for p in directory.rglob("*"))
    # export_hdf5 writes a model read warm only
    bilm = load_bilm(fixture_dir, state="warm" if write is export_hdf5 else "zero")
    with pytest.raises(ElmoFileError) as err:
        write(bilm, directory)
    message = str(err.value)
    assert str(directory) in message and all(f in message for f in fragments), message
    assert sorted(p.relative_to(directory) for p in directory.rglob("*")) == before


@pytest.mark.parametrize(
    "write, name",
    [
        (save_bilm, "bilm.json"),
        (save_bilm, "weights.pt"),
        (save_bilm, "char_table.json"),
        (export_hdf5, "options.json"),
        (export_hdf5, "weights.hdf5"),
    ],
)
def test_a_directory_where_a_file_goes_is_one_error_before_anything_is_written(
    fixture_dir, tmp_path, write, name
):
    """A directory named bilm.json, weights.pt or weights.hdf5 raised IsADirectoryError from the
    rename, after weights.pt had been written beside it."""
    source = write_efml_model(tmp_path / "efml") if name == "char_table.json" else fixture_dir
    directory = tmp_path / "m"
    (directory / name).mkdir(parents=True)
    (directory / name / "kept").write_text("kept", encoding="utf-8")
    with pytest.raises(ElmoFileError) as err:
        write(load_bilm(source), directory)
    assert (
        str(err.value) == f"{directory / name} is a directory: {write.__name__} writes a file there"
    )
    assert [p.name for p in directory.rglob("*")] == [name, "kept"]


@pytest.mark.parametrize("write", [save_bilm, export_hdf5])
def test_a_model_is_written_over_one_of_its_own_format(fixture_dir, tmp_path, write):
    first = load_bilm(fixture_dir)
    second = load_bilm(write_random_weights(tmp_path / "random", TINY_OPTIONS, seed=3))
    for bilm in (first, second):
        write(bilm, tmp_path / "m")
        assert load_bilm(tmp_path / "m").fingerprint() == bilm.fingerprint()


def test_the_fingerprint_does_not_depend_on_whether_the_warm_state_was_computed(fixture_dir):
    """Loaded under zero or carry, the fingerprint was that of zero warm buffers, and changed
    once a warm call computed them: the same weights and outputs, two fingerprints."""
    warm = load_bilm(fixture_dir).fingerprint()
    for state in ("zero", "carry"):
        bilm = load_bilm(fixture_dir, state=state)
        assert bilm.fingerprint() == warm
        bilm.state_policy = "warm"
        bilm.embed([["a"]])
        assert bilm.fingerprint() == warm


def test_export_hdf5_refuses_a_model_that_reads_lowercased_tokens(fixture_dir, tmp_path):
    """bilm-tf and AllenNLP ignore `char_cnn.lowercase` and feed the model cased text, which it
    never saw in training: refused, nothing written. Its own format keeps the option."""
    model = load_bilm(lowercasing_model(fixture_dir, tmp_path / "lower"))
    with pytest.raises(ElmoConfigError) as info:
        export_hdf5(model, tmp_path / "h5")
    assert str(info.value) == (
        f"{tmp_path / 'lower' / 'weights.pt'}: the biLM reads each token lowercased "
        "(char_cnn.lowercase: it was trained on lowercased text); bilm-tf and AllenNLP ignore "
        "the option and would feed it cased text: keep it in this project's format (save_bilm, "
        "convert --to own)"
    )
    assert not (tmp_path / "h5").exists()
    save_bilm(model, tmp_path / "again")
    again = load_bilm(tmp_path / "again")
    assert again.options.lowercase and again.fingerprint() == model.fingerprint()
    assert again.fingerprint() != load_bilm(fixture_dir).fingerprint()
    for a, b in zip(again.embed(SENTS), model.embed([[w.lower() for w in s] for s in SENTS])):
        assert np.array_equal(a, b)
