"""The biLM inside a saved pipeline (elmo/model) damaged, corrupt or holding non-finite weights:
`spacy.load` and `from_bytes` raise one ElmoFileError naming it."""

from __future__ import annotations

import io
import shutil

import pytest
import spacy
import torch

from spacy_elmo import ElmoFileError, load_bilm

from ..model_files import edit_pipeline_bilm, pipeline


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
