"""The pretraining config: a thinc / spaCy-style `.cfg`, the built-in default, overrides, checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Collection, Dict, NamedTuple, Optional, Tuple, Union

from thinc.api import Config

from ..bilm import BiLMOptions, StatePolicy
from ..bilm.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS
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
        detail = " ".join(str(err).split())  # confection's messages span lines
        raise ElmoFileError(
            f"{path}: cannot read the config ({type(err).__name__}: {detail})"
        ) from None
    check_config(config)
    return config


def default_vocab_size() -> int:
    """`vocab.size` of the built-in config: a default that a smaller corpus shrinks (with a
    warning)."""
    return Config().from_disk(DEFAULT_CONFIG_PATH)["vocab"]["size"]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _seed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED


def _increasing_positive_ints(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(_positive_int(v) for v in value)
        and all(a < b for a, b in zip(value, value[1:]))
    )


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and 0 <= value < 1


def _paths(value: Any) -> bool:
    return (isinstance(value, str) and value != "") or (
        isinstance(value, (list, tuple)) and len(value) > 0 and all(_paths(v) for v in value)
    )


class Rule(NamedTuple):
    """What a setting must be: a test of its value, and its words in the error message."""

    test: Callable[[Any], bool]
    what: str


def _one_of(choices: Tuple[str, ...]) -> Rule:
    return Rule(lambda value: value in choices, f"one of {choices}")


def _or_null(rule: Rule) -> Rule:
    return Rule(lambda value: value is None or rule.test(value), f"{rule.what} or null")


def _positive_int_at_most(most: int) -> Rule:
    return Rule(
        lambda value: _positive_int(value) and value <= most,
        f"a positive integer, at most {most:,}",
    )


def _corpus(flag: str) -> Rule:
    return Rule(
        lambda value: value is None or _paths(value),
        f"a path or a non-empty list of paths (as --{flag} gives), or null",
    )


POSITIVE_INT = Rule(_positive_int, "a positive integer")
POSITIVE_NUMBER = Rule(_positive_number, "a positive number")
BOOLEAN = Rule(lambda value: isinstance(value, bool), "true or false")
# (setting, rule), checked in this order by `check_config`: BUILD_SETTINGS (what a run builds and
# reads), then `training.state_policy`, then LOOP_SETTINGS (the numbers of the training loop).
BUILD_SETTINGS = (
    ("corpus.train", _corpus("train")),
    ("corpus.dev", _corpus("dev")),
    ("corpus.tokenizer", _one_of(TOKENIZERS)),
    ("corpus.lowercase", BOOLEAN),
    (
        "corpus.unk_token",
        _or_null(
            Rule(
                lambda value: isinstance(value, str) and value not in (BOS_TOKEN, EOS_TOKEN),
                f"a string other than {BOS_TOKEN} and {EOS_TOKEN} (the sentence boundaries)",
            )
        ),
    ),
    ("corpus.max_sentence_length", POSITIVE_INT),
    ("vocab.size", _or_null(POSITIVE_INT)),
    ("softmax.type", _one_of(SOFTMAX_TYPES)),
    ("softmax.n_samples", POSITIVE_INT),
    (
        "softmax.adaptive_cutoffs",
        Rule(_increasing_positive_ints, "a list of increasing positive integers"),
    ),
    ("training.scheme", _one_of(SCHEMES)),
    ("training.optimizer", _one_of(OPTIMIZERS)),
    ("training.precision", _one_of(TRAINING_PRECISIONS)),
)
LOOP_SETTINGS = (
    ("training.seed", Rule(_seed, f"an integer from 0 to {MAX_SEED}")),
    ("training.checkpoint_every", POSITIVE_INT),
    *((f"training.{key}", _positive_int_at_most(most)) for key, most in MAX_BATCH.items()),
    ("training.max_steps", _or_null(POSITIVE_INT)),
    ("training.max_epochs", _or_null(POSITIVE_INT)),
    ("training.eval_every", _or_null(POSITIVE_INT)),
    ("training.max_minutes", _or_null(POSITIVE_NUMBER)),
    ("training.eval_every_minutes", _or_null(POSITIVE_NUMBER)),
    ("training.learning_rate", POSITIVE_NUMBER),
    ("training.grad_clip", POSITIVE_NUMBER),
    ("training.dropout", Rule(_fraction, "in [0, 1)")),
    ("training.export_hdf5", BOOLEAN),
)
# Settings added after the first configs were written, and what their absence means.
ADDED_SETTINGS = {"training.precision": "float32"}


def _setting(config: Config, key: str) -> Any:
    """The value of the dotted setting `key` ("training.seed"): KeyError where it is absent."""
    section, _, name = key.partition(".")
    if key in ADDED_SETTINGS:
        return config[section].get(name, ADDED_SETTINGS[key])
    return config[section][name]


def _check_settings(config: Config, table: Tuple[Tuple[str, Rule], ...]) -> None:
    for key, rule in table:
        value = _setting(config, key)
        if not rule.test(value):
            raise ElmoConfigError(f"config '{key}' must be {rule.what}, got {value!r}")


def check_config(config: Config) -> None:
    """Check every value the training loop reads; raise `ElmoConfigError` naming the setting."""
    for section in ("corpus", "vocab", "model", "softmax", "training"):
        if section not in config:
            raise ElmoConfigError(f"config has no [{section}] section")
    _check_settings(config, BUILD_SETTINGS)
    try:
        model_policy(config)
    except ElmoConfigError as err:
        raise ElmoConfigError(f"config 'training.state_policy': {err}, or auto") from None
    _check_settings(config, LOOP_SETTINGS)
    check_export(config)
    t = config["training"]
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


def check_export(config: Config, origin: str = "") -> None:
    """ElmoConfigError where `training.export_hdf5` asks for the bilm-tf layout of a model that it
    cannot hold: one read with another state policy than warm, or that lowercases its tokens
    (`origin`: where `corpus.lowercase` came from, for the message)."""
    t = config["training"]
    if not t["export_hdf5"]:
        return
    policy = model_policy(config)
    if not policy.warm_start:
        problem = (
            f"reads with the state policy '{policy}' (training.scheme '{t['scheme']}', "
            f"training.state_policy '{t['state_policy']}'), which the bilm-tf hdf5 layout cannot "
            "record (it loads as 'warm': other outputs)"
        )
    elif config["corpus"]["lowercase"]:
        problem = (
            f"reads each token lowercased (corpus.lowercase = true{origin}), which bilm-tf and "
            "AllenNLP ignore: they would feed it cased text"
        )
    else:
        return
    raise ElmoConfigError(
        f"config 'training.export_hdf5': this run's model {problem}; keep the model in this "
        "project's format (OUTPUT_DIR/model): drop --export-hdf5"
    )


def bilm_options(config: Config) -> BiLMOptions:
    """The `[model]` section as `BiLMOptions` (bilm-tf layout), reading its tokens lowercased
    where `corpus.lowercase` says, and recording `corpus.unk_token` (the text it is trained on;
    "" writes no unknown word, as null)."""
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
                    "max_characters_per_token": MAX_CHARS,
                    "lowercase": config["corpus"]["lowercase"],
                },
                "unk_token": config["corpus"]["unk_token"] or None,
            },
            source="config [model]",
            keys={"unk_token": "corpus.unk_token"},
        )
    except (ElmoFileError, KeyError) as err:
        raise ElmoConfigError(str(err)) from None


def training_precision(config: Config) -> str:
    """`training.precision` (float32 in configs written before it existed)."""
    return _setting(config, "training.precision")


def model_policy(config: Config) -> StatePolicy:
    """The state policy for dev perplexity and the saved model (ElmoConfigError:
    `training.state_policy` names none)."""
    policy = config["training"]["state_policy"]
    return (
        DEFAULT_POLICY[config["training"]["scheme"]]
        if policy == "auto"
        else StatePolicy.parse(policy)
    )


def model_section(options: BiLMOptions) -> Dict[str, Any]:
    """`options` as the config's `[model]` section (the inverse of `bilm_options`; null: no
    clip)."""
    return {
        "char_dim": options.char_dim,
        "filters": [list(f) for f in options.filters],
        "n_highway": options.n_highway,
        "activation": options.activation,
        "projection_dim": options.projection_dim,
        "lstm_dim": options.lstm_dim,
        "n_layers": options.n_layers,
        "cell_clip": None if options.cell_clip == float("inf") else options.cell_clip,
        "proj_clip": None if options.proj_clip == float("inf") else options.proj_clip,
        "use_skip_connections": options.use_skip_connections,
    }


def with_model_of(
    config: Config, options: BiLMOptions, given: Collection[str], source: str
) -> Config:
    """`config` with its `[model]` section the sizes of `options`, a biLM that a run continues
    (`source` says which, for messages). A setting in `given` (dotted names: the command line's)
    or not the built-in default is the user's: one that differs is an ElmoConfigError.
    `corpus.lowercase` and `corpus.unk_token` are the model's unless the user set them: a model
    trained on text of the other case reads that case, and its unknown word stays one token."""
    defaults = Config().from_disk(DEFAULT_CONFIG_PATH)
    model, default = model_section(options), defaults["model"]
    for key, value in config["model"].items():
        if key not in model or value == model[key]:
            continue
        if f"model.{key}" in given or value != default.get(key):
            raise ElmoConfigError(
                f"{source}: model.{key} = {value!r} is not the model's ({model[key]!r}); its "
                f"sizes are kept: leave model.{key} out or set it to {model[key]!r}"
            )
    config = config.copy()
    config["model"] = {**config["model"], **model}
    for key, own in (("lowercase", options.lowercase), ("unk_token", options.unk_token)):
        value = config["corpus"][key]
        user_set = f"corpus.{key}" in given or value != defaults["corpus"][key]
        if value != own and not user_set:
            config["corpus"] = {**config["corpus"], key: own}
            check_export(config, f", from {source}")
    return config
