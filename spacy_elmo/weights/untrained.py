"""Random, untrained weights at a published model's sizes, in the published layout (a bilm-tf
options JSON and hdf5 weights under the `elmo_<stem>_*` names): what `python -m spacy_elmo
init-random` writes, so that every example runs without the network. Labelled: the options file's
`untrained` entry, which the options keep through `convert` and `save_bilm`, `load_bilm` turns into
an `ElmoUntrainedWarning` and `info` shows. The network is the one `pretrain` starts from
(`BiLM(options)`), seeded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Tuple, Union

import torch

from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from ..errors import ElmoUntrainedWarning
from . import hub
from .hdf5_export import export_hdf5
from .hub import published_options

UNTRAINED_KEY = "untrained"
UNTRAINED = (
    "random weights written by `python -m spacy_elmo init-random`, untrained: for trying the API "
    "and the "
    "commands offline, its vectors mean nothing"
)


def write_untrained(
    directory: Union[str, Path], size: str = "small", seed: int = 0
) -> Tuple[Path, Path]:
    """Write random, untrained weights at the sizes of the published model `size` into `directory`
    under its published file names; returns the options and weight files. The same `seed` writes the
    same weights."""
    options = BiLMOptions.from_dict(
        {**published_options(size), UNTRAINED_KEY: UNTRAINED}, source=f"--size {size}"
    )
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        network = BiLM(options)
    return export_hdf5(network, directory, stem=hub.PUBLISHED[size])


def untrained_note(options: BiLMOptions) -> Optional[str]:
    """What the options say of weights that are not trained (`write_untrained`'s label), else
    None."""
    note = options.extra.get(UNTRAINED_KEY)
    return note if isinstance(note, str) and note else None


def warn_if_untrained(options: BiLMOptions, source: object) -> None:
    """An `ElmoUntrainedWarning` naming `source` where its options carry the untrained label."""
    note = untrained_note(options)
    if note:
        warnings.warn(f"{source}: {note}", ElmoUntrainedWarning, stacklevel=3)
