"""The biLM core: torch and numpy only (no spaCy)."""
from .chars import batch_char_ids, word_char_ids, words_char_ids
from .errors import ElmoFileError
from .lstm import LSTMState
from .model import STATE_POLICIES, BiLM, BiLMOutput
from .options import BiLMConfigError, BiLMOptions
from .weights import WeightFileError, export_hdf5, load_bilm, save_bilm

__all__ = [
    "BiLM", "BiLMOutput", "BiLMOptions", "BiLMConfigError", "ElmoFileError", "LSTMState", "STATE_POLICIES", "WeightFileError",
    "batch_char_ids", "export_hdf5", "load_bilm", "save_bilm", "word_char_ids", "words_char_ids",
]
