"""The biLM core: torch and numpy only (no spaCy)."""
from .chars import batch_char_ids, word_char_ids, words_char_ids
from ..errors import ElmoFileError
from .inference import STATE_POLICIES, BiLMInference, StatePolicy, check_batch_size, check_state_policy
from .lstm import LSTMState
from .model import BiLM, BiLMOutput
from .options import BiLMConfigError, BiLMOptions
from .weights import WeightFileError, export_hdf5, load_bilm, save_bilm

__all__ = [
    "BiLM", "BiLMInference", "BiLMOutput", "BiLMOptions", "BiLMConfigError", "ElmoFileError", "LSTMState",
    "STATE_POLICIES", "StatePolicy", "WeightFileError", "batch_char_ids", "check_batch_size", "check_state_policy",
    "export_hdf5", "load_bilm", "save_bilm", "word_char_ids", "words_char_ids",
]
