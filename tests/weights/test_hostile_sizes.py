"""Sizes checked before allocating and the memory a load needs, in every format: huge or
inconsistent sizes fail fast in a child bounded to 3 GB of address space, a shortfall of memory is
one ElmoResourceError naming the file."""

from __future__ import annotations

import json

import pytest
import spacy
import torch

from spacy_elmo import ElmoResourceError, load_bilm

from ..model_files import (
    edit_pipeline_bilm,
    fixture_options,
    hdf5_model,
    loads_in_3gb,
    own_model,
    pipeline,
    refused_in_3gb,
)

HUGE = [
    ("options", "char_cnn.n_highway", 10**9),
    ("options", "lstm.n_layers", 10**7),
    ("options", "char_cnn.max_characters_per_token", 10**9),
    ("own", "lstm.dim", 10**9),
    ("pipeline", "lstm.dim", 10**9),
]


def huge_model(fixture_dir, directory, kind, key, value):
    """The fixture as a model of `kind` whose option `key` is `value` -> (what loads it, its path,
    the file the error must name)."""
    section, name = key.split(".")
    directory.mkdir(parents=True)
    if kind == "options":
        opts = fixture_options(fixture_dir)
        opts[section][name] = value
        return "bilm", hdf5_model(fixture_dir, directory / "m", opts), "options.json"
    if kind == "own":
        path = own_model(fixture_dir, directory / "m")
        config = json.loads((path / "bilm.json").read_text())
        config["options"][section][name] = value
        (path / "bilm.json").write_text(json.dumps(config))
        return "bilm", path, "bilm.json"
    model = pipeline(fixture_dir, directory / "p")

    def edit(msg):
        opts = json.loads(msg["options"])
        opts[section][name] = value
        msg["options"] = json.dumps(opts)

    edit_pipeline_bilm(model, edit)
    return "pipeline", directory / "p", "elmo/model"


def oversized_own_model(fixture_dir, directory):
    """The fixture in this project's format, its options grown to 805M parameters (within the
    bounds)."""
    path = own_model(fixture_dir, directory)
    config = json.loads((path / "bilm.json").read_text())
    config["options"]["char_cnn"].update(filters=[[1, 8192]], n_highway=6)
    (path / "bilm.json").write_text(json.dumps(config))
    return path


def shared_views_model(fixture_dir, directory):
    """The oversized model plus 1000 entries viewing one 4 MB storage: they look like 10**9
    values, but only 4 MB is stored."""
    path = oversized_own_model(fixture_dir, directory)
    state = torch.load(path / "weights.pt", weights_only=True)
    shared = torch.zeros(2**20)
    state.update({f"view_{i}": shared[:] for i in range(1000)})
    torch.save(state, path / "weights.pt")
    return path


@pytest.fixture(scope="module")
def bounded(fixture_dir, tmp_path_factory):
    """Every model of this module that must be refused, each loaded in turn in one child bounded
    to 3 GB of address space (one start, not one per test): case -> its result (`refused_in_3gb`)
    and the file the error must name."""
    tmp = tmp_path_factory.mktemp("bounded")
    models = {case: huge_model(fixture_dir, tmp / f"huge{i}", *case) for i, case in enumerate(HUGE)}
    models["oversized"] = ("bilm", oversized_own_model(fixture_dir, tmp / "oversized"), None)
    models["views"] = ("bilm", shared_views_model(fixture_dir, tmp / "views"), None)
    results = loads_in_3gb([(kind, path) for kind, path, _ in models.values()])
    return {case: (result, model[2]) for (case, model), result in zip(models.items(), results)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind, key, value", HUGE)
def test_huge_sizes_fail_fast_without_allocating(bounded, kind, key, value):
    result, named = bounded[(kind, key, value)]
    seconds, message = refused_in_3gb(result)
    assert seconds < 5 and key in message and named in message and str(value) in message


@pytest.mark.timeout(300)
def test_sizes_the_weights_do_not_have_are_refused_before_allocating(bounded):
    """Options within the bounds (805M parameters, 3.2 GB) beside the fixture's small weights.pt."""
    seconds, message = refused_in_3gb(bounded["oversized"][0])
    assert seconds < 5 and "weights.pt" in message and "805,615,656 parameters" in message


@pytest.mark.timeout(300)
def test_views_of_one_storage_do_not_count_as_weights(bounded):
    """1000 entries viewing one 4 MB storage look like 10**9 values, but only 4 MB is stored."""
    seconds, message = refused_in_3gb(bounded["views"][0])
    assert seconds < 5 and "weights.pt" in message and "805,615,656 parameters" in message


def test_parameter_count_matches_the_model(fixture_dir):
    bilm = load_bilm(fixture_dir)
    assert bilm.options.n_parameters == sum(p.numel() for p in bilm.parameters())


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


def test_an_hdf5_load_counts_each_float32_copy_of_the_weights(fixture_dir, tmp_path, monkeypatch):
    """Reading an hdf5 pair holds HDF5_COPIES float32 copies of the weights at once: memory for
    fewer copies is refused before anything is read, memory for that many loads."""
    from spacy_elmo.weights import hdf5, memory

    path = hdf5_model(fixture_dir, tmp_path / "m")
    weights = 4 * load_bilm(path).options.n_parameters
    monkeypatch.setattr(memory, "available_memory", lambda: (hdf5.HDF5_COPIES - 1) * weights)
    with pytest.raises(ElmoResourceError, match="weights.hdf5: loading this biLM needs"):
        load_bilm(path)
    monkeypatch.setattr(memory, "available_memory", lambda: hdf5.HDF5_COPIES * weights)
    assert load_bilm(path).options.n_parameters * 4 == weights


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
