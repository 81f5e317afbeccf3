"""The biLM's sizes, read from and written to the bilm-tf / AllenNLP options JSON."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from ..errors import ElmoFileError
from .chars import CHAR_SPECIALS, WORD_SPECIALS

ACTIVATIONS = ("relu", "tanh")
# Upper bounds on sizes read from files, checked before anything is allocated. The published models
# use dims up to 4096, 2 layers, 2 highways, 7 filters, 50 characters and 93.6M parameters.
MAX_DIM = 2**16
MAX_LAYERS = 64
MAX_FILTERS = 256
MAX_CHARACTERS_PER_TOKEN = 1024
# rows of a character or word table (ELMoForManyLangs: thousands to a few 100,000)
MAX_TABLE_ROWS = 2**24
MAX_PARAMETERS = 2**30
# Float options are used in float32: clips from its smallest normal to its largest value, and a
# forget bias within +-100 (sigmoid saturates in float32 beyond +-17; the published models use 1).
FLOAT32_TINY, FLOAT32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
MAX_FORGET_BIAS = 100.0
# The unknown word of a model that records none (published and older models): `pretrain`'s default
# `corpus.unk_token`, the one of PTB and WikiText.
UNK_TOKEN = "<unk>"
MAX_UNK_CHARACTERS = 1024


REQUIRED = object()  # the default of an option that an options file must give


def _integer(value: Any, where: str, bounds: Tuple[int, int], source: str) -> int:
    """An int from `bounds[0]` to `bounds[1]` (a bool or a float is no int)."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise ElmoFileError(f"{source}: '{where}' must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ElmoFileError(
            f"{source}: '{where}' = {value!r} is out of range: it must be from {low} to {high}"
        )
    return value


def _number(value: Any, where: str, bounds: Tuple[float, float], source: str) -> float:
    """An int or float from `bounds[0]` to `bounds[1]`, as a float."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ElmoFileError(
            f"{source}: '{where}' must be a number from {low:g} to {high:g}, got {value!r}"
        )
    return float(value)


def _clip(value: Any, where: str, bounds: Tuple[float, float], source: str) -> float:
    """A clip: a number within `bounds`, or null for none (inf)."""
    return float("inf") if value is None else _number(value, where, bounds, source)


def _boolean(value: Any, where: str, bounds: Any, source: str) -> bool:
    if not isinstance(value, bool):
        raise ElmoFileError(f"{source}: '{where}' must be true or false, got {value!r}")
    return value


def _token(value: Any, where: str, bounds: Tuple[int, int], source: str) -> Optional[str]:
    """A token text of `bounds[0]` to `bounds[1]` characters, or null for none."""
    low, high = bounds
    if value is not None and (not isinstance(value, str) or not low <= len(value) <= high):
        raise ElmoFileError(
            f"{source}: '{where}' must be a string of {low} to {high} characters or null, got "
            f"{value!r:.80}"
        )
    return value


def _one_of(value: Any, where: str, choices: Tuple[str, ...], source: str) -> str:
    if value not in choices:
        raise ElmoFileError(
            f"{source}: unsupported '{where}' {value!r}; supported: {', '.join(choices)}"
        )
    return value


def _filters(
    value: Any, where: str, bounds: Tuple[int, int], source: str
) -> Tuple[Tuple[int, int], ...]:
    """1 to MAX_FILTERS [width, count] pairs, each number an int within `bounds`."""
    if (
        not isinstance(value, (list, tuple))
        or not 0 < len(value) <= MAX_FILTERS
        or not all(isinstance(f, (list, tuple)) and len(f) == 2 for f in value)
    ):
        raise ElmoFileError(
            f"{source}: '{where}' must be a list of 1 to {MAX_FILTERS} "
            f"[width, count] pairs, got {value!r}"
        )
    return tuple(
        (
            _integer(width, f"{where} width", bounds, source),
            _integer(count, f"{where} count", bounds, source),
        )
        for width, count in value
    )


class Option(NamedTuple):
    """One setting of a bilm-tf options dict, read into the `BiLMOptions` field `name`."""

    name: str
    path: str  # dotted: "char_cnn.embedding.dim"
    check: Callable[[Any, str, Any, str], Any]  # (value, path, bounds, source) -> value
    bounds: Any = ()  # (low, high), or the choices of `_one_of`
    default: Any = REQUIRED  # what an absent key means (not checked)


# The options with fixed bounds. `from_dict` checks, in this order (so that a file with several
# problems always gets the same message): CHARACTER_OPTIONS, the filter widths against
# max_characters_per_token, the character table (`_character_table`: sizes that depend on each
# other), NETWORK_OPTIONS, the parameter count.
CHARACTER_OPTIONS = (
    Option(
        "max_characters_per_token",
        "char_cnn.max_characters_per_token",
        _integer,
        (3, MAX_CHARACTERS_PER_TOKEN),
        50,
    ),
    Option("filters", "char_cnn.filters", _filters, (1, MAX_DIM)),
)
NETWORK_OPTIONS = (
    Option("activation", "char_cnn.activation", _one_of, ACTIVATIONS, "relu"),
    Option("cell_clip", "lstm.cell_clip", _clip, (FLOAT32_TINY, FLOAT32_MAX), float("inf")),
    Option("proj_clip", "lstm.proj_clip", _clip, (FLOAT32_TINY, FLOAT32_MAX), float("inf")),
    Option("forget_bias", "lstm.forget_bias", _number, (-MAX_FORGET_BIAS, MAX_FORGET_BIAS), 1.0),
    Option("char_dim", "char_cnn.embedding.dim", _integer, (1, MAX_DIM)),
    Option("n_highway", "char_cnn.n_highway", _integer, (0, MAX_LAYERS), 0),
    Option("projection_dim", "lstm.projection_dim", _integer, (1, MAX_DIM)),
    Option("lstm_dim", "lstm.dim", _integer, (1, MAX_DIM)),
    Option("n_layers", "lstm.n_layers", _integer, (1, MAX_LAYERS)),
    Option("use_skip_connections", "lstm.use_skip_connections", _boolean, (), False),
    Option("lowercase", "char_cnn.lowercase", _boolean, (), False),
    # the text the model was trained on wrote unknown words so (none: null); a tokenizer keeps it
    Option("unk_token", "unk_token", _token, (1, MAX_UNK_CHARACTERS), UNK_TOKEN),
)


def _not_an_object(where: str, value: Any, source: str) -> ElmoFileError:
    return ElmoFileError(f"{source}: '{where}' must be a JSON object, got {type(value).__name__}")


def _check_sections(opts: Any, source: str) -> None:
    """The top level: an object with `char_cnn` and `lstm` objects, bidirectional."""
    if not isinstance(opts, dict):
        raise ElmoFileError(f"{source}: expected a JSON object, got {type(opts).__name__}")
    if "char_cnn" not in opts:
        raise ElmoFileError(
            f"{source}: no 'char_cnn' section. Only character-input biLMs are supported "
            "(models with a word-embedding input layer are not)."
        )
    if "lstm" not in opts:
        raise ElmoFileError(f"{source}: no 'lstm' section")
    for name in ("char_cnn", "lstm"):
        if not isinstance(opts[name], dict):
            raise _not_an_object(name, opts[name], source)
    if opts.get("bidirectional", True) is not True:
        raise ElmoFileError(
            f"{source}: 'bidirectional' must be true; unidirectional LMs are not supported"
        )


def _read_options(
    opts: Dict[str, Any], table: Tuple[Option, ...], source: str, keys: Mapping[str, str]
) -> Dict[str, Any]:
    """{name: value} for the options of `table`, read and checked in its order."""
    return {option.name: _read_option(opts, option, source, keys) for option in table}


def _read_option(opts: Dict[str, Any], option: Option, source: str, keys: Mapping[str, str]) -> Any:
    """The checked value at `option.path`, or its default where the last key is absent; messages
    name a key as `keys` does where it names it."""
    *sections, key = option.path.split(".")
    node = opts
    for depth, name in enumerate(sections, 1):
        where = ".".join(sections[:depth])
        if name not in node:
            raise ElmoFileError(f"{source}: missing '{keys.get(where, where)}'")
        node = node[name]
        if not isinstance(node, dict):
            raise _not_an_object(keys.get(where, where), node, source)
    where = keys.get(option.path, option.path)
    if key in node:
        return option.check(node[key], where, option.bounds, source)
    if option.default is REQUIRED:
        raise ElmoFileError(f"{source}: missing '{where}'")
    return option.default


def _character_table(cnn: Dict[str, Any], source: str, keys: Mapping[str, str]) -> Dict[str, Any]:
    """`char_table`, `n_characters`, `word_dim` and `n_words`: a table's sizes, or the 262 byte ids
    and no words."""
    char_table = _boolean(cnn.get("char_table", False), "char_cnn.char_table", (), source)
    if not char_table:
        n_chars = _integer(
            cnn.get("n_characters", 262), "char_cnn.n_characters", (261, 262), source
        )
        if cnn.get("word_dim", 0) or cnn.get("n_words", 0):
            raise ElmoFileError(
                f"{source}: 'char_cnn.word_dim' needs 'char_cnn.char_table' (a word table)"
            )
        return {"char_table": False, "n_characters": n_chars, "word_dim": 0, "n_words": 0}
    if "n_characters" not in cnn:
        raise ElmoFileError(f"{source}: missing 'char_cnn.n_characters'")
    chars = (len(CHAR_SPECIALS) + 1, MAX_TABLE_ROWS)
    n_chars = _integer(cnn["n_characters"], "char_cnn.n_characters", chars, source)
    word_key = keys.get("char_cnn.word_dim", "char_cnn.word_dim")
    word_dim = _integer(cnn.get("word_dim", 0), word_key, (0, MAX_DIM), source)
    words = (len(WORD_SPECIALS) + 1, MAX_TABLE_ROWS) if word_dim else (0, 0)
    n_words = _integer(cnn.get("n_words", 0), "char_cnn.n_words", words, source)
    return {"char_table": True, "n_characters": n_chars, "word_dim": word_dim, "n_words": n_words}


@dataclass(frozen=True)
class BiLMOptions:
    """Every size and clip of a biLM. Nothing is assumed: all of it comes from the options."""

    char_dim: int
    filters: Tuple[Tuple[int, int], ...]
    n_highway: int
    projection_dim: int
    lstm_dim: int
    n_layers: int
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    use_skip_connections: bool = True
    # added to the forget gate at run time: bilm-tf's, not stored (0: stored in the bias)
    forget_bias: float = 1.0
    activation: str = "relu"
    max_characters_per_token: int = 50
    n_characters: int = 262
    # ELMoForManyLangs: characters through a table saved with the model (`CharTable`), whose rows
    # `n_characters` counts (row 0: no token), and a word embedding of `word_dim` (0: none) and
    # `n_words` rows concatenated before the character features.
    char_table: bool = False
    word_dim: int = 0
    n_words: int = 0
    # this project's: the biLM was trained on lowercased text and reads each token lowercased
    # (`<S>` and `</S>` as written); bilm-tf and AllenNLP know no such option
    lowercase: bool = False
    # this project's: the word that stood for unknown words in the text the biLM was trained on
    # (`pretrain`'s `corpus.unk_token`; None: none), which a tokenizer keeps whole for it
    unk_token: Optional[str] = UNK_TOKEN
    extra: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every ELMo layer: forward and backward concatenated, 2 * projection_dim."""
        return 2 * self.projection_dim

    @property
    def n_parameters(self) -> int:
        """Parameters of the biLM these options describe, counted without building it."""
        E, F, P, D = self.char_dim, self.n_filters, self.projection_dim, self.lstm_dim
        chars = (self.n_characters if self.char_table else 262) * E + self.n_words * self.word_dim
        encoder = (
            chars
            + sum(w * E * n + n for w, n in self.filters)
            + self.n_highway * 2 * (F * F + F)
            + (self.word_dim + F) * P
            + P
        )
        return encoder + self.n_layers * 2 * (2 * P * 4 * D + 4 * D + D * P)

    @classmethod
    def from_dict(
        cls, opts: Dict[str, Any], source: str = "options", keys: Optional[Mapping[str, str]] = None
    ) -> "BiLMOptions":
        """Validate a bilm-tf options dict against the option tables: types (ints and bools are
        never coerced) and sizes (bounded, so that nothing huge is allocated from a mistyped or
        hostile file). Raises ElmoFileError naming `source` and the key, as `keys` names it where
        `opts` was translated from another layout (`{"lstm.dim": "encoder.dim"}`)."""
        keys = keys or {}
        _check_sections(opts, source)
        values = _read_options(opts, CHARACTER_OPTIONS, source, keys)
        max_chars = values["max_characters_per_token"]
        if max(width for width, _ in values["filters"]) > max_chars:
            raise ElmoFileError(
                f"{source}: a filter is wider than max_characters_per_token={max_chars}"
            )
        values.update(_character_table(opts["char_cnn"], source, keys))
        values.update(_read_options(opts, NETWORK_OPTIONS, source, keys))
        if values["lowercase"] and values["char_table"]:
            raise ElmoFileError(
                f"{source}: 'char_cnn.lowercase' is for models that read utf-8 bytes; a model "
                "with a character table (ELMoForManyLangs) reads its tokens as written"
            )
        own = ("lstm", "char_cnn", "unk_token")
        extra = {key: value for key, value in opts.items() if key not in own}
        options = cls(**values, extra=extra)
        if options.n_parameters > MAX_PARAMETERS:
            sizes = ("lstm.dim", "lstm.projection_dim", "char_cnn.filters", "char_cnn.n_highway")
            *first, last = (f"'{keys.get(key, key)}'" for key in sizes)
            raise ElmoFileError(
                f"{source}: these sizes make {options.n_parameters:,} parameters, more than the "
                f"{MAX_PARAMETERS:,} this package loads (check {', '.join(first)} and {last})"
            )
        return options

    @classmethod
    def from_file(cls, path: Path) -> "BiLMOptions":
        """Deprecated: `spacy_elmo.weights.read_options` (the core reads no files; imported only
        when asked for)."""
        warnings.warn(
            "BiLMOptions.from_file is deprecated; use spacy_elmo.weights.read_options",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("spacy_elmo.weights").read_options(path)

    def to_dict(self) -> Dict[str, Any]:
        """The bilm-tf options layout (what `from_dict` reads back)."""
        lstm: Dict[str, Any] = {
            "dim": self.lstm_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "use_skip_connections": self.use_skip_connections,
        }
        for key in ("cell_clip", "proj_clip"):
            value = getattr(self, key)
            if value != float("inf"):
                lstm[key] = int(value) if float(value).is_integer() else value
        if self.forget_bias != 1.0:
            lstm["forget_bias"] = self.forget_bias
        out: Dict[str, Any] = dict(self.extra)
        out["lstm"] = lstm
        out["char_cnn"] = {
            "activation": self.activation,
            "filters": [list(f) for f in self.filters],
            "n_highway": self.n_highway,
            "embedding": {"dim": self.char_dim},
            "n_characters": self.n_characters,
            "max_characters_per_token": self.max_characters_per_token,
        }
        if self.char_table:
            out["char_cnn"].update(char_table=True, word_dim=self.word_dim, n_words=self.n_words)
        if self.lowercase:
            out["char_cnn"]["lowercase"] = True
        if self.unk_token != UNK_TOKEN:
            out["unk_token"] = self.unk_token
        return out

    def sizes(self) -> Dict[str, Any]:
        """A flat, JSON-friendly summary (for configs and `info`)."""
        d = asdict(self)
        d.pop("extra")
        if not self.char_table:
            for key in ("char_table", "word_dim", "n_words"):
                d.pop(key)
        if self.forget_bias == 1.0:
            d.pop("forget_bias")
        if not self.lowercase:  # as before the option existed: the fingerprints of models stay
            d.pop("lowercase")
        if self.unk_token == UNK_TOKEN:  # likewise
            d.pop("unk_token")
        d["filters"] = [list(f) for f in self.filters]
        return d
