"""The JSON the weight formats read, and its bounds: a small JSON file read whole (an options file,
`bilm.json`, an ELMoForManyLangs `config.json`), an options file as `BiLMOptions`, and the most
bytes of a character table's JSON (`char_table.json`, or the one a saved pipeline holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from ..bilm.options import BiLMOptions
from ..files import parse_json, read_regular

MAX_JSON_BYTES = 1 << 20  # options files are a few hundred bytes
# a character and a word table (a few MB for the published ELMoForManyLangs models)
MAX_TABLE_BYTES = 256 << 20


def read_json(path: Path, what: str = "ELMo options file", inside: Optional[Path] = None) -> Any:
    """A small JSON file (an options file or `bilm.json`): not a regular file, too large, not UTF-8
    or not JSON -> ElmoFileError. `inside`: its model directory (see `files.open_regular`)."""
    return parse_json(read_regular(path, what, MAX_JSON_BYTES, inside), path, what)


def read_options(path: Union[str, Path]) -> BiLMOptions:
    """The options file at `path` (the bilm-tf / AllenNLP layout); ElmoFileError naming it where it
    cannot be read or its options are not valid."""
    return BiLMOptions.from_dict(read_json(Path(path)), source=str(path))
