"""The biLM's sizes, read from and written to the bilm-tf / AllenNLP options JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..errors import ElmoFileError
from ..files import TEXT_ENCODING, read_regular
from .chars import CHAR_SPECIALS, WORD_SPECIALS
from .policy import STATE_POLICIES, StatePolicy, check_state_policy  # noqa: F401 (their old home)

ACTIVATIONS = ("relu", "tanh")
# Upper bounds on sizes read from files, checked before anything is allocated. The published models
# use dims up to 4096, 2 layers, 2 highways, 7 filters, 50 characters and 93.6M parameters.
MAX_DIM = 2**16
MAX_LAYERS = 64
MAX_FILTERS = 256
MAX_CHARACTERS_PER_TOKEN = 1024
MAX_TABLE_ROWS = (
    2**24
)  # rows of a character or word table (ELMoForManyLangs: thousands to a few 100,000)
MAX_PARAMETERS = 2**30
MAX_JSON_BYTES = 1 << 20  # options files are a few hundred bytes
# Float options are used in float32: clips from its smallest normal to its largest value, and a
# forget bias within +-100 (sigmoid saturates in float32 beyond +-17; the published models use 1).
FLOAT32_TINY, FLOAT32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
MAX_FORGET_BIAS = 100.0


def read_json(path: Path, what: str = "ELMo options file") -> Any:
    """A small JSON file (an options file or `bilm.json`): not a regular file, too large, not UTF-8
    or not JSON -> ElmoFileError."""
    data = read_regular(path, what, MAX_JSON_BYTES)
    try:
        return json.loads(data.decode(TEXT_ENCODING))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ElmoFileError(
            f"{path}: not a valid JSON options file ({type(err).__name__}: {err})"
        ) from None


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
    forget_bias: float = (
        1.0  # added to the forget gate at run time: bilm-tf's, not stored (0: stored in the bias)
    )
    activation: str = "relu"
    max_characters_per_token: int = 50
    n_characters: int = 262
    # ELMoForManyLangs: characters through a table saved with the model (`CharTable`), whose rows
    # `n_characters` counts (row 0: no token), and a word embedding of `word_dim` (0: none) and
    # `n_words` rows concatenated before the character features.
    char_table: bool = False
    word_dim: int = 0
    n_words: int = 0
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
    def from_dict(cls, opts: Dict[str, Any], source: str = "options") -> "BiLMOptions":
        """Validate a bilm-tf options dict: types (ints and bools are never coerced) and sizes
        (bounded, so that nothing huge is allocated from a mistyped or hostile file). Raises
        ElmoFileError naming `source` and the key."""
        if not isinstance(opts, dict):
            raise ElmoFileError(f"{source}: expected a JSON object, got {type(opts).__name__}")
        if "char_cnn" not in opts:
            raise ElmoFileError(
                f"{source}: no 'char_cnn' section. Only character-input biLMs are supported "
                "(models with a word-embedding input layer are not)."
            )
        if "lstm" not in opts:
            raise ElmoFileError(f"{source}: no 'lstm' section")

        def as_object(value: Any, where: str) -> Dict[str, Any]:
            if not isinstance(value, dict):
                raise ElmoFileError(
                    f"{source}: '{where}' must be a JSON object, got {type(value).__name__}"
                )
            return value

        cnn, lstm = as_object(opts["char_cnn"], "char_cnn"), as_object(opts["lstm"], "lstm")
        if opts.get("bidirectional", True) is not True:
            raise ElmoFileError(
                f"{source}: 'bidirectional' must be true; unidirectional LMs are not supported"
            )

        def need(section: Dict[str, Any], key: str, where: str) -> Any:
            if key not in section:
                raise ElmoFileError(f"{source}: missing '{where}.{key}'")
            return section[key]

        def integer(value: Any, where: str, low: int, high: int) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ElmoFileError(f"{source}: '{where}' must be an integer, got {value!r}")
            if not low <= value <= high:
                raise ElmoFileError(
                    f"{source}: '{where}' = {value!r} is out of range: "
                    f"it must be from {low} to {high}"
                )
            return value

        def boolean(value: Any, where: str) -> bool:
            if not isinstance(value, bool):
                raise ElmoFileError(f"{source}: '{where}' must be true or false, got {value!r}")
            return value

        max_chars = integer(
            cnn.get("max_characters_per_token", 50),
            "char_cnn.max_characters_per_token",
            3,
            MAX_CHARACTERS_PER_TOKEN,
        )
        raw_filters = need(cnn, "filters", "char_cnn")
        if (
            not isinstance(raw_filters, (list, tuple))
            or not 0 < len(raw_filters) <= MAX_FILTERS
            or not all(isinstance(f, (list, tuple)) and len(f) == 2 for f in raw_filters)
        ):
            raise ElmoFileError(
                f"{source}: 'char_cnn.filters' must be a list of 1 to {MAX_FILTERS} "
                f"[width, count] pairs, got {raw_filters!r}"
            )
        filters = tuple(
            (
                integer(w, "char_cnn.filters width", 1, MAX_DIM),
                integer(n, "char_cnn.filters count", 1, MAX_DIM),
            )
            for w, n in raw_filters
        )
        if max(w for w, _ in filters) > max_chars:
            raise ElmoFileError(
                f"{source}: a filter is wider than max_characters_per_token={max_chars}"
            )
        char_table = boolean(cnn.get("char_table", False), "char_cnn.char_table")
        if char_table:
            n_chars = integer(
                need(cnn, "n_characters", "char_cnn"),
                "char_cnn.n_characters",
                len(CHAR_SPECIALS) + 1,
                MAX_TABLE_ROWS,
            )
            word_dim = integer(cnn.get("word_dim", 0), "char_cnn.word_dim", 0, MAX_DIM)
            n_words = integer(
                cnn.get("n_words", 0),
                "char_cnn.n_words",
                len(WORD_SPECIALS) + 1 if word_dim else 0,
                MAX_TABLE_ROWS if word_dim else 0,
            )
        else:
            n_chars = integer(cnn.get("n_characters", 262), "char_cnn.n_characters", 261, 262)
            word_dim = n_words = 0
            if cnn.get("word_dim", 0) or cnn.get("n_words", 0):
                raise ElmoFileError(
                    f"{source}: 'char_cnn.word_dim' needs 'char_cnn.char_table' (a word table)"
                )
        activation = cnn.get("activation", "relu")
        if activation not in ACTIVATIONS:
            raise ElmoFileError(
                f"{source}: unsupported 'char_cnn.activation' {activation!r}; supported: "
                f"{', '.join(ACTIVATIONS)}"
            )

        def number(value: Any, where: str, low: float, high: float) -> float:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not low <= value <= high
            ):
                raise ElmoFileError(
                    f"{source}: '{where}' must be a number from {low:g} to {high:g}, got {value!r}"
                )
            return float(value)

        clips = {
            key: float("inf")
            if lstm.get(key) is None
            else number(lstm[key], f"lstm.{key}", FLOAT32_TINY, FLOAT32_MAX)
            for key in ("cell_clip", "proj_clip")
        }
        forget_bias = number(
            lstm.get("forget_bias", 1.0), "lstm.forget_bias", -MAX_FORGET_BIAS, MAX_FORGET_BIAS
        )
        embedding = as_object(need(cnn, "embedding", "char_cnn"), "char_cnn.embedding")
        known = {"lstm", "char_cnn"}
        options = cls(
            char_dim=integer(
                need(embedding, "dim", "char_cnn.embedding"), "char_cnn.embedding.dim", 1, MAX_DIM
            ),
            filters=filters,
            n_highway=integer(cnn.get("n_highway", 0), "char_cnn.n_highway", 0, MAX_LAYERS),
            projection_dim=integer(
                need(lstm, "projection_dim", "lstm"), "lstm.projection_dim", 1, MAX_DIM
            ),
            lstm_dim=integer(need(lstm, "dim", "lstm"), "lstm.dim", 1, MAX_DIM),
            n_layers=integer(need(lstm, "n_layers", "lstm"), "lstm.n_layers", 1, MAX_LAYERS),
            cell_clip=clips["cell_clip"],
            proj_clip=clips["proj_clip"],
            use_skip_connections=boolean(
                lstm.get("use_skip_connections", False), "lstm.use_skip_connections"
            ),
            forget_bias=float(forget_bias),
            activation=activation,
            max_characters_per_token=max_chars,
            n_characters=n_chars,
            char_table=char_table,
            word_dim=word_dim,
            n_words=n_words,
            extra={k: v for k, v in opts.items() if k not in known},
        )
        if options.n_parameters > MAX_PARAMETERS:
            raise ElmoFileError(
                f"{source}: these sizes make {options.n_parameters:,} parameters, more than the "
                f"{MAX_PARAMETERS:,} this package loads (check 'lstm.dim', 'lstm.projection_dim', "
                "'char_cnn.filters' and 'char_cnn.n_highway')"
            )
        return options

    @classmethod
    def from_file(cls, path: Path) -> "BiLMOptions":
        return cls.from_dict(read_json(Path(path)), source=str(path))

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
        d["filters"] = [list(f) for f in self.filters]
        return d
