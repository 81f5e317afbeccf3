"""The `elmo` component's settings, checked: its config values, its `weights`, the training wiring
around it (sentence setters, components that read ELMo) and what training means for it, and the
fixed mix of `doc._.elmo`."""

from __future__ import annotations

import warnings
import weakref
from typing import List, Optional, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import Tok2Vec
from spacy.pipeline.tok2vec import Tok2VecListener
from thinc.api import Model

from .bilm.mix import average_weights
from .doc_data import STORE_DTYPES
from .errors import ElmoConfigError, ElmoUnusedWarning
from .layers import MIX_NAME

SENT_ASSIGNS = ("token.is_sent_start", "doc.sents")
# The fixed mix weighs layers whose values are of order 1 to 100 (weights of order 1): a bound far
# beyond any sensible weight, which keeps the sums far inside float32's range (NaN and inf weights
# are refused).
MAX_MIX_WEIGHT = 1e4


def check_settings(
    store: str,
    mix: Union[str, List[float]],
    max_length: int,
    cache_mb: float,
    keep_layers: bool = True,
    save_layers: bool = False,
) -> None:
    """ElmoConfigError naming the first of the component's settings that is out of its range."""
    if save_layers and not keep_layers:
        raise ElmoConfigError(
            "elmo: save_layers needs keep_layers: a Doc that keeps only the mix has no layers to "
            "write (set keep_layers = true, or save_layers = false)"
        )
    if store not in STORE_DTYPES:
        raise ElmoConfigError(
            f"elmo: store must be one of {', '.join(STORE_DTYPES)}, got {store!r}"
        )
    if mix not in ("average", "top") and not (
        isinstance(mix, (list, tuple))
        and mix
        and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and abs(w) <= MAX_MIX_WEIGHT
            for w in mix
        )
    ):
        raise ElmoConfigError(
            f"elmo: mix must be 'average', 'top' or a list of layer weights from "
            f"-{MAX_MIX_WEIGHT:g} to {MAX_MIX_WEIGHT:g}, got {mix!r}"
        )
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 4:
        raise ElmoConfigError(
            f"elmo: max_length must be an integer of at least 4, got {max_length!r}"
        )
    if cache_mb < 0:
        raise ElmoConfigError(f"elmo: cache_mb must be >= 0, got {cache_mb!r}")


# a directory, a published model's name, or an [options_file, weight_file] pair
WeightsSetting = Optional[Union[str, List[str], Tuple[str, str]]]


def check_wiring(nlp: Language, name: str, use_sents: bool) -> None:
    """Training and evaluation must give a Doc the same sentences: a sentence setter before the
    component `name` runs at evaluation, so it must also annotate during training."""
    annotating = set(nlp.config["training"].get("annotating_components") or [])
    if name not in annotating or not use_sents:
        return
    for before in nlp.pipe_names:
        if before == name:
            break
        assigns = nlp.get_pipe_meta(before).assigns
        if any(a in assigns for a in SENT_ASSIGNS) and before not in annotating:
            raise ElmoConfigError(
                f"'{before}' sets sentence boundaries before '{name}' but is not in [training] "
                f"annotating_components, so '{name}' would split training Docs differently from "
                f"evaluation Docs. Add '{before}' to annotating_components, or set "
                f"[components.{name}] use_sents = false."
            )


class OwnPipeline:
    """The pipeline whose factory made a component, held weakly; copies share it, pickles drop
    it."""

    def __init__(self, nlp: Optional[Language] = None) -> None:
        self._ref = weakref.ref(nlp) if nlp is not None else None

    def holding(self, component) -> Optional[Language]:
        """The pipeline where it still holds `component` under its name and the components whose
        mixes read it (a component sourced into another pipeline: None)."""
        nlp = self._ref() if self._ref is not None else None
        if nlp is None or not any(proc is component for _, proc in nlp.components):
            return None
        procs = dict(nlp.components)
        for name, mixes in component.listener_map.items():
            model = getattr(procs.get(name), "model", None)
            nodes = {id(node) for node in model.walk()} if isinstance(model, Model) else set()
            if not all(id(mix) in nodes for mix in mixes):
                return None
        return nlp

    def __deepcopy__(self, memo) -> "OwnPipeline":
        return self

    def __reduce__(self):
        return OwnPipeline, ()


def apply_training(component, nlp: Optional[Language]) -> None:
    """What training means for the `elmo` component `component`: with the pipeline `nlp` that
    trains, the feature cache turns on where its [training] annotating_components list the
    component and the sentence wiring is checked (`check_wiring`). Without it (a component sourced
    from a saved pipeline, which spaCy does not initialize), the cache turns on, since a mix reads
    its layers in training, and a warning says that the wiring was not checked."""
    name = component.name
    if nlp is not None:
        component.caching |= name in (nlp.config["training"].get("annotating_components") or ())
        check_wiring(nlp, name, component.use_sents)
        return
    component.caching = True
    if component.use_sents:
        warnings.warn(
            f"'{name}' was loaded from a saved pipeline and spaCy runs no initialize for a "
            f"sourced component, so its sentence wiring is not checked: list every sentence setter "
            f"before '{name}' in [training] annotating_components, or set [components.{name}] "
            "use_sents = false, else training and evaluation Docs are split differently",
            UserWarning,
            stacklevel=2,
        )


def reads_elmo(nlp: Language, proc) -> bool:
    """Whether the component `proc` mixes ELMo layers into what is trained: its model holds a mix,
    and, where it is a tok2vec, some component of `nlp` listens to it (else its output goes
    nowhere); components disabled (`select_pipes`, as `spacy train` disables the sourced and frozen
    ones while it initializes) count too."""
    model = getattr(proc, "model", None)
    if not isinstance(model, Model) or not any(node.name == MIX_NAME for node in model.walk()):
        return False
    if isinstance(proc, Tok2Vec):
        return any(fed_by(nlp, proc.name, name, other) for name, other in nlp.components)
    return True


def fed_by(nlp: Language, tok2vec: str, name: str, proc) -> bool:
    """Whether the tok2vec named `tok2vec` feeds a listener in the component `name` (`proc`): one
    that names it, or a `"*"` one where it is the last tok2vec before `name` (each tok2vec sends
    to every `"*"` listener after it, and the last one's output is what the listener reads)."""
    model = getattr(proc, "model", None)
    if not isinstance(model, Model):
        return False
    names = nlp.component_names
    before = names[: names.index(name)]
    last = next((n for n in reversed(before) if isinstance(nlp.get_pipe(n), Tok2Vec)), None)
    upstreams = ("*", tok2vec) if last == tok2vec else (tok2vec,)
    return any(
        isinstance(node, Tok2VecListener) and node.upstream_name in upstreams
        for node in model.walk()
    )


def check_read(nlp: Language, name: str) -> None:
    """Warn where components are trained and none reads ELMo (`spacy init config -p elmo,tagger`
    builds such a pipeline); the warning names the caller of the component's `initialize`. A
    pipeline that trains nothing (`elmo` to annotate Docs), or one whose disabled (sourced, frozen)
    components read ELMo, is fine."""
    trained = [
        other
        for other, proc in nlp.pipeline
        if other != name and getattr(proc, "is_trainable", False)
    ]
    if trained and not any(reads_elmo(nlp, proc) for _, proc in nlp.components):
        warnings.warn(
            f"'{name}' computes ELMo but no component reads it: {', '.join(map(repr, trained))} "
            "train without it. Give them ElmoFeatures (spacy_elmo.ElmoMultiHashEmbed.v1), e.g. in "
            "a config written by `python -m spacy_elmo init-config`, or leave out the elmo "
            "component",
            ElmoUnusedWarning,
            stacklevel=3,
        )
    check_replaced(nlp, name)


def check_replaced(nlp: Language, name: str) -> None:
    """Warn where another `elmo` after the component `name` replaces its layers on each Doc
    (`doc._.elmo_data`) before any component mixes them, while components mix the later one's:
    they read those at inference, and in training wherever the later one annotates."""
    names = nlp.pipe_names
    if name not in names:
        return
    component = nlp.get_pipe(name)
    later = [n for n in names[names.index(name) + 1 :] if type(nlp.get_pipe(n)) is type(component)]
    if later and not component.listener_map and nlp.get_pipe(later[0]).listener_map:
        warnings.warn(
            f"'{name}' computes ELMo but '{later[0]}' after it replaces its layers on each Doc "
            f"before any component mixes them: the components after '{later[0]}' read its layers "
            f"(in training too, where [training] annotating_components lists '{later[0]}', else "
            f"they train on '{name}''s and predict on '{later[0]}''s); remove one of them, or put "
            f"the components that should read '{name}' between the two",
            ElmoUnusedWarning,
            stacklevel=4,
        )


def fixed_mix(mix: Union[str, List[float]], n_layers: int) -> np.ndarray:
    """The fixed mix `mix` ("average", "top" or one weight per layer) of `n_layers` layers:
    `(n_layers,)` float32."""
    if mix == "average":
        return average_weights(n_layers)
    if mix == "top":
        return np.eye(n_layers, dtype=np.float32)[-1]
    if len(mix) != n_layers:
        raise ElmoConfigError(
            f"elmo: mix has {len(mix)} weights but the biLM has {n_layers} output layers"
        )
    return np.asarray(mix, dtype=np.float32)
