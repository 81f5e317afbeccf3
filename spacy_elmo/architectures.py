"""Every spaCy architecture of spacy_elmo, by its registered name (`.v1` never changes once
released).

- `spacy_elmo.ElmoModel.v1`: the frozen biLM of the `elmo` component, token texts -> layers.
- `spacy_elmo.ElmoFeatures.v2` (and `.v1`, the same with dropout and l2 0 by default and n_layers
  and width required): a task's own mix of the layers that `elmo` stored on each Doc, `ELMo_k =
  gamma * sum_j softmax(s)_j h_kj` (Peters et al. 2018, sec. 3.3).
- `spacy_elmo.ElmoFeatures.v3`: `.v2` plus `layers`, the biLM layers to mix (null: all).
- `spacy_elmo.ElmoMultiHashEmbed.v1`: `[x_k; ELMo_k]`, `MultiHashEmbed` beside the features, reduced
  to `width`, as the `embed` of `spacy.Tok2Vec.v2` (ELMo at the task model's input).
- `spacy_elmo.ElmoAtOutput.v1`: `[h_k; ELMo_k]`, a task encoder's output beside features with their
  own mix (ELMo at the output). No gradient flows into the frozen biLM.

The layers themselves are in `layers/`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import numpy as np
from spacy.ml.models.tok2vec import MultiHashEmbed
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Linear, Maxout, Model, chain, concatenate, with_array
from thinc.layers.concatenate import forward as concatenate_forward
from thinc.layers.concatenate import init as concatenate_init
from thinc.types import Floats2d

from .bilm import BiLMOptions, Precision, StatePolicyName
from .errors import ElmoConfigError
from .extensions import install_extensions
from .layers import bilm_layer, elmo_mix, fixed_dropout


@registry.architectures("spacy_elmo.ElmoModel.v1")
def ElmoModel(
    options: Optional[Dict[str, Any]] = None,
    state: Optional[StatePolicyName] = "warm",
    batch_size: int = 64,
    token_cache_size: int = 50_000,
    precision: Precision = "float32",
) -> Model[List[List[str]], List[np.ndarray]]:
    """The frozen biLM: token texts -> float32 layers `(n_layers + 1, n_tokens, 2P)` per sequence.

    options: the biLM sizes in the bilm-tf options layout (`{"lstm": {...}, "char_cnn": {...}}`), or
        null to take them from the weights. state: the state policy ("warm", "zero", "carry"), or
        null for the weights' own ("warm" for bilm-tf weights, "zero" for ELMoForManyLangs models,
        the saved one for this project's format): the `elmo` component's config sets null; this
        function's own default, kept for configs written against it, is "warm".
    batch_size: a memory bound (the result moves within float32 rounding): a compute batch holds
        at most 8x this many sequences and 256x this many tokens, regrouped by length (see
        `spacy_elmo.bilm.check_batch_size`).
    token_cache_size: entries of the token-layer cache.
    precision: of the biLM's LSTM matrix products: "float32", "bfloat16" (where native), "int8"
        (x86 CPUs) or "auto" (see `spacy_elmo.bilm.precision`); outputs stay float32.
    """
    opts = (
        BiLMOptions.from_dict(dict(options), source="the options of spacy_elmo.ElmoModel.v1")
        if options
        else None
    )
    return bilm_layer(opts, state, batch_size, token_cache_size, precision)


@registry.architectures("spacy_elmo.ElmoFeatures.v1")
def ElmoFeatures(
    n_layers: Optional[int],
    width: Optional[int],
    dropout: float = 0.0,
    l2: float = 0.0,
    layer_norm: bool = False,
    projection: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A task's own mix of the Doc's ELMo layers: Docs -> `(n_tokens, projection or width)` per Doc
    (see `features`)."""
    return features(n_layers, width, dropout, l2, layer_norm, projection)


def check_features(dropout: float, projection: Optional[int]) -> None:
    """ElmoConfigError naming `dropout` unless it is a rate in [0, 1), or `projection` unless it is
    null or a positive width."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ElmoConfigError(
            f"ElmoFeatures: dropout must be a rate from 0 to below 1, got {dropout!r}"
        )
    if projection is not None and (
        isinstance(projection, bool) or not isinstance(projection, int) or projection < 1
    ):
        raise ElmoConfigError(
            "ElmoFeatures: projection must be a positive width, or null for none, got "
            f"{projection!r}"
        )


def features(
    n_layers: Optional[int],
    width: Optional[int],
    dropout: float,
    l2: float,
    layer_norm: bool,
    projection: Optional[int],
    layers: Optional[List[int]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A task's own mix of the Doc's ELMo layers: Docs -> `(n_tokens, projection or width)` per Doc.

    n_layers: the biLM's output layers (`n_layers + 1` of the biLM, 3 for the published models).
    width: their width, `2 * projection_dim` (256 small, 1024 original). Null (either): taken from
    the biLM at initialize; where set, initialize checks them against it. dropout: on the output in
    training, at this rate (`[training] dropout` does not replace it).
    l2: the penalty `l2 * ||s||^2` on the mix logits. layer_norm: normalise each layer per token
    (zero mean, unit variance) before mixing. projection: a learned linear map down to this width.
    layers (`.v3`): the biLM layers to mix, null for all.
    """
    check_features(dropout, projection)
    install_extensions()
    parts: List[Model] = [elmo_mix(n_layers, width, l2=l2, layer_norm=layer_norm, layers=layers)]
    if projection:
        parts.append(with_array(Linear(projection, width)))
    if dropout:  # at this rate, not `[training] dropout` (which spaCy gives `Dropout` layers)
        parts.append(fixed_dropout(dropout))
    model = chain(*parts) if len(parts) > 1 else parts[0]
    model.set_dim("nO", projection or width)
    return model


@registry.architectures("spacy_elmo.ElmoFeatures.v2")
def ElmoFeaturesRecommended(
    n_layers: Optional[int] = None,
    width: Optional[int] = None,
    dropout: float = 0.2,
    l2: float = 0.001,
    layer_norm: bool = False,
    projection: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """`ElmoFeatures.v1` with the recommended defaults, which `spacy init fill-config` writes: sizes
    from the biLM, dropout 0.2, l2 0.001. Docs -> `(n_tokens, projection or width)` per Doc."""
    return features(n_layers, width, dropout, l2, layer_norm, projection)


@registry.architectures("spacy_elmo.ElmoFeatures.v3")
def ElmoFeaturesLayers(
    n_layers: Optional[int] = None,
    width: Optional[int] = None,
    dropout: float = 0.2,
    l2: float = 0.001,
    layer_norm: bool = False,
    projection: Optional[int] = None,
    layers: Optional[List[int]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """`ElmoFeatures.v2` plus `layers`: the biLM layers to mix (0: the token layer; null: all). With
    one layer the mix is `gamma * h_j` exactly; `[0, 1]` mixes the token layer and the first LSTM
    layer only (Reimers and Gurevych 2019 found that often as good). Docs -> `(n_tokens, projection
    or width)` per Doc."""
    return features(n_layers, width, dropout, l2, layer_norm, projection, layers)


@registry.architectures("spacy_elmo.ElmoAtOutput.v1")
def ElmoAtOutput(
    tok2vec: Model[List[Doc], List[Floats2d]],
    elmo: Model[List[Doc], List[Floats2d]],
) -> Model[List[Doc], List[Floats2d]]:
    """ELMo at the task encoder's output (Peters et al. 2018, sec. 3.3): `[h_k; ELMo_k]`, the
    encoder's output `h_k` (`tok2vec`, which may itself read ELMo at its input) beside `elmo`, an
    `ElmoFeatures` with a mix of its own. Docs -> `(n_tokens, tok2vec width + elmo width)` per Doc,
    as the `tok2vec` of a tagger or NER."""
    widths = [tok2vec.maybe_get_dim("nO"), elmo.maybe_get_dim("nO")]
    # thinc's concatenate, built here: `concatenate()` would merge `elmo` into a `tok2vec` that is
    # one (an ElmoAtOutput), changing that model's width
    return Model(
        "elmo_at_output",
        concatenate_forward,
        init=concatenate_init,
        layers=[tok2vec, elmo],
        dims={"nO": None if None in widths else sum(widths)},
    )


@registry.architectures("spacy_elmo.ElmoMultiHashEmbed.v1")
def ElmoMultiHashEmbed(
    width: int,
    attrs: List[Union[str, int]],
    rows: List[int],
    include_static_vectors: bool,
    elmo: Model[List[Doc], List[Floats2d]],
) -> Model[List[Doc], List[Floats2d]]:
    """`[x_k; ELMo_k]` reduced to `width` by a Maxout: x_k from `spacy.MultiHashEmbed.v2` (same
    arguments), ELMo_k from `elmo` (an `ElmoFeatures`, `.v1` to `.v3`). Docs -> `(n_tokens,
    width)` per Doc, for `spacy.Tok2Vec.v2`."""
    hash_embed = MultiHashEmbed(
        width=width, attrs=attrs, rows=rows, include_static_vectors=include_static_vectors
    )
    elmo_width = elmo.maybe_get_dim("nO")
    n_in = None if elmo_width is None else width + elmo_width  # else inferred at initialize
    model = chain(
        concatenate(hash_embed, elmo), with_array(Maxout(width, n_in, nP=3, normalize=True))
    )
    model.set_dim("nO", width)
    return model
