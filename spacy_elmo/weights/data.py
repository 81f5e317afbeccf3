"""What the weight formats and the loader hand each other, plain data both: a model's files
(`ModelFiles`, what `locate` finds) and what a format reads from them (`ModelData`, what its `read`
returns and `load.build` makes a network of)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..bilm.chars import CharTable
from ..bilm.options import BiLMOptions
from ..bilm.policy import StatePolicy


@dataclass(frozen=True)
class ModelFiles:
    """One model's files: `kind` "own" (`bilm.json` + `weights.pt` (+ `char_table.json`)), "hdf5"
    (options JSON + bilm-tf weights) or "efml" (an ELMoForManyLangs directory: `config.json`,
    `token_embedder.pkl`, then `encoder.pkl`, `char.dic` and `word.dic` as `others`) or "pipeline"
    (a saved spaCy pipeline: its `config.cfg`, then `NAME/model` of its `elmo` component);
    `published`: the name it was found under, with `verified` False while its files were placed by
    hand and not yet recorded in the cache manifest; `label`: what the commands and the embedder
    call the biLM where its path would not say which it is (a saved pipeline's component);
    `directory`: the model directory given, which each file read must be inside once open
    (`files.opened_inside`); None for a pair given and a published model (the cache's files)."""

    kind: str
    config: Path
    weights: Path
    published: Optional[str] = None
    verified: bool = True
    others: Tuple[Path, ...] = ()
    label: Optional[str] = None
    directory: Optional[Path] = None

    @property
    def paths(self) -> List[Path]:
        """The config (options) file, then the weights, then the other files."""
        return [self.config, self.weights, *self.others]


@dataclass(frozen=True, eq=False)
class ModelData:
    """What a format reads from a model's files: all a network needs, checked as far as the files
    alone allow.

    `options`; `state_dict`, a whole `BiLM` state dict (`warm_h` / `warm_c` included), checked
    against the network when it is built (`load.build`); `source`, the file (or directory) messages
    name; `state`, the policy the files ask for, applied where the caller names none; `char_table`,
    where the options have one; `warm_state`, whether `warm_h` / `warm_c` are the warm state of the
    weights (else computed when needed)."""

    options: BiLMOptions
    state_dict: Dict[str, torch.Tensor]
    source: str
    state: StatePolicy
    char_table: Optional[CharTable] = None
    warm_state: bool = False
