"""thinc layers: the frozen biLM that `elmo` runs (`bilm_model`), and the task's mix of its layers
(`mix`)."""

from .bilm_model import bilm_layer, frozen_bilm, get_embedder, load_weights
from .mix import MIX_NAME, Upstream, elmo_mix, feature_paths, learned_mix, set_sizes

__all__ = [
    "MIX_NAME",
    "Upstream",
    "bilm_layer",
    "elmo_mix",
    "feature_paths",
    "frozen_bilm",
    "get_embedder",
    "learned_mix",
    "load_weights",
    "set_sizes",
]
