"""The biLM inside a saved pipeline (elmo/model) damaged, corrupt or holding non-finite weights:
`spacy.load` and `from_bytes` raise one ElmoFileError naming it."""

from __future__ import annotations

import io
import os
import re
import shutil

import pytest
import spacy
import torch
from thinc.api import Config

from spacy_elmo import ElmoFileError, ElmoResourceError, load_bilm

from ..model_files import (
    declare_weights,
    edit_pipeline_bilm,
    fixture_options,
    pipeline,
    refused_with_peak,
)


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


@pytest.mark.parametrize(
    "damage", [lambda b: b + b"xx", lambda b: b[: len(b) // 2], lambda b: b"\x93garbage" * 5]
)
def test_corrupt_pipeline_model_names_the_file(fixture_dir, tmp_path, damage):
    model = pipeline(fixture_dir, tmp_path / "p")
    model.write_bytes(damage(model.read_bytes()))
    with pytest.raises(ElmoFileError, match="elmo/model"):
        spacy.load(tmp_path / "p")


def test_a_factory_of_too_many_digits_is_no_elmo_component(fixture_dir, tmp_path):
    pipeline(fixture_dir, tmp_path / "p")
    config = tmp_path / "p" / "config.cfg"
    config.write_text(config.read_text().replace('factory = "elmo"', "factory = " + "9" * 5000))
    with pytest.raises(ElmoFileError, match="no elmo component"):
        load_bilm(tmp_path / "p")


def test_corrupt_pipeline_bytes(fixture_dir, tmp_path):
    pipeline(fixture_dir, tmp_path / "p")
    nlp = spacy.load(tmp_path / "p")
    data = nlp.get_pipe("elmo").model.to_bytes()
    with pytest.raises(ElmoFileError, match="serialized"):
        nlp.get_pipe("elmo").model.from_bytes(data[:-100])


@pytest.mark.parametrize("linked", ["elmo/model", "elmo"])
def test_spacy_load_refuses_a_biLM_symlinked_from_outside_the_pipeline(
    fixture_dir, tmp_path, linked
):
    """`spacy.load` read a pipeline's biLM through a symlink to another pipeline's elsewhere (its
    model file or its whole elmo directory), where `load_bilm` of the same directory refused it:
    now both refuse, naming the link."""
    model = pipeline(fixture_dir, tmp_path / "p")
    elsewhere = pipeline(fixture_dir, tmp_path / "elsewhere")
    inside = tmp_path / "p" / linked
    shutil.rmtree(inside) if inside.is_dir() else inside.unlink()
    inside.symlink_to(elsewhere if linked == "elmo/model" else elsewhere.parent)
    assert model.exists()  # through the link
    for load in (spacy.load, load_bilm):
        with pytest.raises(
            ElmoFileError, match=r"elmo/model: refused: .* is a symlink to .*outside"
        ):
            load(tmp_path / "p")


@pytest.mark.parametrize("kind", ["pipeline", "bilm"])
def test_a_model_file_longer_than_its_contents_is_refused_before_it_is_read(
    fixture_dir, tmp_path, kind
):
    """A pipeline's elmo/model extended to a 2 GB sparse file was read whole (and copied) by
    `spacy.load` and `load_bilm` / `info` before msgpack refused it: now its framing is read first
    and the file refused, naming its size and where its contents end."""
    model = pipeline(fixture_dir, tmp_path / "p")
    size = model.stat().st_size
    os.truncate(model, 2 << 30)
    message, grown_mib = refused_with_peak(tmp_path / "p", kind)
    assert re.search(
        rf"elmo/model: 2,147,483,648 bytes, more than the {size:,} its contents take", message
    ), message
    assert grown_mib < 256


@pytest.mark.parametrize("kind", ["pipeline", "bilm"])
def test_weights_larger_than_the_biLM_they_declare_are_refused_before_they_are_read(
    fixture_dir, tmp_path, kind
):
    """A pipeline's elmo/model whose framing declares 1 GB of weights for the fixture's sizes (a
    sparse file): refused from its options before anything is read."""
    model = pipeline(fixture_dir, tmp_path / "p")
    declare_weights(model, 1 << 30)
    message, grown_mib = refused_with_peak(tmp_path / "p", kind)
    assert re.search(
        r"elmo/model: its weights take 1,073,741,824 bytes, more than the [\d,]+ that its biLM "
        r"\(105,124 parameters\) takes",
        message,
    ), message
    assert grown_mib < 256


def test_the_memory_to_load_a_pipeline_biLM_is_checked_before_its_file_is_read(
    fixture_dir, tmp_path, monkeypatch
):
    """Loading elmo/model holds several copies of its bytes at once (the file, each nested
    message, the tensors, the network): where memory for 4 copies of the file is all there is, it
    is one ElmoResourceError before the file is read, not a check of the tensors alone after."""
    from spacy_elmo.weights import memory

    model = pipeline(fixture_dir, tmp_path / "p")
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * model.stat().st_size)
    with pytest.raises(ElmoResourceError, match=r"elmo/model: loading this biLM needs about"):
        spacy.load(tmp_path / "p")


def test_sizes_in_the_config_are_not_allocated_before_the_weights_are_read(fixture_dir, tmp_path):
    """A pipeline whose config declares a large biLM (151M parameters) while elmo/model holds the
    fixture's: `spacy.load` built and initialised the configured biLM before the mismatch was
    found; now the biLM is built from the weights it loads and the sizes compared first."""
    pipeline(fixture_dir, tmp_path / "p")
    options = fixture_options(fixture_dir)
    options["lstm"].update(dim=4096, projection_dim=1024)
    config = Config().from_disk(tmp_path / "p" / "config.cfg", interpolate=False)
    config["components"]["elmo"]["model"]["options"] = options
    config.to_disk(tmp_path / "p" / "config.cfg")
    message, grown_mib = refused_with_peak(tmp_path / "p", "pipeline")
    assert re.search(r"elmo/model.*lstm_dim: config 4096, weights 64", message), message
    assert grown_mib < 256
