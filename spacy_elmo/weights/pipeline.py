"""A saved spaCy pipeline as weights: a directory written by `nlp.to_disk` (or `spacy train`'s
`model-best`), `config.cfg` + `meta.json`, whose one `elmo` component keeps its biLM in `NAME/model`
(thinc's serialization of `spacy_elmo.ElmoModel.v1`). `detect` reads nothing but the directory
listing; `elmo_component` reads `config.cfg` with the standard library (no spaCy); `load_pipeline`
reads the biLM with the component's own loader (`spacy_elmo.layers.bilm_model`, imported only when a
pipeline is read).
"""

from __future__ import annotations

import configparser
import json
import os
from pathlib import Path
from typing import List, Optional

from ..bilm.embedder import ElmoEmbedder
from ..bilm.policy import StatePolicy
from ..errors import ElmoFileError
from ..files import inside_dir, read_regular
from .data import ModelFiles

KIND = "pipeline"

PIPELINE_CONFIG, PIPELINE_META = "config.cfg", "meta.json"
ELMO_FACTORY = "elmo"
MAX_CONFIG_BYTES = 16 << 20


def detect(directory: Path) -> bool:
    """Whether `directory` is a saved spaCy pipeline (`config.cfg` and `meta.json`)."""
    return os.path.lexists(directory / PIPELINE_CONFIG) and os.path.lexists(
        directory / PIPELINE_META
    )


def held(directory: Path) -> List[str]:
    """`config.cfg` and `meta.json` where `directory` is a saved pipeline (see `detect`)."""
    return [PIPELINE_CONFIG, PIPELINE_META] if detect(directory) else []


def _factories(directory: Path) -> List[tuple]:
    """`(name, factory)` of each component in the pipeline's `config.cfg`, in the order it lists
    them."""
    path = inside_dir(directory, PIPELINE_CONFIG, "pipeline config")
    text = read_regular(path, "pipeline config", MAX_CONFIG_BYTES).decode("utf-8", "replace")
    parser = configparser.ConfigParser(interpolation=None, allow_no_value=True, strict=False)
    parser.optionxform = str
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as err:
        raise ElmoFileError(f"{path}: not a spaCy config ({type(err).__name__})") from None
    found = []
    for section in parser.sections():
        parts = section.split(".")
        if len(parts) == 2 and parts[0] == "components" and parser.has_option(section, "factory"):
            try:
                factory = json.loads(parser.get(section, "factory"))
            except ValueError:  # not JSON (thinc reads it as a string), or too many digits
                factory = parser.get(section, "factory")
            found.append((parts[1], factory))
    return found


def elmo_component(directory: Path) -> str:
    """The name of the one `elmo` component of the pipeline in `directory`; ElmoFileError where it
    has none or several (which biLM to use would be a guess)."""
    components = _factories(directory)
    names = [name for name, factory in components if factory == ELMO_FACTORY]
    if len(names) == 1:
        return names[0]
    if not names:
        listed = ", ".join(name for name, _ in components) or "none"
        raise ElmoFileError(
            f"{directory}: a spaCy pipeline with no elmo component (its components: {listed}), "
            "so it holds no biLM"
        )
    raise ElmoFileError(
        f"{directory}: a spaCy pipeline with {len(names)} elmo components ({', '.join(names)}): "
        "which biLM to use is ambiguous; save the one you want with spacy_elmo.save_bilm("
        "spacy.load(PIPELINE).get_pipe(NAME).bilm, DIR) and pass DIR"
    )


def model_file(directory: Path, name: str) -> Path:
    """Where the component `name` of the pipeline in `directory` keeps its biLM."""
    return inside_dir(directory, f"{name}/model", "ELMo model of the pipeline")


def model_files(directory: Path) -> ModelFiles:
    """The files of a pipeline `detect` accepts: its `config.cfg`, then the biLM of its one `elmo`
    component."""
    return ModelFiles(
        KIND, directory / PIPELINE_CONFIG, model_file(directory, elmo_component(directory))
    )


def describe(directory: Path, name: str) -> str:
    """What the commands call the biLM they use."""
    return f"biLM of component {name!r} in {directory}"


def load_pipeline(
    directory: Path, name: str, state: Optional[StatePolicy], cache_size: int
) -> ElmoEmbedder:
    """The biLM of component `name`, read by the component's own loader (thinc's `from_disk`)."""
    from ..layers.bilm_model import read_component_bilm  # thinc glue: imported only for a pipeline

    embedder = read_component_bilm(model_file(directory, name), state, cache_size)
    embedder.source = describe(directory, name)
    return embedder
