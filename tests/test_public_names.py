"""Names users rely on stay: the package's public names, and names that moved out of
`spacy_elmo.bilm`, which still work there with a DeprecationWarning naming their new place."""

from __future__ import annotations

import importlib

import pytest

import spacy_elmo


@pytest.mark.parametrize(
    "name",
    [
        "load_bilm",
        "locate",
        "save_bilm",
        "export_hdf5",
        "read_state_dict",
        "bilm_from_state_dict",
        "ModelFiles",
    ],
)
def test_names_moved_to_weights_still_work_from_bilm(name):
    bilm = importlib.import_module("spacy_elmo.bilm")
    with pytest.warns(DeprecationWarning, match=f"use spacy_elmo.weights.{name}"):
        old = getattr(bilm, name)
    assert old is getattr(importlib.import_module("spacy_elmo.weights"), name)
    assert name not in bilm.__all__


def test_options_from_a_file_still_work_from_the_core(fixture_dir):
    """`BiLMOptions.from_file` reads a file, which the core no longer does: it is
    `spacy_elmo.weights.read_options`, and the old name still works with a DeprecationWarning."""
    from spacy_elmo.bilm import BiLMOptions
    from spacy_elmo.weights import read_options

    with pytest.warns(DeprecationWarning, match="use spacy_elmo.weights.read_options"):
        old = BiLMOptions.from_file(fixture_dir / "options.json")
    assert old == read_options(fixture_dir / "options.json")


def test_the_public_names_stay():
    from spacy_elmo.bilm import BiLM, BiLMOptions, ElmoEmbedder, batch_char_ids  # noqa: F401

    for name in ("load_bilm", "save_bilm", "export_hdf5", "BiLM", "BiLMOptions", "ElmoEmbedder"):
        assert name in spacy_elmo.__all__ and getattr(spacy_elmo, name) is not None
