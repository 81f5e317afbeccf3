"""Helpers for the component tests: tagged examples, pipelines on the fixture biLM, configs."""
from __future__ import annotations

from pathlib import Path
from typing import List

from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "project" / "configs"
# The AllenNLP fixture biLM: 2 LSTM layers of projection 16 -> 3 output layers of width 32.
FIXTURE_LAYERS, FIXTURE_WIDTH = 3, 32


def tagged_examples(nlp, sentences) -> List[Example]:
    """Examples whose predicted Docs have no sentence boundaries (as `spacy train` makes them)."""
    return [Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, tags=t)) for w, t in sentences]


def fixture_config(name: str, fixture_dir: Path, **overrides) -> Config:
    """A shipped config from project/configs, resized for the fixture biLM."""
    config = Config().from_disk(CONFIGS / name, interpolate=False)
    config["paths"]["elmo"] = str(fixture_dir)
    config["system"]["gpu_allocator"] = None
    if "elmo" in config["components"]:
        config["components"]["tok2vec"]["model"]["embed"]["elmo"]["width"] = FIXTURE_WIDTH
    for dotted, value in overrides.items():
        *path, key = dotted.split(".")
        node = config
        for part in path:
            node = node[part]
        node[key] = value
    return config
