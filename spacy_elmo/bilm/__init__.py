"""The biLM core: torch and numpy only (no spaCy)."""
import warnings

from ..errors import ElmoFileError
from .chars import ByteIds, CharTable, batch_char_ids, word_char_ids, words_char_ids
from .embedder import ElmoEmbedder, check_batch_size
from .hdf5_format import export_hdf5
from .load import load_bilm
from .locate import ModelFiles, locate
from .lstm import LSTMState
from .model import BiLM, BiLMOutput
from .options import STATE_POLICIES, BiLMOptions, StatePolicy, check_state_policy
from .own_format import bilm_from_state_dict, read_state_dict, save_bilm
from .precision import PRECISIONS, Precision, check_precision

__all__ = [
    "BiLM", "BiLMOutput", "BiLMOptions", "ByteIds", "CharTable", "ElmoEmbedder", "LSTMState", "ModelFiles",
    "PRECISIONS", "Precision", "STATE_POLICIES", "StatePolicy", "batch_char_ids", "bilm_from_state_dict",
    "check_batch_size", "check_precision", "check_state_policy", "export_hdf5", "load_bilm", "locate",
    "read_state_dict", "save_bilm", "word_char_ids", "words_char_ids",
]

_RENAMED = {"WeightFileError": "ElmoFileError", "BiLMConfigError": "ElmoFileError"}


def __getattr__(name: str):
    """Old names of the error types, kept working with a DeprecationWarning."""
    if name in _RENAMED:
        warnings.warn(f"spacy_elmo.bilm.{name} is deprecated; use spacy_elmo.{_RENAMED[name]}", DeprecationWarning,
                      stacklevel=2)
        return ElmoFileError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
