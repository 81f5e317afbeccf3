"""The biLM core: the network and inference, torch and numpy only (no spaCy, no weight files: those
are `spacy_elmo.weights`, which imports this and is never imported here)."""

import importlib
import warnings

from ..errors import ElmoFileError
from .chars import ByteIds, CharTable, batch_char_ids, word_char_ids, words_char_ids
from .embedder import ElmoEmbedder
from .lstm import LSTMState
from .mix import average_layers, average_weights, mix_layers
from .model import BiLM, BiLMOutput
from .options import BiLMOptions
from .policy import STATE_POLICIES, StatePolicy, StatePolicyName, check_state_policy
from .precision import PRECISIONS, Precision, check_precision
from .runner import check_batch_size

__all__ = [
    "BiLM",
    "BiLMOutput",
    "BiLMOptions",
    "ByteIds",
    "CharTable",
    "ElmoEmbedder",
    "LSTMState",
    "PRECISIONS",
    "Precision",
    "STATE_POLICIES",
    "StatePolicy",
    "StatePolicyName",
    "average_layers",
    "average_weights",
    "batch_char_ids",
    "check_batch_size",
    "check_precision",
    "check_state_policy",
    "mix_layers",
    "word_char_ids",
    "words_char_ids",
]

_RENAMED = {"WeightFileError": "ElmoFileError", "BiLMConfigError": "ElmoFileError"}
# Names that moved to `spacy_elmo.weights` (the weight files), imported from there when asked for
# here.
_MOVED = (
    "ModelFiles",
    "bilm_from_state_dict",
    "export_hdf5",
    "load_bilm",
    "locate",
    "read_state_dict",
    "save_bilm",
)


def __getattr__(name: str):
    """Old names, kept working with a DeprecationWarning: the error types, and what moved to
    `spacy_elmo.weights` (imported only when asked for: the core never imports the weight files)."""
    if name in _RENAMED:
        warnings.warn(
            f"spacy_elmo.bilm.{name} is deprecated; use spacy_elmo.{_RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return ElmoFileError
    if name in _MOVED:
        warnings.warn(
            f"spacy_elmo.bilm.{name} is deprecated; use spacy_elmo.weights.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("spacy_elmo.weights"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
