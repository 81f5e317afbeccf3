"""Writing the bilm-tf / AllenNLP weight file layout: a biLM as an options JSON and an `.hdf5`
weight file (`hdf5.py` finds, reads and checks them)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from io import BytesIO
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np
import torch

from ..bilm.embedder import ElmoEmbedder
from ..bilm.lstm import gates_to_tf
from ..bilm.model import BiLM
from ..bilm.warmup import WARMUP_SENTENCES
from ..errors import ElmoConfigError
from ..files import atomic_path, output_dir, write_atomic
from .digests import drop_unrecorded
from .formats import check_destination
from .hdf5 import KIND, WEIGHTS_DIGEST, cell_scope, import_h5py

PathLike = Union[str, Path]
# what a published pair's names hold between `elmo_` and `_options.json` / `_weights.hdf5`
STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_stem(stem: Optional[str]) -> None:
    """ElmoConfigError unless `stem` is None (files `options.json`, `weights.hdf5`) or a name for
    `elmo_<stem>_options.json` and `elmo_<stem>_weights.hdf5`: 1 to 100 ASCII letters, digits, '.',
    '_' or '-', beginning with a letter or digit (no path)."""
    if stem is not None and (not isinstance(stem, str) or not STEM.fullmatch(stem)):
        raise ElmoConfigError(
            "stem must be 1 to 100 ASCII letters, digits, '.', '_' or '-', beginning with a "
            f"letter or digit (files elmo_<stem>_options.json, elmo_<stem>_weights.hdf5), got "
            f"{stem!r}"
        )


def _state_dict_to_tf(bilm: BiLM) -> Dict[str, np.ndarray]:
    opts = bilm.options
    sd = {k: v.detach().cpu().float() for k, v in bilm.state_dict().items()}
    for l in range(opts.n_layers):
        for name in ("w_input", "w_hidden", "bias"):
            key = f"lstm.layers.{l}.{name}"
            sd[key] = gates_to_tf(sd[key], opts.lstm_dim)
    sd = {k: v.numpy() for k, v in sd.items()}
    out: Dict[str, np.ndarray] = {
        "char_embed": sd["token_encoder.char_embedding.weight"][1:],
        "CNN_proj/W_proj": sd["token_encoder.w_proj"],
        "CNN_proj/b_proj": sd["token_encoder.b_proj"],
    }
    for i in range(len(opts.filters)):
        out[f"CNN/W_cnn_{i}"] = sd[f"token_encoder.convs.{i}.weight"].transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = sd[f"token_encoder.convs.{i}.bias"]
    for k in range(opts.n_highway):
        for m in ("transform", "carry"):
            out[f"CNN_high_{k}/W_{m}"] = sd[f"token_encoder.highways.{k}.w_{m}"]
            out[f"CNN_high_{k}/b_{m}"] = sd[f"token_encoder.highways.{k}.b_{m}"]
    for l in range(opts.n_layers):
        for d in range(2):
            out[f"{cell_scope(d, l)}/W_0"] = np.concatenate(
                [sd[f"lstm.layers.{l}.w_input"][d], sd[f"lstm.layers.{l}.w_hidden"][d]]
            )
            out[f"{cell_scope(d, l)}/B"] = sd[f"lstm.layers.{l}.bias"][d]
            out[f"{cell_scope(d, l)}/W_P_0"] = sd[f"lstm.layers.{l}.w_proj"][d]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def export_hdf5(
    model: Union[ElmoEmbedder, BiLM], directory: PathLike, stem: Optional[str] = None
) -> Tuple[Path, Path]:
    """Write `options.json` + `weights.hdf5` in the bilm-tf layout (or `elmo_<stem>_*` names), which
    AllenNLP and bilm-tf load (they ignore the options' `spacy_elmo_weights_sha256`, with which
    `load_bilm` refuses weights of another export: see `digests.py`), each file whole, the options
    last; returns the two paths. The hdf5 file is made in
    memory and then written: HDF5 itself never meets a full disk (it cannot report one, and crashes
    later). ElmoConfigError for what the layout cannot hold: a warm state read from other text than
    the built-in one (loading the layout reads that again; the layout records no state policy and
    loads as warm), an embedder whose state policy is not warm (zero, carry: set it to warm to
    export it anyway, its outputs then change), a forget gate bias other than 1, a biLM that reads
    its tokens lowercased (`char_cnn.lowercase`, which bilm-tf and AllenNLP ignore), an
    ELMoForManyLangs model (a character table). `stem`: see `check_stem`. Files of this layout in
    `directory` are replaced; a model of another format there, or a directory where a file goes, is
    an ElmoFileError, nothing written (`formats.check_destination`)."""
    bilm = model.network if isinstance(model, ElmoEmbedder) else model
    if bilm.options.char_table:
        raise ElmoConfigError(
            "the bilm-tf hdf5 layout has no character table or word embedding: keep this "
            "ELMoForManyLangs model in this project's format (save_bilm, convert --to own)"
        )
    if bilm.options.forget_bias != 1.0:
        raise ElmoConfigError(
            f"the biLM's forget gate bias is {bilm.options.forget_bias:g}; bilm-tf and AllenNLP "
            "fix it at 1 in the hdf5 layout: keep it in this project's format (save_bilm)"
        )
    if bilm.options.lowercase:
        where = f"{model.source}: " if isinstance(model, ElmoEmbedder) else ""
        raise ElmoConfigError(
            f"{where}the biLM reads each token lowercased (char_cnn.lowercase: it was trained on "
            "lowercased text); bilm-tf and AllenNLP ignore the option and would feed it cased "
            "text: keep it in this project's format (save_bilm, convert --to own)"
        )
    if isinstance(model, ElmoEmbedder) and not model.state_policy.warm_start:
        raise ElmoConfigError(
            f"{model.source}: the biLM's state policy is '{model.state_policy}'; the bilm-tf hdf5 "
            "layout records none and loads as 'warm' (bilm-tf and AllenNLP carry states over), so "
            "its outputs would change: keep it in this project's format (save_bilm, convert --to "
            "own)"
        )
    if bilm.has_warm_state and not _builtin_warm_state(bilm):
        raise ElmoConfigError(
            "the biLM's warm state was not read from the built-in English warm-up text, which "
            "loading the hdf5 layout reads again (the layout keeps no state): its outputs would "
            "change. Keep it in this project's format (save_bilm, convert --to own)"
        )
    check_stem(stem)
    h5py = import_h5py()
    directory = output_dir(directory, "export_hdf5")
    options_path = directory / (f"elmo_{stem}_options.json" if stem else "options.json")
    weights_path = directory / (f"elmo_{stem}_weights.hdf5" if stem else "weights.hdf5")
    check_destination(directory, KIND, [options_path.name, weights_path.name], "export_hdf5")
    image = BytesIO()
    with h5py.File(image, "w") as f:
        for name, arr in _state_dict_to_tf(bilm).items():
            f.create_dataset(name, data=arr)
    # the weights first, the options last, recording the weights' sha256 (see `digests.py`)
    with atomic_path(weights_path) as tmp, open(tmp, "wb") as out:
        out.write(image.getbuffer())
        drop_unrecorded(options_path, WEIGHTS_DIGEST)  # before the old weights are replaced
    options = {
        **bilm.options.to_dict(),
        WEIGHTS_DIGEST: hashlib.sha256(image.getbuffer()).hexdigest(),
    }
    write_atomic(options_path, json.dumps(options, indent=2))
    return options_path, weights_path


def _builtin_warm_state(bilm: BiLM) -> bool:
    """Whether `bilm`'s warm state is the one the built-in warm-up text gives (to float32 rounding:
    another CPU's kernels round otherwise)."""
    reference = copy.deepcopy(bilm)
    reference.compute_warm_state(WARMUP_SENTENCES)
    return all(
        torch.allclose(getattr(bilm, name), getattr(reference, name), rtol=1e-4, atol=1e-5)
        for name in ("warm_h", "warm_c")
    )
