"""The biLM's sizes, read from and written to the bilm-tf / AllenNLP options JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Tuple

from .errors import ElmoFileError

ACTIVATIONS = ("relu", "tanh")


class BiLMConfigError(ElmoFileError):
    """An options file or dict that this package cannot build a biLM from."""


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
    activation: str = "relu"
    max_characters_per_token: int = 50
    n_characters: int = 262
    extra: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every ELMo layer: forward and backward concatenated, 2 * projection_dim."""
        return 2 * self.projection_dim

    @classmethod
    def from_dict(cls, opts: Dict[str, Any], source: str = "options") -> "BiLMOptions":
        """Validate a bilm-tf options dict. Raises BiLMConfigError naming `source` and the key."""
        if not isinstance(opts, dict):
            raise BiLMConfigError(f"{source}: expected a JSON object, got {type(opts).__name__}")
        if "char_cnn" not in opts:
            raise BiLMConfigError(
                f"{source}: no 'char_cnn' section. Only character-input biLMs are supported "
                "(models with a word-embedding input layer are not)."
            )
        if "lstm" not in opts:
            raise BiLMConfigError(f"{source}: no 'lstm' section")
        cnn, lstm = opts["char_cnn"], opts["lstm"]
        if opts.get("bidirectional", True) is not True:
            raise BiLMConfigError(f"{source}: 'bidirectional' must be true; unidirectional LMs are not supported")

        def need(section: Dict[str, Any], key: str, where: str) -> Any:
            if key not in section:
                raise BiLMConfigError(f"{source}: missing '{where}.{key}'")
            return section[key]

        def positive_int(value: Any, where: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BiLMConfigError(f"{source}: '{where}' must be a positive integer, got {value!r}")
            return value

        try:
            filters = tuple((int(w), int(n)) for w, n in need(cnn, "filters", "char_cnn"))
        except (TypeError, ValueError):
            raise BiLMConfigError(f"{source}: 'char_cnn.filters' must be a list of [width, count] pairs")
        if not filters or any(w <= 0 or n <= 0 for w, n in filters):
            raise BiLMConfigError(f"{source}: 'char_cnn.filters' must be non-empty with positive sizes, got {filters}")
        max_chars = positive_int(cnn.get("max_characters_per_token", 50), "char_cnn.max_characters_per_token")
        if max_chars < 3:
            raise BiLMConfigError(f"{source}: 'char_cnn.max_characters_per_token' must be at least 3")
        if max(w for w, _ in filters) > max_chars:
            raise BiLMConfigError(f"{source}: a filter is wider than max_characters_per_token={max_chars}")
        n_chars = cnn.get("n_characters", 262)
        if n_chars not in (261, 262):
            raise BiLMConfigError(
                f"{source}: 'char_cnn.n_characters' must be 261 or 262 (the byte vocabulary), got {n_chars!r}"
            )
        activation = cnn.get("activation", "relu")
        if activation not in ACTIVATIONS:
            raise BiLMConfigError(
                f"{source}: unsupported 'char_cnn.activation' {activation!r}; supported: {', '.join(ACTIVATIONS)}"
            )
        n_highway = cnn.get("n_highway", 0)
        if isinstance(n_highway, bool) or not isinstance(n_highway, int) or n_highway < 0:
            raise BiLMConfigError(f"{source}: 'char_cnn.n_highway' must be a non-negative integer")
        clips = {}
        for key in ("cell_clip", "proj_clip"):
            value = lstm.get(key)
            if value is None:
                clips[key] = float("inf")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                clips[key] = float(value)
            else:
                raise BiLMConfigError(f"{source}: 'lstm.{key}' must be a positive number, got {value!r}")
        known = {"lstm", "char_cnn"}
        return cls(
            char_dim=positive_int(need(need(cnn, "embedding", "char_cnn"), "dim", "char_cnn.embedding"),
                                  "char_cnn.embedding.dim"),
            filters=filters,
            n_highway=n_highway,
            projection_dim=positive_int(need(lstm, "projection_dim", "lstm"), "lstm.projection_dim"),
            lstm_dim=positive_int(need(lstm, "dim", "lstm"), "lstm.dim"),
            n_layers=positive_int(need(lstm, "n_layers", "lstm"), "lstm.n_layers"),
            cell_clip=clips["cell_clip"],
            proj_clip=clips["proj_clip"],
            use_skip_connections=bool(lstm.get("use_skip_connections", False)),
            activation=activation,
            max_characters_per_token=max_chars,
            n_characters=n_chars,
            extra={k: v for k, v in opts.items() if k not in known},
        )

    @classmethod
    def from_file(cls, path: Path) -> "BiLMOptions":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"ELMo options file not found: {path}")
        try:
            opts = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BiLMConfigError(f"{path}: not a valid JSON options file ({err})") from None
        return cls.from_dict(opts, source=str(path))

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
        return out

    def sizes(self) -> Dict[str, Any]:
        """A flat, JSON-friendly summary (for configs and `info`)."""
        d = asdict(self)
        d.pop("extra")
        d["filters"] = [list(f) for f in self.filters]
        return d
