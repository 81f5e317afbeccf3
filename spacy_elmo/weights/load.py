"""`load_bilm`: a published name, a directory or a file pair -> an `ElmoEmbedder` in eval mode;
`build`: what a format read (`ModelData`) -> the network, checked, in an embedder."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Optional, Union

import torch

from ..bilm.chars import CharTable
from ..bilm.device import check_device
from ..bilm.embedder import ElmoEmbedder
from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from ..bilm.policy import StatePolicy, check_state_policy
from ..bilm.precision import Precision, check_precision
from ..bilm.runner import check_cache_size
from ..errors import ElmoResourceError
from . import hub
from .checks import check_enough_bytes, check_matches, check_network_finite
from .data import ModelData, ModelFiles
from .digests import MixedSaveError
from .formats import format_of
from .locate import ModelPath, locate
from .memory import is_allocation_failure
from .untrained import warn_if_untrained


def load_bilm(
    path: ModelPath,
    *,
    state: Optional[StatePolicy] = None,
    cache_size: int = 50_000,
    precision: Precision = "float32",
    device: Union[str, torch.device] = "cpu",
) -> ElmoEmbedder:
    """Load a biLM for inference (eval mode).

    `path`: anything `locate` takes: a directory with an options JSON and one `.hdf5` weight file
    (bilm-tf / AllenNLP layout, published or plain names), an `(options_file, weight_file)` pair, a
    directory saved by `save_bilm`, an ELMoForManyLangs model directory, a saved spaCy pipeline (the
    biLM of its one `elmo` component), or the name of a published model
    (`small`, `medium`, `original`, `original-5.5b`) stored in the cache by `python -m spacy_elmo
    download NAME`. A published name (a str) is always the cached model, never a directory of that
    name in the working directory; `"./small"`, `"small/"`, an absolute path or a `Path` is a path.
    A directory's files are read from it only: a file that resolves outside it is refused. `state`:
    "warm" (default for hdf5 weights), "zero" (default for ELMoForManyLangs models: their outputs
    after `reset_states`; "warm" needs a warm-up text in the model's language, see
    `BiLM.compute_warm_state`) or "carry"; a saved model keeps its policy unless one is given.
    `cache_size`: rows of the token-layer cache. `precision`: of the LSTM's matrix products,
    "float32", "bfloat16", "int8" or "auto" (see `ElmoEmbedder.precision`), chosen for `device`
    ("cpu", "cuda", "cuda:N"). Raises ElmoFileError, ElmoConfigError or ElmoResourceError.
    """
    if state is not None:
        check_state_policy(state)
    check_precision(precision)
    check_cache_size(cache_size)
    device = check_device(device)
    files = locate(path, verify=True)
    with _memory(files.weights):
        embedder = build(read(files), state, cache_size)
        if files.label:  # what the commands call it (a saved pipeline's component)
            embedder.source = files.label
        embedder.to(device)
        if embedder.state_policy.warm_start:
            # computed now unless loaded (ElmoConfigError where it cannot be)
            embedder.network.warm_state(1)
        # after the warm state, which marks what was derived from the weights out of date: the
        # copies made here are those the first call uses
        embedder.precision = precision
    # files placed by hand: trusted now that they load, checked from now on
    if files.published and not files.verified:
        hub.record_by_hand(files.config.parent, files.published)
    warn_if_untrained(embedder.options, path)  # `init-random`'s weights: said at every load
    return embedder


# a directory whose files come from two saves is read again after each pause (seconds): a save
# that was being written when the reader came has ended by then
MIXED_SAVE_PAUSES = (0.05, 0.2, 0.5)
pause = time.sleep


def read(files: ModelFiles) -> ModelData:
    """What the format of `files` reads; where they come from two saves (`digests`: a save being
    written, or one interrupted), read again after each of `MIXED_SAVE_PAUSES`, then the error."""
    for seconds in MIXED_SAVE_PAUSES:
        try:
            return format_of(files).read(files)
        except MixedSaveError:
            pause(seconds)
    return format_of(files).read(files)


def build(data: ModelData, state: Optional[StatePolicy], cache_size: int) -> ElmoEmbedder:
    """An embedder whose network holds `data.state_dict` (and `data.char_table`, which options with
    `char_table` need), under `state` (None: the policy `data` asks for). The network is built only
    once the state dict stores at least 2 bytes (float16) per parameter of the options, so sizes
    that the weights do not have allocate nothing; names, float dtypes and shapes are checked before
    it is filled, values (finite once cast to the network's dtype) after. ElmoFileError naming
    `data.source` otherwise."""
    check_enough_bytes(data.state_dict, data.options, data.source)
    bilm = BiLM(data.options, data.char_table)
    check_matches(data.state_dict, bilm.state_dict(), data.source)
    bilm.load_state_dict(data.state_dict)
    check_network_finite(bilm, data.source)
    if data.warm_state:
        bilm.mark_warm_state_current()
    return ElmoEmbedder(bilm, state or data.state, cache_size, source=data.source)


def bilm_from_state_dict(
    opts: BiLMOptions,
    state_dict: Dict[str, torch.Tensor],
    source: str,
    state: StatePolicy,
    cache_size: int,
    char_table: Optional[CharTable] = None,
    warm_state: bool = True,
) -> ElmoEmbedder:
    """An embedder whose network holds `state_dict` (see `build`). `warm_state`: whether the state
    dict's `warm_h` / `warm_c` are the warm state of its weights."""
    return build(
        ModelData(opts, state_dict, source, state, char_table, warm_state), None, cache_size
    )


@contextmanager
def _memory(source: Path):
    """A failed allocation while loading (numpy's MemoryError, torch's RuntimeError) ->
    ElmoResourceError naming the file."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        if not is_allocation_failure(err):
            raise
        detail = str(err).strip().split("\n")[0]
        raise ElmoResourceError(
            f"{source}: not enough memory to load this biLM" + (f" ({detail})" if detail else "")
        ) from None
