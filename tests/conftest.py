"""Shared test fixtures. Data is read from `../shared/data` beside the repository, or from
the directory named by the environment variable SPACY_ELMO_DATA."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("SPACY_ELMO_DATA", REPO.parent / "shared" / "data"))
FIXTURE_DIR = DATA_DIR / "allennlp_elmo_fixture"

# Every test model is tiny: one thread is faster, and fair to a busy 2-core machine.
torch.set_num_threads(1)


def data_path(*parts: str) -> Path:
    """A path under the shared data directory, or a skip naming what is missing (a failure where
    SPACY_ELMO_REQUIRE_DATA=1, as in CI, which always has the data)."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        message = f"shared data not found: {path} (set SPACY_ELMO_DATA to the data directory)"
        if os.environ.get("SPACY_ELMO_REQUIRE_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """AllenNLP's tiny ELMo fixture (options.json, lm_weights.hdf5 and reference outputs)."""
    return data_path("allennlp_elmo_fixture")


@pytest.fixture()
def fixture_bilm(fixture_dir):
    from spacy_elmo import load_bilm

    return load_bilm(fixture_dir, state="warm")
