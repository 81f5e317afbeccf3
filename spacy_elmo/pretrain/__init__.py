"""Pretraining a biLM from raw text (`python -m spacy_elmo pretrain`): corpus, LM heads, training loop."""
from .config import DEFAULT_CONFIG_PATH, PretrainError, load_config
from .corpus import Vocab
from .heads import AdaptiveSoftmax, FullSoftmax, SampledSoftmax
from .lm import BiLanguageModel, dev_nll, perplexities
from .outputs import load_trained
from .train import Trainer, train

__all__ = ["DEFAULT_CONFIG_PATH", "AdaptiveSoftmax", "BiLanguageModel", "FullSoftmax", "PretrainError",
           "SampledSoftmax", "Trainer", "Vocab", "dev_nll", "load_config", "load_trained", "perplexities", "train"]
