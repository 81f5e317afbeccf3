"""Weight files: the bilm-tf / AllenNLP hdf5 layout (read and export) and this project's own format.

Own format: a directory with `bilm.json` (options, default state policy) and `weights.pt`, a
plain torch state dict read with `torch.load(..., weights_only=True)` (no unpickling of code).

Files are untrusted: sizes are bounded and checked against what the file holds before the biLM is
built, hdf5 datasets are checked from their metadata before any is read (float, in this file, written),
values must be finite, and whatever cannot be read is one WeightFileError naming the file.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import hub
from ..errors import ElmoFileError
from .files import atomic_path, write_atomic
from .inference import StatePolicy, check_state_policy
from .lstm import gates_to_internal, gates_to_tf
from .model import BiLM
from .options import BiLMConfigError, BiLMOptions, read_json

OWN_CONFIG = "bilm.json"
OWN_WEIGHTS = "weights.pt"
OWN_FORMAT = "spacy_elmo.bilm"
OWN_VERSION = 1
PathLike = Union[str, Path]
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class WeightFileError(ElmoFileError):
    """A weight file that is missing, corrupt, or disagrees with its options."""


def _cell(d: int, l: int) -> str:
    return f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"


def expected_shapes(opts: BiLMOptions) -> Dict[str, Tuple[int, ...]]:
    """Every dataset of a bilm-tf weight file for `opts`, with its shape."""
    F, P, D, E = opts.n_filters, opts.projection_dim, opts.lstm_dim, opts.char_dim
    shapes: Dict[str, Tuple[int, ...]] = {"char_embed": (261, E)}
    for i, (w, n) in enumerate(opts.filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, w, E, n)
        shapes[f"CNN/b_cnn_{i}"] = (n,)
    for k in range(opts.n_highway):
        for m in ("transform", "carry"):
            shapes[f"CNN_high_{k}/W_{m}"] = (F, F)
            shapes[f"CNN_high_{k}/b_{m}"] = (F,)
    shapes["CNN_proj/W_proj"] = (F, P)
    shapes["CNN_proj/b_proj"] = (P,)
    for d in range(2):
        for l in range(opts.n_layers):
            shapes[f"{_cell(d, l)}/W_0"] = (2 * P, 4 * D)
            shapes[f"{_cell(d, l)}/B"] = (4 * D,)
            shapes[f"{_cell(d, l)}/W_P_0"] = (D, P)
    return shapes


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a dependency
        raise ImportError("reading bilm-tf weight files needs h5py: pip install h5py") from None
    return h5py


def check_finite(values: Union[np.ndarray, torch.Tensor], source: str, name: str) -> None:
    """Refuse NaN or infinite weights: the one check every weight source goes through."""
    if not bool(torch.isfinite(torch.as_tensor(values)).all()):
        raise WeightFileError(f"{source}: '{name}' holds NaN or infinite values")


def _dataset(f, name: str, path: Path, shape: Tuple[int, ...], options_path: str):
    """The dataset `name` of the open file `f`, checked from its metadata alone (nothing is read): reached
    through hard links only, float16/32/64, of `shape`, stored in this file and written."""
    h5py = _h5py()
    node = f
    for part in name.split("/"):
        link = node.get(part, getlink=True)
        if link is None:
            raise WeightFileError(f"{path}: dataset '{name}' is missing (expected shape {shape} from {options_path})")
        if not isinstance(link, h5py.HardLink):
            # a soft link may dangle or lead through an external one: weight files hold their datasets themselves
            target = f"{link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink) else getattr(link, "path", "?")
            raise WeightFileError(f"{path}: '{name}' is reached through a {type(link).__name__} to {target} "
                                  "(dangling, or external to the file); a weight file must hold its datasets itself")
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise WeightFileError(f"{path}: '{name}' is a {type(node).__name__}, not a dataset")
    if node.dtype.kind != "f" or node.dtype.itemsize not in (2, 4, 8):
        raise WeightFileError(f"{path}: dataset '{name}' has dtype {node.dtype}; weights must be float16, float32 or float64")
    if tuple(node.shape) != shape:
        raise WeightFileError(
            f"{path}: dataset '{name}' has shape {tuple(node.shape)} but {options_path} implies {shape}; "
            "the options file and the weights do not belong together"
        )
    plist = node.id.get_create_plist()
    if node.is_virtual or plist.get_external_count():
        raise WeightFileError(f"{path}: dataset '{name}' keeps its data outside the file (external or virtual "
                              "storage); a weight file must not read other files")
    stored = node.id.get_storage_size()
    if stored < node.nbytes and (stored == 0 or plist.get_nfilters() == 0):
        raise WeightFileError(f"{path}: dataset '{name}' is declared with shape {shape} but never written "
                              f"({stored} of {node.nbytes} bytes stored)")
    return node


def _read_hdf5(path: Path, opts: BiLMOptions, options_path: str) -> Dict[str, np.ndarray]:
    """Every dataset `expected_shapes(opts)` names, as float32. All are checked before any is read."""
    h5py = _h5py()
    if not path.is_file():
        raise FileNotFoundError(f"ELMo weight file not found: {path}")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise WeightFileError(f"{path}: not a readable HDF5 file, truncated or corrupt? ({err})") from None
    arrays: Dict[str, np.ndarray] = {}
    with f:
        name = "/"
        try:  # h5py raises KeyError, RuntimeError, OSError, ... for a corrupt file
            datasets = {}
            for name, shape in expected_shapes(opts).items():
                datasets[name] = _dataset(f, name, path, shape, options_path)
            for name, ds in datasets.items():
                arrays[name] = np.asarray(ds[...], dtype=np.float32)
        except WeightFileError:
            raise
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
            raise WeightFileError(f"{path}: '{name}' cannot be read, truncated or corrupt? "
                                  f"({type(err).__name__}: {err})") from None
    for name, arr in arrays.items():
        check_finite(arr, str(path), name)
    return arrays


def _tf_to_state_dict(arrays: Dict[str, np.ndarray], opts: BiLMOptions) -> Dict[str, torch.Tensor]:
    t = torch.from_numpy
    P = opts.projection_dim
    sd: Dict[str, torch.Tensor] = {
        "token_encoder.char_embedding.weight": t(np.concatenate([np.zeros_like(arrays["char_embed"][:1]),
                                                                  arrays["char_embed"]])),
        "token_encoder.w_proj": t(arrays["CNN_proj/W_proj"]),
        "token_encoder.b_proj": t(arrays["CNN_proj/b_proj"]),
    }
    for i in range(len(opts.filters)):
        sd[f"token_encoder.convs.{i}.weight"] = t(np.ascontiguousarray(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0)))
        sd[f"token_encoder.convs.{i}.bias"] = t(arrays[f"CNN/b_cnn_{i}"])
    for k in range(opts.n_highway):
        for m in ("transform", "carry"):
            sd[f"token_encoder.highways.{k}.w_{m}"] = t(arrays[f"CNN_high_{k}/W_{m}"])
            sd[f"token_encoder.highways.{k}.b_{m}"] = t(arrays[f"CNN_high_{k}/b_{m}"])
    for l in range(opts.n_layers):
        w0 = np.stack([arrays[f"{_cell(d, l)}/W_0"] for d in range(2)])
        D = opts.lstm_dim
        sd[f"lstm.layers.{l}.w_input"] = gates_to_internal(t(w0[:, :P]), D).contiguous()
        sd[f"lstm.layers.{l}.w_hidden"] = gates_to_internal(t(w0[:, P:]), D).contiguous()
        sd[f"lstm.layers.{l}.bias"] = gates_to_internal(t(np.stack([arrays[f"{_cell(d, l)}/B"] for d in range(2)])), D)
        sd[f"lstm.layers.{l}.w_proj"] = t(np.stack([arrays[f"{_cell(d, l)}/W_P_0"] for d in range(2)]))
    return sd


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
            out[f"{_cell(d, l)}/W_0"] = np.concatenate([sd[f"lstm.layers.{l}.w_input"][d],
                                                        sd[f"lstm.layers.{l}.w_hidden"][d]])
            out[f"{_cell(d, l)}/B"] = sd[f"lstm.layers.{l}.bias"][d]
            out[f"{_cell(d, l)}/W_P_0"] = sd[f"lstm.layers.{l}.w_proj"][d]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def export_hdf5(bilm: BiLM, directory: PathLike, stem: Optional[str] = None) -> Tuple[Path, Path]:
    """Write `options.json` + `weights.hdf5` in the bilm-tf layout (or `elmo_<stem>_*` names).

    Returns the two paths. Other ELMo tools (AllenNLP, bilm-tf) load them.
    """
    h5py = _h5py()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    options_path = directory / (f"elmo_{stem}_options.json" if stem else "options.json")
    weights_path = directory / (f"elmo_{stem}_weights.hdf5" if stem else "weights.hdf5")
    options_path.write_text(json.dumps(bilm.options.to_dict(), indent=2), encoding="utf-8")
    with h5py.File(weights_path, "w") as f:
        for name, arr in _state_dict_to_tf(bilm).items():
            f.create_dataset(name, data=arr)
    return options_path, weights_path


def save_bilm(bilm: BiLM, directory: PathLike, state: Optional[StatePolicy] = None) -> Path:
    """Save in this project's format: `bilm.json` + `weights.pt`. The warm state is computed and saved.

    `state` sets the default policy that `load_bilm` applies (default: the model's current one).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not bilm.warm_ready:
        bilm.compute_warm_state()
    config = {"format": OWN_FORMAT, "version": OWN_VERSION, "options": bilm.options.to_dict(),
              "state": check_state_policy(state or bilm.state_policy)}
    state_dict = {k: v.detach().cpu().contiguous() for k, v in bilm.state_dict().items()}
    with atomic_path(directory / OWN_WEIGHTS) as tmp:  # each file whole, never half written
        torch.save(state_dict, tmp)
    write_atomic(directory / OWN_CONFIG, json.dumps(config, indent=2))
    return directory


def read_state_dict(file: Union[Path, BinaryIO], source: str) -> Dict[str, torch.Tensor]:
    """A `{name: tensor}` dict saved with `torch.save`, read without unpickling code (`weights_only=True`).
    Anything else -> WeightFileError naming `source`."""
    try:
        state_dict = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for bad archives (UnpicklingError, RuntimeError, ...)
        # torch's message spans lines and suggests weights_only=False (never do that): keep its cause only
        cause = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(?:Please use|Check the documentation|$)", str(err), re.S)
        detail = " ".join(cause.group(1).split()) if cause else str(err).strip().split("\n")[0]
        if "Unsupported global" in detail:
            raise WeightFileError(f"{source}: refused: it holds Python objects other than tensors, and this "
                                  f"package never unpickles them ({detail})") from None
        raise WeightFileError(f"{source}: not a readable torch state dict ({type(err).__name__}: {detail})") from None
    if not isinstance(state_dict, dict):
        raise WeightFileError(f"{source}: expected a dict of tensors, got {type(state_dict).__name__}")
    for name, tensor in state_dict.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            kind = f"{tensor.layout} tensor" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise WeightFileError(f"{source}: entry {name!r} is a {kind}, not a named dense tensor")
    return state_dict


def bilm_from_state_dict(opts: BiLMOptions, state_dict: Dict[str, torch.Tensor], source: str, state: StatePolicy,
                         cache_size: int) -> BiLM:
    """A BiLM holding `state_dict`: names, dense float tensors, shapes and finite values are checked. The biLM is
    built only once the file stores at least 2 bytes (float16) per parameter of the options, so sizes that the
    weights do not have allocate nothing (tensors that view one storage count it once)."""
    stored = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state_dict.values()}.values())
    if stored < 2 * opts.n_parameters:
        raise WeightFileError(f"{source}: stores {stored:,} bytes of weights, too few for the {opts.n_parameters:,} "
                              "parameters its options imply; the options and the weights do not belong together")
    bilm = BiLM(opts, state=state, cache_size=cache_size)
    own = bilm.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise WeightFileError(f"{source}: tensors missing {missing[:5]} / unexpected {unexpected[:5]}")
    for name, tensor in state_dict.items():
        if tensor.dtype not in FLOAT_DTYPES:
            raise WeightFileError(f"{source}: '{name}' is a {tensor.dtype} tensor; weights must be float")
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise WeightFileError(
                f"{source}: tensor '{name}' has shape {tuple(tensor.shape)} but the options imply {tuple(own[name].shape)}"
            )
        check_finite(tensor, source, name)
    bilm.load_state_dict(state_dict)
    bilm.warm_ready = True
    return bilm


def _load_own(directory: Path, state: Optional[StatePolicy], cache_size: int) -> BiLM:
    config_path = directory / OWN_CONFIG
    config = read_json(config_path)
    if not isinstance(config, dict):
        raise BiLMConfigError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
    if config.get("format") != OWN_FORMAT or config.get("version") != OWN_VERSION:
        raise BiLMConfigError(
            f"{config_path}: expected format {OWN_FORMAT!r} version {OWN_VERSION}, "
            f"got {config.get('format')!r} version {config.get('version')!r}"
        )
    opts = BiLMOptions.from_dict(config.get("options"), source=str(config_path))
    try:
        policy = check_state_policy(state or config.get("state", "warm"))
    except ValueError as err:
        raise BiLMConfigError(f"{config_path}: {err}") from None
    weights_path = directory / OWN_WEIGHTS
    if not weights_path.is_file():
        raise FileNotFoundError(f"ELMo weight file not found: {weights_path}")
    return bilm_from_state_dict(opts, read_state_dict(weights_path, str(weights_path)), str(weights_path), policy,
                                cache_size)


def _listing(directory: Path) -> List[Path]:
    """The files in `directory`, sorted; an unlistable directory says so (a glob would report it empty)."""
    try:
        return sorted(p for p in directory.iterdir() if p.is_file())
    except PermissionError:
        raise WeightFileError(f"{directory}: permission denied: the directory cannot be listed") from None


def _stem(name: str, suffix: str) -> Optional[str]:
    """`<stem>` of a published file name `elmo_<stem><suffix>`, else None."""
    return name[len("elmo_"): -len(suffix)] if name.startswith("elmo_") and name.endswith(suffix) else None


def _looks_like_options(path: Path) -> bool:
    """Named like an options file, or a small JSON object with 'lstm' and 'char_cnn' sections."""
    if fnmatch(path.name, "*options*.json"):
        return True
    try:
        opts = read_json(path)
    except BiLMConfigError:
        return False
    return isinstance(opts, dict) and "lstm" in opts and "char_cnn" in opts


def _one(found: Sequence[Path], directory: Path, what: str) -> Optional[Path]:
    if len(found) > 1:
        raise WeightFileError(f"{directory}: several {what} files ({', '.join(p.name for p in found)}), which is "
                              "ambiguous; pass an (options_file, weight_file) pair")
    return found[0] if found else None


def resolve_hdf5_pair(directory: Path) -> Tuple[Path, Path]:
    """A directory of published (`elmo_<stem>_options.json`) or plain (`options.json`) files -> the pair.

    Exactly one file must look like an options file; published names must agree on their stem."""
    files = _listing(directory)
    jsons = [p for p in files if p.suffix == ".json"]
    options = _one([p for p in jsons if _looks_like_options(p)], directory, "options JSON")
    if options is None:
        looked = f" (looked at {', '.join(p.name for p in jsons)}: none has 'lstm' and 'char_cnn')" if jsons else ""
        raise FileNotFoundError(f"{directory}: no options file found{looked}")
    stem = _stem(options.name, "_options.json")
    published = [p for p in files if fnmatch(p.name, "elmo_*_weights.hdf5")]
    if stem is not None and published:
        weights = next((p for p in published if _stem(p.name, "_weights.hdf5") == stem), None)
        if weights is None:
            raise WeightFileError(f"{directory}: {options.name} has no elmo_{stem}_weights.hdf5 beside it, only "
                                  f"{', '.join(p.name for p in published)} (mismatched stems); "
                                  "pass an (options_file, weight_file) pair")
        return options, weights
    for pattern in ("elmo_*_weights.hdf5", "*weights*.hdf5", "*.hdf5"):
        weights = _one([p for p in files if fnmatch(p.name, pattern)], directory, "hdf5 weight")
        if weights is not None:
            return options, weights
    raise FileNotFoundError(f"{directory}: no hdf5 weight file found (looked for *.hdf5)")


def model_files(path: Union[PathLike, Tuple[PathLike, PathLike]]) -> List[Path]:
    """The files `load_bilm(path)` reads (options or config first, then the weights)."""
    if isinstance(path, (tuple, list)):
        return [Path(p) for p in path]
    if hub.is_published(path) and not Path(path).exists():
        directory = hub.model_dir(path)
        return [directory / f for f, _ in hub.published_files(path)]
    directory = Path(path)
    if (directory / OWN_CONFIG).is_file():
        return [directory / OWN_CONFIG, directory / OWN_WEIGHTS]
    return list(resolve_hdf5_pair(directory))


def load_bilm(path: Union[PathLike, Tuple[PathLike, PathLike]], *, state: Optional[StatePolicy] = None,
              cache_size: int = 50_000) -> BiLM:
    """Load a biLM in eval mode.

    `path`: a directory with an options JSON and one `.hdf5` weight file (bilm-tf / AllenNLP layout,
    published or plain names), an `(options_file, weight_file)` pair, a directory saved by
    `save_bilm`, or the name of a published model (`small`, `medium`, `original`, `original-5.5b`)
    stored in the cache by `python -m spacy_elmo download NAME` (never downloaded here; see
    `spacy_elmo.bilm.hub`). `state`: "warm" (default for hdf5 weights), "zero" or "carry"; a saved
    model keeps the policy it was saved with unless one is given.
    """
    if state is not None:
        check_state_policy(state)
    if hub.is_published(path) and not Path(path).exists():
        directory, verified = hub.resolve(path)
        bilm = load_bilm(directory, state=state, cache_size=cache_size)
        if not verified:  # files placed by hand: trusted now that they load, checked from now on
            hub.record(directory, path, {f: "placed by hand" for f, _ in hub.published_files(path)})
        return bilm
    if isinstance(path, (tuple, list)):
        if len(path) != 2:
            raise ValueError("pass (options_file, weight_file)")
        options_path, weights_path = Path(path[0]), Path(path[1])
    else:
        directory = Path(path)
        if not directory.exists():
            raise FileNotFoundError(f"ELMo weights not found: {directory}")
        if not directory.is_dir():
            raise ValueError(f"{directory}: pass a directory or an (options_file, weight_file) pair")
        if (directory / OWN_CONFIG).is_file():
            with _memory(directory):
                return _load_own(directory, state, cache_size)
        options_path, weights_path = resolve_hdf5_pair(directory)
    opts = BiLMOptions.from_file(options_path)
    with _memory(weights_path):
        arrays = _read_hdf5(weights_path, opts, str(options_path))
        bilm = BiLM(opts, state=state or "warm", cache_size=cache_size)
        bilm.load_state_dict(_tf_to_state_dict(arrays, opts), strict=False)
        if bilm.state_policy == "warm":
            bilm.compute_warm_state()
    return bilm


@contextmanager
def _memory(source: Path):
    """MemoryError while loading -> WeightFileError naming the files."""
    try:
        yield
    except MemoryError:
        raise WeightFileError(f"{source}: not enough memory to load this biLM") from None


def iter_hdf5_datasets(path: PathLike) -> Iterator[Tuple[str, np.ndarray]]:
    """Every dataset of an hdf5 file as `(name, array)` (for comparisons and `info`)."""
    h5py = _h5py()
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in sorted(names):
            yield name, f[name][...]
