"""A saved spaCy pipeline as weights: a directory written by `nlp.to_disk` (or `spacy train`'s
`model-best`), `config.cfg` + `meta.json`, whose one `elmo` component keeps its biLM in `NAME/model`
(thinc's serialization of `spacy_elmo.ElmoModel.v1`, read without thinc: `pipeline_file.py`).
`detect` reads nothing but the directory listing; `elmo_component` reads `config.cfg` with the
standard library (no spaCy); `read` reads the biLM's message (`read_message`, which the component's
own `from_disk` / `from_bytes` use too) into `ModelData`.
"""

from __future__ import annotations

import configparser
import json
import os
import re
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import srsly

from ..bilm.chars import CharTable
from ..bilm.options import BiLMOptions
from ..bilm.policy import StatePolicy
from ..errors import ElmoConfigError, ElmoFileError, ElmoResourceError
from ..files import inside_dir, read_regular
from .data import ModelData, ModelFiles
from .pipeline_file import bilm_message, read_model_file
from .state_dict import read_state_dict

KIND = "pipeline"
VARIABLE = re.compile(r"\$\{([\w.-]+)\}")  # a config value that is a variable, `${section.key}`
MAX_VARIABLE_DEPTH = 8
# the biLM's own message, which `spacy_elmo.layers.bilm_model.serialize_bilm` writes
SERIAL_FORMAT = "spacy_elmo.ElmoModel"
SERIAL_VERSION = 1

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


def _config(directory: Path) -> configparser.ConfigParser:
    """The pipeline's `config.cfg`, read as it stands (no interpolation)."""
    path = inside_dir(directory, PIPELINE_CONFIG, "pipeline config")
    text = read_regular(path, "pipeline config", MAX_CONFIG_BYTES, directory)
    text = text.decode("utf-8", "replace")
    parser = configparser.ConfigParser(interpolation=None, allow_no_value=True, strict=False)
    parser.optionxform = str
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as err:
        raise ElmoFileError(f"{path}: not a spaCy config ({type(err).__name__})") from None
    return parser


def _value(parser: configparser.ConfigParser, section: str, option: str, depth: int = 0) -> Any:
    """A config value as thinc reads it: JSON, or else the string as written; a value that is one
    variable (`${vars.state}`) is the value it names, as thinc interpolates it."""
    text = parser.get(section, option)
    reference = VARIABLE.fullmatch(text.strip())
    if reference and depth < MAX_VARIABLE_DEPTH:
        where, _, key = reference.group(1).rpartition(".")
        if parser.has_option(where, key):
            return _value(parser, where, key, depth + 1)
    try:
        return json.loads(text)
    except ValueError:  # not JSON (thinc reads it as a string), or too many digits
        return text


def configured_state(directory: Path, name: str) -> Optional[StatePolicy]:
    """The state policy the pipeline's `config.cfg` gives component `name` (`[components.NAME.model]
    state`), which spacy.load applies; None where it gives none or null (the weights' own)."""
    parser, section = _config(directory), f"components.{name}.model"
    value = _value(parser, section, "state") if parser.has_option(section, "state") else None
    try:
        return None if value is None else StatePolicy.parse(value)
    except ElmoConfigError as err:
        raise ElmoFileError(f"{directory / PIPELINE_CONFIG}: [{section}] state: {err}") from None


def _factories(directory: Path) -> List[tuple]:
    """`(name, factory)` of each component in the pipeline's `config.cfg`, in the order it lists
    them."""
    parser = _config(directory)
    found = []
    for section in parser.sections():
        parts = section.split(".")
        if len(parts) == 2 and parts[0] == "components" and parser.has_option(section, "factory"):
            found.append((parts[1], _value(parser, section, "factory")))
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
    name = elmo_component(directory)
    return ModelFiles(
        KIND,
        directory / PIPELINE_CONFIG,
        model_file(directory, name),
        label=describe(directory, name),
    )


def describe(directory: Path, name: str) -> str:
    """What the commands call the biLM they use."""
    return f"biLM of component {name!r} in {directory}"


def read(model: ModelFiles) -> ModelData:
    """The biLM of the pipeline's `elmo` component (`model.weights`, read from the pipeline's
    directory): its file checked from its framing (`read_model_file`), then its message read as the
    component reads it (`read_message`), whose errors name the file. A message that records no state
    policy (an earlier version's) has the one the config gives the component, as in spacy.load."""
    path = str(model.weights)  # `model_file`'s: inside the pipeline's directory
    directory = model.config.parent
    data = read_model_file(
        path, "ELMo model of the pipeline", lambda options: None, model.directory or directory
    )
    with naming_file(path):
        return read_message(
            bilm_message(data),
            path,
            unrecorded=lambda: configured_state(directory, elmo_component(directory)),
        )


def read_message(
    data: bytes,
    source: str,
    accept: Optional[Callable[[BiLMOptions], None]] = None,
    unrecorded: Callable[[], Optional[StatePolicy]] = lambda: None,
) -> ModelData:
    """The biLM message that `serialize_bilm` wrote (msgpack: `format`, `version`, `options` JSON,
    `state_dict` (torch.save's bytes), `state`, `warm_state`, `char_table` JSON where the options
    have one) -> `ModelData` naming `source`; `accept(options)` raises where the options are not
    wanted, before the rest is read. A message of an earlier version, which records no `state`, has
    `unrecorded()` (None: warm), and a warm state in `warm_h` / `warm_c` only under a policy that
    starts from it. ElmoFileError otherwise, which does not name the file (see `naming_file`)."""
    msg = srsly.msgpack_loads(data)
    if (
        not isinstance(msg, dict)
        or msg.get("format") != SERIAL_FORMAT
        or msg.get("version") != SERIAL_VERSION
    ):
        raise ElmoFileError(f"not a serialized {SERIAL_FORMAT} v{SERIAL_VERSION} model")
    if not isinstance(msg.get("options"), str) or not isinstance(msg.get("state_dict"), bytes):
        raise ElmoFileError("the serialized model lacks its options or its weights")
    try:
        options = json.loads(msg["options"])
    except json.JSONDecodeError as err:
        raise ElmoFileError(f"its options are not valid JSON ({err})") from None
    options = BiLMOptions.from_dict(options, source="options")
    if accept is not None:
        accept(options)
    try:
        policy = StatePolicy.parse(msg["state"] if "state" in msg else unrecorded() or "warm")
    except ElmoConfigError as err:
        raise ElmoFileError(f"its state policy: {err}") from None
    table = None
    if options.char_table:
        if not isinstance(msg.get("char_table"), str):
            raise ElmoFileError("the serialized model lacks its character table")
        table = CharTable.from_json(
            msg["char_table"],
            options.max_characters_per_token,
            options.n_characters,
            options.n_words,
            "its character table",
        )
    state_dict = read_state_dict(BytesIO(msg["state_dict"]), "weights")
    warm_state = msg.get("warm_state", policy.warm_start) is True
    return ModelData(options, state_dict, source, policy, table, warm_state)


@contextmanager
def naming_file(source: str) -> Iterator[None]:
    """What reading a biLM's message from `source` raises, as one error naming it: an ElmoFileError
    or ElmoResourceError prefixed with `source`, anything else (thinc and msgpack raise many types
    for corrupt data) an ElmoFileError."""
    try:
        yield
    except (ElmoFileError, ElmoResourceError) as err:
        raise type(err)(f"{source}: {err}") from None
    except Exception as err:
        raise ElmoFileError(
            f"{source}: not a serialized ELMo model, truncated or corrupt? "
            f"({type(err).__name__}: {err})"
        ) from None
