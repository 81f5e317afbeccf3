"""Hostile, corrupt and mistyped options and weight files: each one is refused with one
ElmoFileError that names the file and the problem, fast and before anything large is allocated.

Every hostile file is built here, in tmp_path, from a copy of the fixture."""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import spacy
import srsly
import torch

from spacy_elmo import ElmoFileError, ElmoResourceError, load_bilm, save_bilm
from spacy_elmo.bilm import BiLMOptions
from spacy_elmo.cli import main

B_PROJ = "CNN_proj/b_proj"
W_0 = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"


def fixture_options(fixture_dir) -> dict:
    return json.loads((fixture_dir / "options.json").read_text())


def hdf5_model(fixture_dir, directory, options=None):
    """A copy of the fixture as options.json + weights.hdf5 in `directory` (options replaced if
    given)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "options.json").write_text(json.dumps(options or fixture_options(fixture_dir)))
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / "weights.hdf5")
    return directory


def own_model(fixture_dir, directory):
    save_bilm(load_bilm(fixture_dir, state="zero"), directory)
    return directory


def pipeline(fixture_dir, directory):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    nlp.initialize()
    nlp.to_disk(directory)
    return directory / "elmo" / "model"


def edit_pipeline_bilm(path, edit):
    """Rewrite the biLM message inside a saved pipeline's elmo/model: `edit(message_dict)`."""
    outer = srsly.msgpack_loads(path.read_bytes())
    shim = srsly.msgpack_loads(outer["shims"][0][0])
    inner = srsly.msgpack_loads(shim["state"])
    edit(inner)
    shim["state"] = srsly.msgpack_dumps(inner)
    outer["shims"][0][0] = srsly.msgpack_dumps(shim)
    path.write_bytes(srsly.msgpack_dumps(outer))


def refused(path, *fragments):
    """load_bilm(path) raises one ElmoFileError whose message holds every fragment."""
    with pytest.raises(ElmoFileError) as err:
        load_bilm(path)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)
    return str(err.value)


# ------------------------------------------------------------------ sizes checked before allocating
BOUNDED_LOAD = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import spacy, spacy_elmo
    start = time.perf_counter()
    try:
        spacy.load(sys.argv[2]) if sys.argv[1] == "pipeline" else spacy_elmo.load_bilm(sys.argv[2])
    except spacy_elmo.ElmoFileError as err:
        print("seconds", time.perf_counter() - start)
        print("error", err)
        sys.exit(3)
""")


def load_in_3gb(kind, path):
    """Load in a subprocess limited to 3 GB of address space: -> (seconds, error message)."""
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED_LOAD, kind, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    return float(lines["seconds"]), lines["error"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "kind, key, value",
    [
        ("options", "char_cnn.n_highway", 10**9),
        ("options", "lstm.n_layers", 10**7),
        ("options", "char_cnn.max_characters_per_token", 10**9),
        ("own", "lstm.dim", 10**9),
        ("pipeline", "lstm.dim", 10**9),
    ],
)
def test_huge_sizes_fail_fast_without_allocating(fixture_dir, tmp_path, kind, key, value):
    section, name = key.split(".")
    if kind == "options":
        opts = fixture_options(fixture_dir)
        opts[section][name] = value
        path = hdf5_model(fixture_dir, tmp_path / "m", opts)
        named = "options.json"
    elif kind == "own":
        path = own_model(fixture_dir, tmp_path / "m")
        config = json.loads((path / "bilm.json").read_text())
        config["options"][section][name] = value
        (path / "bilm.json").write_text(json.dumps(config))
        named = "bilm.json"
    else:
        model = pipeline(fixture_dir, tmp_path / "p")

        def edit(msg):
            opts = json.loads(msg["options"])
            opts[section][name] = value
            msg["options"] = json.dumps(opts)

        edit_pipeline_bilm(model, edit)
        path, named = tmp_path / "p", "elmo/model"
    seconds, message = load_in_3gb("pipeline" if kind == "pipeline" else "bilm", path)
    assert seconds < 5 and key in message and named in message and str(value) in message


def oversized_own_model(fixture_dir, directory):
    """The fixture in this project's format, its options grown to 805M parameters (within the
    bounds)."""
    path = own_model(fixture_dir, directory)
    config = json.loads((path / "bilm.json").read_text())
    config["options"]["char_cnn"].update(filters=[[1, 8192]], n_highway=6)
    (path / "bilm.json").write_text(json.dumps(config))
    return path


@pytest.mark.timeout(300)
def test_sizes_the_weights_do_not_have_are_refused_before_allocating(fixture_dir, tmp_path):
    """Options within the bounds (805M parameters, 3.2 GB) beside the fixture's small weights.pt."""
    path = oversized_own_model(fixture_dir, tmp_path / "m")
    seconds, message = load_in_3gb("bilm", path)
    assert seconds < 5 and "weights.pt" in message and "805,615,656 parameters" in message


@pytest.mark.timeout(300)
def test_views_of_one_storage_do_not_count_as_weights(fixture_dir, tmp_path):
    """1000 entries viewing one 4 MB storage look like 10**9 values, but only 4 MB is stored."""
    path = oversized_own_model(fixture_dir, tmp_path / "m")
    state = torch.load(path / "weights.pt", weights_only=True)
    shared = torch.zeros(2**20)
    state.update({f"view_{i}": shared[:] for i in range(1000)})
    torch.save(state, path / "weights.pt")
    seconds, message = load_in_3gb("bilm", path)
    assert seconds < 5 and "weights.pt" in message and "805,615,656 parameters" in message


@pytest.mark.timeout(300)
def test_declared_but_unwritten_hdf5_fails_fast(fixture_dir, tmp_path):
    """A 2**21-wide LSTM whose datasets are declared but never written (a few KB on disk)."""
    opts = fixture_options(fixture_dir)
    opts["lstm"]["dim"] = 2**21
    directory = tmp_path / "m"
    directory.mkdir()
    (directory / "options.json").write_text(json.dumps(opts))
    from spacy_elmo.weights.hdf5 import expected_shapes

    with h5py.File(directory / "weights.hdf5", "w") as f:
        for name, shape in expected_shapes(
            BiLMOptions.from_dict(fixture_options(fixture_dir))
        ).items():
            big = tuple(
                2**21 * s // 64 if "LSTMCell" in name and s in (64, 256) else s for s in shape
            )
            f.create_dataset(name, shape=big, dtype="f4")
    assert (directory / "weights.hdf5").stat().st_size < 100_000
    seconds, message = load_in_3gb("bilm", directory)
    assert seconds < 5 and "lstm.dim" in message and "options.json" in message


def test_unwritten_dataset_of_plausible_size_is_refused(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        shape = f[W_0].shape
        del f[W_0]
        f.create_dataset(W_0, shape=shape, dtype="f4")
    refused(directory, "weights.hdf5", W_0, "never written")


def test_parameter_count_matches_the_model(fixture_dir):
    bilm = load_bilm(fixture_dir)
    assert bilm.options.n_parameters == sum(p.numel() for p in bilm.parameters())


# ------------------------------------------------------------------ NaN / Inf in every weight
# source
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_refused_in_own_format(fixture_dir, tmp_path, bad):
    directory = own_model(fixture_dir, tmp_path / "m")
    state = torch.load(directory / "weights.pt", weights_only=True)
    state["lstm.layers.1.w_proj"][0, 3, 2] = bad
    torch.save(state, directory / "weights.pt")
    refused(directory, "weights.pt", "lstm.layers.1.w_proj", "NaN or infinite")


def test_non_finite_weights_refused_in_a_pipeline(fixture_dir, tmp_path):
    model = pipeline(fixture_dir, tmp_path / "p")

    def edit(msg):
        state = torch.load(io.BytesIO(msg["state_dict"]), weights_only=True)
        state["token_encoder.w_proj"][5, 1] = float("inf")
        buf = io.BytesIO()
        torch.save(state, buf)
        msg["state_dict"] = buf.getvalue()

    edit_pipeline_bilm(model, edit)
    with pytest.raises(ElmoFileError, match="elmo/model.*token_encoder.w_proj.*NaN or infinite"):
        spacy.load(tmp_path / "p")


# ------------------------------------------------------------------ what cannot be read ->
# ElmoFileError
@pytest.mark.parametrize("config", [[1, 2], "a string", 7])
def test_own_config_that_is_not_an_object(fixture_dir, tmp_path, config):
    directory = own_model(fixture_dir, tmp_path / "m")
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", "JSON object")


@pytest.mark.parametrize(
    "content, problem",
    [
        (lambda sd: 3, "got int"),
        (lambda sd: [torch.zeros(2)], "got list"),
        (lambda sd: {**sd, "warm_h": 4}, "not a named dense tensor"),
        (lambda sd: {**sd, "warm_h": sd["warm_h"].to_sparse()}, "not a named dense tensor"),
        (lambda sd: {**sd, "warm_h": sd["warm_h"].to(torch.int32)}, "must be float"),
    ],
)
def test_own_weights_that_are_not_a_state_dict(fixture_dir, tmp_path, content, problem):
    directory = own_model(fixture_dir, tmp_path / "m")
    torch.save(
        content(torch.load(directory / "weights.pt", weights_only=True)), directory / "weights.pt"
    )
    refused(directory, "weights.pt", problem)


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda o: o.update(lstm=[1, 2]), "'lstm'"),
        (lambda o: o.update(char_cnn="cnn"), "'char_cnn'"),
        (lambda o: o["char_cnn"].update(embedding=4), "char_cnn.embedding"),
        (lambda o: o["char_cnn"].update(filters=7), "char_cnn.filters"),
        (lambda o: o["char_cnn"].update(filters=[[1, 2, 3]]), "char_cnn.filters"),
    ],
)
def test_options_of_the_wrong_shape(fixture_dir, tmp_path, edit, key):
    opts = fixture_options(fixture_dir)
    edit(opts)
    refused(hdf5_model(fixture_dir, tmp_path / "m", opts), "options.json", key)


def _group_for_dataset(f):
    del f[B_PROJ]
    f.create_group(B_PROJ)


def _dangling_link(f):
    del f[B_PROJ]
    f[B_PROJ] = h5py.SoftLink("/nowhere/at/all")


def _compound(f):
    del f[B_PROJ]
    f.create_dataset(B_PROJ, data=np.zeros(16, dtype=[("a", "f4"), ("b", "f4")]))


@pytest.mark.parametrize(
    "edit, problem",
    [
        (_group_for_dataset, "not a dataset"),
        (_dangling_link, "dangling"),
        (_compound, "dtype"),
    ],
)
def test_hdf5_structure_problems(fixture_dir, tmp_path, edit, problem):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        edit(f)
    refused(directory, "weights.hdf5", B_PROJ, problem)


def test_corrupt_btree(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    data = bytearray((directory / "weights.hdf5").read_bytes())
    at = data.index(b"TREE")
    data[at : at + 24] = b"XXXX" + b"\xff" * 20
    (directory / "weights.hdf5").write_bytes(bytes(data))
    refused(directory, "weights.hdf5", "corrupt")


def test_memory_error_names_the_file(fixture_dir, tmp_path, monkeypatch):
    directory = hdf5_model(fixture_dir, tmp_path / "m")

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(h5py.Dataset, "read_direct", no_memory)
    monkeypatch.setattr(h5py.Dataset, "__getitem__", no_memory)
    with pytest.raises(ElmoResourceError, match="weights.hdf5: not enough memory"):
        load_bilm(directory)


@pytest.mark.parametrize(
    "damage", [lambda b: b + b"xx", lambda b: b[: len(b) // 2], lambda b: b"\x93garbage" * 5]
)
def test_corrupt_pipeline_model_names_the_file(fixture_dir, tmp_path, damage):
    model = pipeline(fixture_dir, tmp_path / "p")
    model.write_bytes(damage(model.read_bytes()))
    with pytest.raises(ElmoFileError, match="elmo/model"):
        spacy.load(tmp_path / "p")


def test_corrupt_pipeline_bytes(fixture_dir, tmp_path):
    pipeline(fixture_dir, tmp_path / "p")
    nlp = spacy.load(tmp_path / "p")
    data = nlp.get_pipe("elmo").model.to_bytes()
    with pytest.raises(ElmoFileError, match="serialized"):
        nlp.get_pipe("elmo").model.from_bytes(data[:-100])


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize("command", ["convert", "info"])
def test_evil_lm_head_is_one_error_line(fixture_dir, tmp_path, capsys, command):
    directory = own_model(fixture_dir, tmp_path / "m")
    torch.save({"x": Evil()}, directory / "lm_head.pt")
    args = [command, directory] + ([tmp_path / "out"] if command == "convert" else [])
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert (
        err.startswith("error: ")
        and err.count("\n") == 1
        and "lm_head.pt" in err
        and "pwned" not in err
    )
    assert not (tmp_path / "out" / "lm_head.pt").exists()


def test_cli_errors_catch_the_file_error_type(fixture_dir, tmp_path, capsys):
    directory = own_model(fixture_dir, tmp_path / "m")
    (directory / "bilm.json").write_text("[1]")
    with pytest.raises(SystemExit) as exit_info:
        main(["info", str(directory)])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 1
        and err.startswith("error: ")
        and "bilm.json" in err
        and "Traceback" not in err
    )


# ------------------------------------------------------------------ messages that mislead
def test_sentences_json_is_not_an_options_file(fixture_dir, tmp_path):
    directory = tmp_path / "m"
    directory.mkdir()
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / "weights.hdf5")
    shutil.copy(fixture_dir / "sentences.json", directory / "sentences.json")
    with pytest.raises(ElmoFileError, match="no options file found") as err:
        load_bilm(directory)
    assert "sentences.json" in str(err.value)


def test_unlistable_directory_says_permission_denied(fixture_dir, tmp_path, monkeypatch):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    listing = pathlib.Path.iterdir

    def iterdir(self):
        if self == directory:
            raise PermissionError(13, "Permission denied", str(self))
        return listing(self)

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    refused(directory, str(directory), "permission denied")


# ------------------------------------------------------------------ wrong types, dtypes, external
# data, stems
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


@pytest.mark.parametrize("dtype", ["i4", "?", "c8", "u1"])
def test_hdf5_weights_must_be_float(fixture_dir, tmp_path, dtype):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        data = f[B_PROJ][...]
        del f[B_PROJ]
        f.create_dataset(B_PROJ, data=data.astype(dtype))
    refused(directory, "weights.hdf5", B_PROJ, "dtype")


def test_hdf5_float16_and_float64_are_read(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        for name, dtype in ((B_PROJ, "f2"), (W_0, "f8")):
            data = f[name][...]
            del f[name]
            f.create_dataset(name, data=data.astype(dtype))
    assert load_bilm(directory).embed([["a", "b"]])[0].shape == (3, 2, 32)


def test_hdf5_external_storage_refused(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype="f4").tobytes())
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        del f[B_PROJ]
        f.create_dataset(B_PROJ, shape=(16,), dtype="f4", external=[(str(secret), 0, 64)])
    refused(directory, "weights.hdf5", B_PROJ, "external")


def test_hdf5_external_link_refused(fixture_dir, tmp_path):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with (
        h5py.File(tmp_path / "other.hdf5", "w") as other,
        h5py.File(directory / "weights.hdf5", "r+") as f,
    ):
        other["b"] = f[B_PROJ][...]
        del f[B_PROJ]
        f[B_PROJ] = h5py.ExternalLink(str(tmp_path / "other.hdf5"), "/b")
    refused(directory, "weights.hdf5", B_PROJ, "external")


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
    "text, problem",
    [
        (lambda opts: "[" * 100_000, "not a valid JSON"),
        (lambda opts: json.dumps(opts) + " " * (2 << 20), "too large"),
    ],
)
def test_deeply_nested_or_huge_json_options(fixture_dir, tmp_path, text, problem):
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    (directory / "options.json").write_text(text(fixture_options(fixture_dir)))
    refused(directory, "options.json", problem)


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


# ------------------------------------------------------------------ stored less than declared,
# memory a load needs
def test_partly_written_compressed_hdf5_is_refused(fixture_dir, tmp_path):
    """A gzip-chunked dataset with one chunk of many written passed the stored-bytes check
    (compressed data may be small) and read the rest as fill: a 46 KB file took 9.7 GB."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        values = f[W_0][...]
        del f[W_0]
        dataset = f.create_dataset(
            W_0, shape=values.shape, dtype="f4", chunks=(8, 16), compression="gzip"
        )
        dataset[:8, :16] = values[:8, :16]
    refused(directory, "weights.hdf5", W_0, "partly written or crafted", "chunks")


def test_compressed_torch_archive_is_refused_before_reading(fixture_dir, tmp_path):
    """weights.pt whose zip entries are deflated (torch never writes them so): 1.18 MB on disk took
    5.1 GB."""
    import zipfile

    path = own_model(fixture_dir, tmp_path / "m")
    original = (path / "weights.pt").read_bytes()
    with (
        zipfile.ZipFile(io.BytesIO(original)) as src,
        zipfile.ZipFile(path / "weights.pt", "w") as dst,
    ):
        for entry in src.infolist():
            dst.writestr(entry.filename, src.read(entry), compress_type=zipfile.ZIP_DEFLATED)
    refused(path, "weights.pt", "is compressed", "torch.save stores entries as they are")
    (path / "weights.pt").write_bytes(
        b"\x80\x02" + original[:100]
    )  # not a zip at all: the legacy format
    refused(path, "weights.pt", "not a torch zip archive")


@pytest.mark.parametrize("kind", ["hdf5", "own", "pipeline"])
def test_a_load_that_needs_more_memory_than_there_is_says_so(
    fixture_dir, tmp_path, monkeypatch, kind
):
    """The memory a load needs is estimated before anything is allocated, and a shortfall is one
    ElmoResourceError naming the file, the need and what is available."""
    from spacy_elmo.weights import memory

    if kind == "hdf5":
        path, named = hdf5_model(fixture_dir, tmp_path / "m"), "weights.hdf5"
    elif kind == "own":
        path, named = own_model(fixture_dir, tmp_path / "m"), "weights.pt"
    else:
        pipeline(fixture_dir, tmp_path / "p")
        path, named = tmp_path / "p", "elmo/model"
    monkeypatch.setattr(memory, "available_memory", lambda: 1000)
    with pytest.raises(ElmoResourceError) as err:
        spacy.load(path) if kind == "pipeline" else load_bilm(path)
    assert (
        named in str(err.value)
        and "GiB of memory" in str(err.value)
        and "0.00 GiB are available" in str(err.value)
    )


def test_torch_failing_to_allocate_is_a_resource_error(fixture_dir, tmp_path, monkeypatch):
    """torch raises RuntimeError, not MemoryError, when an allocation fails: one ElmoResourceError
    naming the file."""
    from spacy_elmo.weights import load

    def no_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
            "you tried to allocate 9743421440 bytes."
        )

    monkeypatch.setattr(load, "BiLM", no_memory)
    with pytest.raises(
        ElmoResourceError, match="lm_weights.hdf5: not enough memory to load this biLM"
    ):
        load_bilm(fixture_dir)


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


# ------------------------------------------------------------------ issue 32: decompression bombs,
# hostile own-format values
def test_an_hdf5_file_of_gzipped_zeros_is_refused_before_it_is_read(
    fixture_dir, tmp_path, monkeypatch
):
    """Every dataset the options imply, all zeros, in gzip'd chunks: the file stores far fewer bytes
    than it declares (a real trained model does not compress like that), so nothing is
    decompressed."""
    from spacy_elmo.weights import hdf5 as hdf5_format

    monkeypatch.setattr(
        hdf5_format, "CHECKED_DATASET_BYTES", 1024
    )  # the fixture's datasets are small
    directory = tmp_path / "bomb"
    directory.mkdir()
    shutil.copy(fixture_dir / "options.json", directory / "options.json")
    with h5py.File(directory / "weights.hdf5", "w") as f:
        for name, shape in hdf5_format.expected_shapes(
            BiLMOptions.from_file(fixture_dir / "options.json")
        ).items():
            f.create_dataset(
                name, data=np.zeros(shape, dtype=np.float32), chunks=True, compression="gzip"
            )
    refused(directory, "weights.hdf5", "'char_embed'", "compress")


def test_a_meta_tensor_in_the_own_format_is_refused(fixture_dir, tmp_path):
    directory = own_model(fixture_dir, tmp_path / "m")
    state = torch.load(directory / "weights.pt", weights_only=True)
    state["token_encoder.b_proj"] = torch.empty(state["token_encoder.b_proj"].shape, device="meta")
    torch.save(state, directory / "weights.pt")
    refused(directory, "weights.pt", "token_encoder.b_proj", "meta")


@pytest.mark.parametrize(
    "key, value",
    [("forget_bias", 1e308), ("forget_bias", -1e39), ("cell_clip", 1e39), ("proj_clip", 1e300)],
)
def test_an_own_format_option_out_of_float32_range_is_refused(fixture_dir, tmp_path, key, value):
    directory = own_model(fixture_dir, tmp_path / "m")
    config = json.loads((directory / "bilm.json").read_text())
    config["options"]["lstm"][key] = value
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", f"lstm.{key}")


def test_a_forget_bias_out_of_float32_range_in_options_json_is_refused(fixture_dir, tmp_path):
    options = fixture_options(fixture_dir)
    options["lstm"]["forget_bias"] = 1e39
    refused(hdf5_model(fixture_dir, tmp_path / "m", options), "options.json", "lstm.forget_bias")
