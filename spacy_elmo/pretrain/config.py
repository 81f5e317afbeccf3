"""The pretraining config: a thinc / spaCy-style `.cfg`, the built-in default, overrides, checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Union

from thinc.api import Config

from ..bilm import BiLMOptions, StatePolicy
from ..errors import ElmoConfigError, ElmoFileError
from ..files import RECORD_BYTES, TEXT_ENCODING, read_regular

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.cfg")
SCHEMES = ("stream", "sentences")
SOFTMAX_TYPES = ("full", "sampled", "adaptive")
OPTIMIZERS = ("adagrad", "adam", "sgd")
TRAINING_PRECISIONS = ("float32", "bfloat16", "auto")
TOKENIZERS = ("spacy", "whitespace")
# Default state policy of a model, by training scheme: from bench/README.md's policy table
# (dev perplexity of models trained each way, under each inference policy).
DEFAULT_POLICY = {"sentences": StatePolicy.ZERO, "stream": StatePolicy.WARM}
MAX_SEED = 2**31 - 1  # numpy's seeds are below 2**32; the softmax's generator takes seed + 1 + rank
# Bounds on the sizes of one step, far above any run's (the published biLMs: 20-token windows, 128
# rows per GPU): past them a batch's arrays would not fit in memory.
MAX_BATCH = {"batch_tokens": 1 << 20, "window": 1 << 12, "eval_batch_size": 1 << 14}


def load_config(
    path: Optional[Union[str, Path]] = None, overrides: Optional[Dict[str, Any]] = None
) -> Config:
    """Read `path` (default: the built-in config), apply dotted `overrides`, interpolate and
    check."""
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    data = read_regular(path, "config file", RECORD_BYTES)
    overrides = dict(overrides or {})
    try:
        text = data.decode(TEXT_ENCODING)
        config = Config().from_str(text, interpolate=False)
        for key in overrides:
            section, _, name = key.rpartition(".")
            if not section or section not in config or name not in config[section]:
                raise ElmoConfigError(f"unknown config setting '{key}' (not in {path})")
        config = Config().from_str(text, overrides=overrides, interpolate=True)
    except ElmoConfigError:
        raise
    except Exception as err:  # confection raises several error types for bad files
        raise ElmoFileError(
            f"{path}: cannot read the config ({type(err).__name__}: {err})"
        ) from None
    check_config(config)
    return config


def default_vocab_size() -> int:
    """`vocab.size` of the built-in config: a default that a smaller corpus shrinks (with a
    warning)."""
    return Config().from_disk(DEFAULT_CONFIG_PATH)["vocab"]["size"]


def _need(ok: bool, key: str, what: str, value: Any) -> None:
    if not ok:
        raise ElmoConfigError(f"config '{key}' must be {what}, got {value!r}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def check_config(config: Config) -> None:
    """Check every value the training loop reads; raise `ElmoConfigError` naming the setting."""
    for section in ("corpus", "vocab", "model", "softmax", "training"):
        if section not in config:
            raise ElmoConfigError(f"config has no [{section}] section")
    c, v, s, t = config["corpus"], config["vocab"], config["softmax"], config["training"]
    _need(c["tokenizer"] in TOKENIZERS, "corpus.tokenizer", f"one of {TOKENIZERS}", c["tokenizer"])
    _need(
        _positive_int(c["max_sentence_length"]),
        "corpus.max_sentence_length",
        "a positive integer",
        c["max_sentence_length"],
    )
    _need(
        v["size"] is None or _positive_int(v["size"]),
        "vocab.size",
        "a positive integer or null",
        v["size"],
    )
    _need(s["type"] in SOFTMAX_TYPES, "softmax.type", f"one of {SOFTMAX_TYPES}", s["type"])
    _need(_positive_int(s["n_samples"]), "softmax.n_samples", "a positive integer", s["n_samples"])
    _need(t["scheme"] in SCHEMES, "training.scheme", f"one of {SCHEMES}", t["scheme"])
    _need(
        t["optimizer"] in OPTIMIZERS, "training.optimizer", f"one of {OPTIMIZERS}", t["optimizer"]
    )
    _need(
        training_precision(config) in TRAINING_PRECISIONS,
        "training.precision",
        f"one of {TRAINING_PRECISIONS}",
        training_precision(config),
    )
    try:
        model_policy(config)
    except ElmoConfigError as err:
        raise ElmoConfigError(f"config 'training.state_policy': {err}, or auto") from None
    _need(
        isinstance(t["seed"], int)
        and not isinstance(t["seed"], bool)
        and 0 <= t["seed"] <= MAX_SEED,
        "training.seed",
        f"an integer from 0 to {MAX_SEED}",
        t["seed"],
    )
    _need(
        _positive_int(t["checkpoint_every"]),
        "training.checkpoint_every",
        "a positive integer",
        t["checkpoint_every"],
    )
    for key, most in MAX_BATCH.items():
        _need(
            _positive_int(t[key]) and t[key] <= most,
            f"training.{key}",
            f"a positive integer, at most {most:,}",
            t[key],
        )
    for key in ("max_steps", "max_epochs", "eval_every"):
        _need(
            t[key] is None or _positive_int(t[key]),
            f"training.{key}",
            "a positive integer or null",
            t[key],
        )
    for key in ("max_minutes", "eval_every_minutes"):
        _need(
            t[key] is None or _positive_number(t[key]),
            f"training.{key}",
            "a positive number or null",
            t[key],
        )
    for key in ("learning_rate", "grad_clip"):
        _need(_positive_number(t[key]), f"training.{key}", "a positive number", t[key])
    _need(
        isinstance(t["dropout"], (int, float)) and 0 <= t["dropout"] < 1,
        "training.dropout",
        "in [0, 1)",
        t["dropout"],
    )
    if t["scheme"] == "stream" and t["batch_tokens"] < t["window"]:
        raise ElmoConfigError(
            f"training.batch_tokens ({t['batch_tokens']}) must be at least training.window "
            f"({t['window']}): the stream scheme packs batch_tokens // window rows"
        )
    if t["max_steps"] is None and t["max_epochs"] is None and t["max_minutes"] is None:
        raise ElmoConfigError(
            "set at least one of training.max_steps, training.max_epochs, training.max_minutes"
        )
    bilm_options(config)


def bilm_options(config: Config) -> BiLMOptions:
    """The `[model]` section as `BiLMOptions` (bilm-tf layout)."""
    m = config["model"]
    try:
        return BiLMOptions.from_dict(
            {
                "lstm": {
                    "dim": m["lstm_dim"],
                    "projection_dim": m["projection_dim"],
                    "n_layers": m["n_layers"],
                    "cell_clip": m["cell_clip"],
                    "proj_clip": m["proj_clip"],
                    "use_skip_connections": m["use_skip_connections"],
                },
                "char_cnn": {
                    "embedding": {"dim": m["char_dim"]},
                    "filters": m["filters"],
                    "n_highway": m["n_highway"],
                    "activation": m["activation"],
                    "n_characters": 262,
                    "max_characters_per_token": 50,
                },
            },
            source="config [model]",
        )
    except (ElmoFileError, KeyError) as err:
        raise ElmoConfigError(str(err)) from None


def training_precision(config: Config) -> str:
    """`training.precision` (float32 in configs written before it existed)."""
    return config["training"].get("precision", "float32")


def model_policy(config: Config) -> StatePolicy:
    """The state policy for dev perplexity and the saved model (ElmoConfigError:
    `training.state_policy` names none)."""
    policy = config["training"]["state_policy"]
    return (
        DEFAULT_POLICY[config["training"]["scheme"]]
        if policy == "auto"
        else StatePolicy.parse(policy)
    )
