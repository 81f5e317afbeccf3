"""thinc layers: the frozen biLM that `elmo` runs (`bilm_model`), the task's mix of its layers
(`mix`), and dropout at its configured rate (`dropout`)."""

from .bilm_model import bilm_layer, frozen_bilm, get_embedder, load_weights
from .dropout import fixed_dropout
from .mix import (
    MIX_NAME,
    Upstream,
    check_encoder_width,
    elmo_mix,
    feature_paths,
    learned_mix,
    set_sizes,
)

__all__ = [
    "MIX_NAME",
    "Upstream",
    "bilm_layer",
    "check_encoder_width",
    "elmo_mix",
    "feature_paths",
    "fixed_dropout",
    "frozen_bilm",
    "get_embedder",
    "learned_mix",
    "load_weights",
    "set_sizes",
]
