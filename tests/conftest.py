"""Shared fixtures. Data is read from `../shared/data` beside the repository, or from the directory
named by the environment variable SPACY_ELMO_DATA (see `helpers.data_path`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from .helpers import data_path
from .reference_bilm import TINY_OPTIONS, write_random_weights

# Every test model is tiny: one thread is faster, and fair to a busy 2-core machine (.ci/run also
# runs the numeric tests on 2: SPACY_ELMO_TEST_THREADS).
torch.set_num_threads(int(os.environ.get("SPACY_ELMO_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """AllenNLP's tiny ELMo fixture (options.json, lm_weights.hdf5 and reference outputs)."""
    return data_path("allennlp_elmo_fixture")


@pytest.fixture()
def fixture_bilm(fixture_dir):
    from spacy_elmo import load_bilm

    return load_bilm(fixture_dir, state="warm")


@pytest.fixture(params=["fixture", "random"])
def weights(request, fixture_dir, tmp_path_factory) -> Path:
    """Each of two weight directories: the AllenNLP fixture, and random tiny weights of
    TINY_OPTIONS (a biLM of other sizes)."""
    if request.param == "fixture":
        return fixture_dir
    return write_random_weights(tmp_path_factory.mktemp("random"), TINY_OPTIONS, seed=11)
