"""Pretraining a biLM from raw text (`python -m spacy_elmo pretrain`): corpus, LM heads, training
loop."""

from .config import DEFAULT_CONFIG_PATH, load_config
from .heads import AdaptiveSoftmax, FullSoftmax, SampledSoftmax
from .lm import BiLanguageModel, dev_nll, perplexities
from .outputs import load_trained
from .train import Trainer, train
from .vocab import Vocab

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "AdaptiveSoftmax",
    "BiLanguageModel",
    "FullSoftmax",
    "SampledSoftmax",
    "Trainer",
    "Vocab",
    "dev_nll",
    "load_config",
    "load_trained",
    "perplexities",
    "train",
]


def __getattr__(name: str):
    """`PretrainError`, the old name of pretraining's errors, kept working with a
    DeprecationWarning: every error is now an `ElmoError` kind (config, file, resume)."""
    if name == "PretrainError":
        import warnings

        from ..errors import ElmoError

        warnings.warn(
            "spacy_elmo.pretrain.PretrainError is deprecated; catch spacy_elmo.ElmoError (or one "
            "of its kinds)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ElmoError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
