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
    load_in_3gb,
    own_model,
    pipeline,
)


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
