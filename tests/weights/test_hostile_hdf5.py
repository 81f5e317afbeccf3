"""Hostile, corrupt and mistyped HDF5 weight files (bilm-tf layout): each is refused with one
ElmoFileError that names the file, the dataset and the problem, before anything large is read;
float16 and float64 datasets are read. Every file is a damaged copy of the fixture, in tmp_path."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from spacy_elmo import ElmoResourceError, load_bilm
from spacy_elmo.bilm import BiLMOptions
from spacy_elmo.weights import read_options

from ..helpers import refused
from ..model_files import B_PROJ, W_0, fixture_options, hdf5_model, load_in_3gb


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


@pytest.mark.parametrize("at, value", [(0, 0xFF), (16, 0)])
def test_a_corrupt_object_header_is_one_error_naming_the_file(fixture_dir, tmp_path, at, value):
    """A damaged header of one dataset (its version byte; its first message's type), which h5py
    reports as a KeyError or a TypeError, is refused as a corrupt file, not that exception."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r") as f:
        header = h5py.h5o.get_info(f[B_PROJ].id).addr
    data = bytearray((directory / "weights.hdf5").read_bytes())
    data[header + at] = value
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


@pytest.mark.parametrize("dtype", ["i4", "?", "c8", "u1", np.longdouble])
def test_hdf5_weights_must_be_float(fixture_dir, tmp_path, dtype):
    """Not float16/32/64: integers, booleans, complex numbers and long doubles (float128 where
    the platform has it) are refused."""
    if np.dtype(dtype).itemsize in (2, 4, 8) and np.dtype(dtype).kind == "f":
        pytest.skip("long double is float64 here")
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        data = f[B_PROJ][...]
        del f[B_PROJ]
        f.create_dataset(B_PROJ, data=data.astype(dtype))
    refused(directory, "weights.hdf5", B_PROJ, "dtype")


def test_a_transposed_dataset_is_refused(fixture_dir, tmp_path):
    """A dataset of the right sizes in the wrong order is not the weights the options imply."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        data = f["CNN_proj/W_proj"][...]
        del f["CNN_proj/W_proj"]
        f.create_dataset("CNN_proj/W_proj", data=data.T)
    refused(directory, "weights.hdf5", "'CNN_proj/W_proj' has shape (16, 124)", "implies (124, 16)")


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


def gzip_chunked(fixture_dir, tmp_path, write):
    """The fixture's model with W_0 stored gzip'd in chunks of (8, 16), `write(dataset, values)`
    writing what it writes of W_0's values -> the model directory."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        values = f[W_0][...]
        del f[W_0]
        dataset = f.create_dataset(
            W_0, shape=values.shape, dtype="f4", chunks=(8, 16), compression="gzip"
        )
        write(dataset, values)
    return directory


def test_partly_written_compressed_hdf5_is_refused(fixture_dir, tmp_path):
    """A gzip-chunked dataset with one chunk of many written passed the stored-bytes check
    (compressed data may be small) and read the rest as fill: a 46 KB file took 9.7 GB."""

    def one_chunk(dataset, values):
        dataset[:8, :16] = values[:8, :16]

    directory = gzip_chunked(fixture_dir, tmp_path, one_chunk)
    refused(directory, "weights.hdf5", W_0, "partly written or crafted", "chunks")


def test_a_compressed_dataset_missing_one_chunk_is_refused(fixture_dir, tmp_path):
    """Every chunk of a gzip'd dataset written but one, which would read as zeros."""

    def all_but_the_last(dataset, values):
        dataset[:-8] = values[:-8]
        dataset[-8:, :-16] = values[-8:, :-16]

    directory = gzip_chunked(fixture_dir, tmp_path, all_but_the_last)
    refused(directory, "weights.hdf5", W_0, "stores 63 of its 64 chunks")


def test_a_compressed_dataset_missing_its_partial_last_chunk_is_refused(fixture_dir, tmp_path):
    """Chunks that do not divide the shape: the last, partial chunk counts (rounded up), so a
    gzip'd dataset without it is refused, not read with its last rows as zeros."""
    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        values = f[W_0][...]
        del f[W_0]
        rows = values.shape[0]
        assert rows % 5
        dataset = f.create_dataset(
            W_0, shape=values.shape, dtype="f4", chunks=(5, values.shape[1]), compression="gzip"
        )
        whole = rows - rows % 5
        dataset[:whole] = values[:whole]
    refused(directory, "weights.hdf5", W_0, f"stores {rows // 5} of its {rows // 5 + 1} chunks")


def test_a_dataset_of_exactly_the_checked_size_is_checked_for_compression(
    fixture_dir, tmp_path, monkeypatch
):
    """The compression check covers datasets of CHECKED_DATASET_BYTES and more: one of exactly
    that size, all zeros gzip'd, is refused."""
    from spacy_elmo.weights import hdf5 as hdf5_format

    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        shape = f[W_0].shape
        del f[W_0]
        f.create_dataset(W_0, data=np.zeros(shape, "f4"), chunks=True, compression="gzip")
    monkeypatch.setattr(hdf5_format, "CHECKED_DATASET_BYTES", 4 * int(np.prod(shape)))
    refused(directory, "weights.hdf5", W_0, "decompress")


def test_a_dataset_compressed_just_past_the_bound_is_refused(fixture_dir, tmp_path, monkeypatch):
    """The bound is MAX_COMPRESSION_RATIO itself, not some far larger ratio: a dataset of the
    checked size compressed between 1 and 2 times the bound (mostly zeros) is refused."""
    from spacy_elmo.weights import hdf5 as hdf5_format

    directory = hdf5_model(fixture_dir, tmp_path / "m")
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        values = np.zeros(f[W_0].shape, "f4")
        values.reshape(-1)[::24] = np.random.default_rng(0).standard_normal(-(-values.size // 24))
        del f[W_0]
        dataset = f.create_dataset(W_0, data=values, chunks=True, compression="gzip")
        ratio = dataset.nbytes / dataset.id.get_storage_size()
    assert hdf5_format.MAX_COMPRESSION_RATIO < ratio < 2 * hdf5_format.MAX_COMPRESSION_RATIO
    monkeypatch.setattr(hdf5_format, "CHECKED_DATASET_BYTES", values.nbytes)
    refused(directory, "weights.hdf5", W_0, "decompress")


def test_an_hdf5_file_of_gzipped_zeros_is_refused_before_it_is_read(
    fixture_dir, tmp_path, monkeypatch
):
    """Every dataset the options imply, all zeros, in gzip'd chunks: the file stores far fewer bytes
    than it declares (a real trained model does not compress like that), so nothing is
    decompressed."""
    from spacy_elmo.weights import hdf5 as hdf5_format

    # the fixture's datasets are small
    monkeypatch.setattr(hdf5_format, "CHECKED_DATASET_BYTES", 1024)
    directory = tmp_path / "bomb"
    directory.mkdir()
    shutil.copy(fixture_dir / "options.json", directory / "options.json")
    with h5py.File(directory / "weights.hdf5", "w") as f:
        for name, shape in hdf5_format.expected_shapes(
            read_options(fixture_dir / "options.json")
        ).items():
            f.create_dataset(
                name, data=np.zeros(shape, dtype=np.float32), chunks=True, compression="gzip"
            )
    refused(directory, "weights.hdf5", "'char_embed'", "compress")


@pytest.mark.parametrize(
    "section, key, value, dataset",
    [
        ("lstm", "n_layers", 1, "Cell1"),
        ("char_cnn", "n_highway", 1, "CNN_high_1"),
    ],
)
def test_options_of_a_smaller_bilm_than_the_weights_are_refused(
    fixture_dir, tmp_path, section, key, value, dataset
):
    """Options that describe fewer LSTM layers or highways than the weight file holds would load
    part of another biLM without a word: the datasets they leave out are named (fewer filters
    change the highways' shapes, refused as such)."""
    options = fixture_options(fixture_dir)
    options[section][key] = value
    directory = hdf5_model(fixture_dir, tmp_path / "m", options)
    refused(directory, "weights.hdf5", "options.json", dataset, "do not belong together")


def _rewritten(directory, chunks_of, resizable: bool = False, **kwargs):
    """`directory` with every dataset of its weights.hdf5 written again, chunked as
    `chunks_of(name, shape)` says (True: h5py's choice), resizable in every dimension or not, with
    h5py's other dataset arguments `kwargs` (compression)."""
    path = directory / "weights.hdf5"
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: arrays.update({n: o[...]} if isinstance(o, h5py.Dataset) else {}))
    with h5py.File(path, "w") as f:
        for name, values in arrays.items():
            f.create_dataset(
                name,
                data=values,
                chunks=chunks_of(name, values.shape),
                maxshape=(None,) * values.ndim if resizable else None,
                **kwargs,
            )
    return directory


@pytest.mark.timeout(60)
def test_a_chunk_declared_far_larger_than_its_dataset_is_refused_before_it_is_read(
    fixture_dir, tmp_path
):
    """A small dataset in one gzip chunk of 2048 x 2048 floats (a resizable dataset's chunk may
    exceed its shape): the file is small, the dataset under the compression check's size, and
    reading it would inflate the whole 16 MB chunk (a 1.5 MB file made a load take 1 GB)."""
    directory = _rewritten(
        hdf5_model(fixture_dir, tmp_path / "m"),
        lambda name, shape: (2048, 2048) if name == "CNN_proj/W_proj" else True,
        resizable=True,
        compression="gzip",
    )
    assert (directory / "weights.hdf5").stat().st_size < 1 << 20
    refused(directory, "weights.hdf5", "'CNN_proj/W_proj'", "chunk", "16,777,216")


@pytest.mark.parametrize(
    "chunks, resizable, kwargs",
    [
        ("h5py", False, {}),
        ("h5py", False, {"compression": "gzip", "shuffle": True}),
        ("h5py", True, {"compression": "gzip"}),
        ("ragged", True, {"compression": "lzf"}),
    ],
    ids=["h5py-chunks", "gzip-shuffle", "resizable-gzip", "ragged-chunks-lzf"],
)
def test_chunked_and_compressed_weight_files_load(
    fixture_dir, fixture_bilm, tmp_path, chunks, resizable, kwargs
):
    """h5py's own chunking (of resizable datasets too), chunks a little over a third of each
    dimension (ragged edges) and compression: the fixture's biLM, unchanged."""
    directory = _rewritten(
        hdf5_model(fixture_dir, tmp_path / "m"),
        lambda name, shape: True if chunks == "h5py" else tuple(n // 3 + 1 for n in shape),
        resizable,
        **kwargs,
    )
    sentences = [["The", "cat", "sat", "."], ["Hello", "world"]]
    for a, b in zip(load_bilm(directory).embed(sentences), fixture_bilm.embed(sentences)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("over", [False, True])
def test_one_chunk_larger_than_its_dataset_by_more_than_the_checked_size_is_refused(
    fixture_dir, tmp_path, over
):
    """char_embed (261 x 4 floats) in one chunk of 261 rows and as many columns as keep it within
    its bytes plus CHECKED_DATASET_BYTES (read), or one column more (refused)."""
    from spacy_elmo.weights.hdf5 import CHECKED_DATASET_BYTES

    columns = (CHECKED_DATASET_BYTES + 261 * 4 * 4) // (261 * 4) + over
    directory = _rewritten(
        hdf5_model(fixture_dir, tmp_path / "m"),
        lambda name, shape: (261, columns) if name == "char_embed" else True,
        resizable=True,
        compression="gzip",
    )
    if over:
        refused(directory, "weights.hdf5", "'char_embed'", f"chunks of shape (261, {columns})")
    else:
        assert load_bilm(directory).output_dim == 32


def test_many_chunks_together_too_large_for_their_dataset_are_refused(fixture_dir, tmp_path):
    """char_embed (261 x 4 floats, 4 KB) in 261 gzip'd chunks of 1 x 4096 floats: each within the
    bound alone, 4.3 MB together once read."""
    directory = _rewritten(
        hdf5_model(fixture_dir, tmp_path / "m"),
        lambda name, shape: (1, 4096) if name == "char_embed" else True,
        resizable=True,
        compression="gzip",
    )
    refused(directory, "weights.hdf5", "'char_embed'", "261 chunks of shape (1, 4096)")
