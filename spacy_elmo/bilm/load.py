"""`load_bilm`: a published name, a directory or a file pair -> an `ElmoEmbedder` in eval mode."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Optional, Union

import torch

from ..errors import ElmoResourceError
from . import hub
from .device import check_device
from .efml_format import load_efml
from .embedder import ElmoEmbedder, check_cache_size
from .hdf5_format import read_hdf5, tf_to_state_dict
from .locate import ModelPath, locate
from .memory import check_memory, is_allocation_failure
from .model import BiLM
from .options import BiLMOptions, StatePolicy, check_state_policy
from .own_format import load_own
from .precision import Precision, check_precision

# Float32 copies of the weights alive at once while an hdf5 file loads: the arrays read, the state dict
# converted from them, the network's parameters.
HDF5_COPIES = 3


def load_bilm(path: ModelPath, *, state: Optional[StatePolicy] = None, cache_size: int = 50_000,
              precision: Precision = "float32", device: Union[str, torch.device] = "cpu") -> ElmoEmbedder:
    """Load a biLM for inference (eval mode).

    `path`: anything `locate` takes: a directory with an options JSON and one `.hdf5` weight file
    (bilm-tf / AllenNLP layout, published or plain names), an `(options_file, weight_file)` pair, a
    directory saved by `save_bilm`, an ELMoForManyLangs model directory, or the name of a published model
    (`small`, `medium`, `original`, `original-5.5b`) stored in the cache by `python -m spacy_elmo download
    NAME`. A published name (a str) is always the cached model, never a directory of that name in the working
    directory; `"./small"`, `"small/"`, an absolute path or a `Path` is a path. A directory's files are read
    from it only: a file that resolves outside it is refused. `state`: "warm" (default for hdf5 weights),
    "zero" (default for ELMoForManyLangs models: their outputs after `reset_states`; "warm" needs a warm-up
    text in the model's language, see `BiLM.compute_warm_state`) or "carry"; a saved model keeps its policy
    unless one is given.
    `cache_size`: rows of the token-layer cache. `precision`: of the LSTM's matrix products, "float32",
    "bfloat16", "int8" or "auto" (see `ElmoEmbedder.precision`), chosen for `device` ("cpu", "cuda", "cuda:N").
    Raises ElmoFileError, ElmoConfigError or ElmoResourceError.
    """
    if state is not None:
        check_state_policy(state)
    check_precision(precision)
    check_cache_size(cache_size)
    device = check_device(device)
    files = locate(path, verify=True)
    with _memory(files.weights):
        if files.kind == "own":
            embedder = load_own(files.config.parent, state, cache_size)
        elif files.kind == "efml":
            embedder = load_efml(files.config.parent, state, cache_size)
        else:
            options = BiLMOptions.from_file(files.config)
            check_memory(HDF5_COPIES * 4 * options.n_parameters, str(files.weights))
            arrays = read_hdf5(files.weights, options, str(files.config))
            bilm = BiLM(options)
            bilm.load_state_dict(tf_to_state_dict(arrays, options), strict=False)
            embedder = ElmoEmbedder(bilm, state or "warm", cache_size, source=str(files.weights))
        embedder.to(device)
        embedder.precision = precision
        if embedder.state_policy == "warm":
            embedder.bilm.warm_state(1)  # computed now unless loaded (ElmoConfigError where it cannot be)
    if files.published and not files.verified:  # files placed by hand: trusted now that they load, checked from now on
        hub.record(files.config.parent, files.published, {f: "placed by hand" for f, _ in hub.published_files(files.published)})
    return embedder


@contextmanager
def _memory(source: Path):
    """A failed allocation while loading (numpy's MemoryError, torch's RuntimeError) -> ElmoResourceError
    naming the file."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        if not is_allocation_failure(err):
            raise
        detail = str(err).strip().split("\n")[0]
        raise ElmoResourceError(f"{source}: not enough memory to load this biLM"
                                + (f" ({detail})" if detail else "")) from None
