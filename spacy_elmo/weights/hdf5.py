"""The bilm-tf / AllenNLP weight file layout (`dump_weights`): an options JSON and an `.hdf5` weight
file, the pair found in a directory (published or plain names), read, checked and converted
(`hdf5_export.py` writes it).

Files are untrusted: every dataset is checked from its metadata (float, the shape the options imply,
stored in this file, written) before any is read, and values must be finite. What cannot be read is
one ElmoFileError naming the file. Options that `export_hdf5` wrote record the weights' sha256
(`spacy_elmo_weights_sha256`, which bilm-tf and AllenNLP ignore), checked against the file read and
kept out of the options read (`digests.py`).
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..bilm.lstm import gates_to_internal
from ..bilm.options import BiLMOptions
from ..errors import ElmoFileError
from ..files import hdf5_dataset, inside_dir, opened_inside, regular_file, sha256_fd
from .checks import check_finite
from .data import ModelData, ModelFiles
from .digests import check_same_save
from .json_files import read_json
from .memory import check_memory

KIND = "hdf5"
PathLike = Union[str, Path]
# Trained float weights compress by well under 2:1 (the published files are not compressed at all);
# a file whose datasets expand more than this is refused before it is read. Datasets under
# CHECKED_DATASET_BYTES are not checked (a small bias may be all zeros): the options bound what they
# declare, and load_bilm checks that memory first. Reading inflates each stored chunk whole: chunks
# of which one is larger than its dataset, or all together more than the ratio times it (each bound
# plus CHECKED_DATASET_BYTES), are refused too.
MAX_COMPRESSION_RATIO = 10
CHECKED_DATASET_BYTES = 1 << 20
OPTIONS_FILE, WEIGHT_FILE = "ELMo options file", "ELMo weight file"  # what the readers call them
# Float32 copies of the weights alive at once while a file loads: the arrays read, the state dict
# converted from them, the network's parameters.
HDF5_COPIES = 3
BILM_GROUPS = ("char_embed", "CNN", "RNN_")  # the names of bilm-tf's weights begin so
# the key where `export_hdf5` records the weights' sha256 in the options (bilm-tf ignores it)
WEIGHTS_DIGEST = "spacy_elmo_weights_sha256"


def cell_scope(d: int, l: int) -> str:
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
            shapes[f"{cell_scope(d, l)}/W_0"] = (2 * P, 4 * D)
            shapes[f"{cell_scope(d, l)}/B"] = (4 * D,)
            shapes[f"{cell_scope(d, l)}/W_P_0"] = (D, P)
    return shapes


def import_h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a dependency
        raise ImportError("reading bilm-tf weight files needs h5py: pip install h5py") from None
    return h5py


def _dataset(f, name: str, path: Path, shape: Tuple[int, ...], options_path: str):
    """The dataset `name` of the open file `f`, checked from its metadata alone (nothing is read):
    reached through hard links only, float16/32/64, of `shape`, stored in this file and written."""
    node = hdf5_dataset(f, name, path, "a weight file")
    if node is None:
        raise ElmoFileError(
            f"{path}: dataset '{name}' is missing (expected shape {shape} from {options_path})"
        )
    if node.dtype.kind != "f" or node.dtype.itemsize not in (2, 4, 8):
        raise ElmoFileError(
            f"{path}: dataset '{name}' has dtype {node.dtype}; weights must be float16, float32 or "
            f"float64"
        )
    if tuple(node.shape) != shape:
        raise ElmoFileError(
            f"{path}: dataset '{name}' has shape {tuple(node.shape)} but {options_path} implies "
            f"{shape}; the options file and the weights do not belong together"
        )
    plist = node.id.get_create_plist()
    stored = node.id.get_storage_size()
    if stored < node.nbytes and (stored == 0 or plist.get_nfilters() == 0):
        raise ElmoFileError(
            f"{path}: dataset '{name}' is declared with shape {shape} but never written "
            f"({stored} of {node.nbytes} bytes stored)"
        )
    # a chunk never written reads as the fill value: a file stores less than it declares
    if node.chunks is not None:
        expected = int(np.prod([-(-n // c) for n, c in zip(node.shape, node.chunks)]))
        written = node.id.get_num_chunks()
        if written < expected:
            raise ElmoFileError(
                f"{path}: dataset '{name}' stores {written:,} of its {expected:,} chunks "
                f"({stored:,} of {node.nbytes:,} bytes declared): partly written or crafted"
            )
        # each chunk read is inflated whole, even where it reaches past the dataset (a resizable
        # dataset's chunk may exceed its shape in any dimension)
        chunk = int(np.prod(node.chunks)) * node.dtype.itemsize
        if (
            chunk > node.nbytes + CHECKED_DATASET_BYTES
            or chunk * written > MAX_COMPRESSION_RATIO * node.nbytes + CHECKED_DATASET_BYTES
        ):
            raise ElmoFileError(
                f"{path}: dataset '{name}' of {node.nbytes:,} bytes is stored in {written:,} "
                f"chunks of shape {node.chunks}, {chunk:,} bytes each once read: chunks larger "
                "than the dataset, a crafted file (a decompression bomb), are not read"
            )
    if node.nbytes >= CHECKED_DATASET_BYTES and node.nbytes > MAX_COMPRESSION_RATIO * stored:
        raise ElmoFileError(
            f"{path}: dataset '{name}' stores {stored:,} bytes that decompress to {node.nbytes:,} "
            f"(more than {MAX_COMPRESSION_RATIO}:1); trained weights do not compress like that: a "
            "crafted file (a decompression bomb) is not read"
        )
    return node


def _check_nothing_left_out(f, expected, path: Path, options_path: str) -> None:
    """ElmoFileError where the open file `f` holds biLM weights (bilm-tf's groups) that `expected`
    does not name: options of a smaller biLM (fewer layers or highways) than the weights."""
    found: List[str] = []
    f.visit(lambda n: None if n in expected or not n.startswith(BILM_GROUPS) else found.append(n))
    left = [n for n in found if isinstance(f.get(n), import_h5py().Dataset)]
    if left:
        raise ElmoFileError(
            f"{path}: holds {len(left)} datasets that {options_path} leaves out "
            f"({', '.join(left[:3])}): the options file and the weights do not belong together"
        )


def read_hdf5(
    path: Path,
    opts: BiLMOptions,
    options_path: str,
    digest: Optional[str] = None,
    inside: Optional[Path] = None,
) -> Dict[str, np.ndarray]:
    """Every dataset `expected_shapes(opts)` names, as float32. All are checked before any is
    read; then the file is checked against the sha256 `digest` its options record (None: none),
    or, where the datasets are not those the options describe, first (weights of another save:
    `digests.MixedSaveError`, which `load_bilm` reads again). `inside`: its model directory, which
    the file h5py opened must be inside (`files.opened_inside`)."""
    h5py = import_h5py()
    regular_file(path, "ELMo weight file")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ElmoFileError(
            f"{path}: not a readable HDF5 file, truncated or corrupt? ({err})"
        ) from None
    if inside is not None:
        try:
            opened_inside(f.id.get_vfd_handle(), path, inside, "ELMo weight file")
        except ElmoFileError:
            f.close()
            raise
    arrays: Dict[str, np.ndarray] = {}
    actual = None
    with f:
        name = "/"
        try:  # h5py raises KeyError, RuntimeError, OSError, ... for a corrupt file
            datasets = {}
            for name, shape in expected_shapes(opts).items():
                datasets[name] = _dataset(f, name, path, shape, options_path)
            _check_nothing_left_out(f, datasets, path, options_path)
            for name, ds in datasets.items():
                arrays[name] = np.asarray(ds[...], dtype=np.float32)
            if digest is not None:  # the file HDF5 read, hashed through its descriptor
                actual = sha256_fd(f.id.get_vfd_handle())
        except ElmoFileError:
            if digest is not None:  # weights the options do not describe: of another save?
                actual = sha256_fd(f.id.get_vfd_handle())
                check_same_save(Path(options_path), path, digest, actual, "export_hdf5")
            raise
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
            raise ElmoFileError(
                f"{path}: '{name}' cannot be read, truncated or corrupt? "
                f"({type(err).__name__}: {err})"
            ) from None
    for name, arr in arrays.items():
        check_finite(arr, str(path), f"'{name}' as float32")
    # once the file reads as weights, so that a corrupt file is reported as such
    check_same_save(Path(options_path), path, digest, actual or "", "export_hdf5")
    return arrays


def tf_to_state_dict(arrays: Dict[str, np.ndarray], opts: BiLMOptions) -> Dict[str, torch.Tensor]:
    """bilm-tf's datasets (`read_hdf5`'s names) -> a `BiLM` state dict: the character embedding
    given its padding row 0, the LSTM's gates in the internal order (`lstm.gates_to_internal`), both
    directions stacked."""
    t = torch.from_numpy
    P = opts.projection_dim
    sd: Dict[str, torch.Tensor] = {
        "token_encoder.char_embedding.weight": t(
            np.concatenate([np.zeros_like(arrays["char_embed"][:1]), arrays["char_embed"]])
        ),
        "token_encoder.w_proj": t(arrays["CNN_proj/W_proj"]),
        "token_encoder.b_proj": t(arrays["CNN_proj/b_proj"]),
    }
    for i in range(len(opts.filters)):
        sd[f"token_encoder.convs.{i}.weight"] = t(
            np.ascontiguousarray(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        )
        sd[f"token_encoder.convs.{i}.bias"] = t(arrays[f"CNN/b_cnn_{i}"])
    for k in range(opts.n_highway):
        for m in ("transform", "carry"):
            sd[f"token_encoder.highways.{k}.w_{m}"] = t(arrays[f"CNN_high_{k}/W_{m}"])
            sd[f"token_encoder.highways.{k}.b_{m}"] = t(arrays[f"CNN_high_{k}/b_{m}"])
    for l in range(opts.n_layers):
        w0 = np.stack([arrays[f"{cell_scope(d, l)}/W_0"] for d in range(2)])
        D = opts.lstm_dim
        sd[f"lstm.layers.{l}.w_input"] = gates_to_internal(t(w0[:, :P]), D).contiguous()
        sd[f"lstm.layers.{l}.w_hidden"] = gates_to_internal(t(w0[:, P:]), D).contiguous()
        sd[f"lstm.layers.{l}.bias"] = gates_to_internal(
            t(np.stack([arrays[f"{cell_scope(d, l)}/B"] for d in range(2)])), D
        )
        sd[f"lstm.layers.{l}.w_proj"] = t(
            np.stack([arrays[f"{cell_scope(d, l)}/W_P_0"] for d in range(2)])
        )
    return sd


def _listing(directory: Path) -> List[Path]:
    """The entries of `directory` that are not directories, sorted (a FIFO or a device among them is
    refused when read); an unlistable directory says so (a glob would report it empty)."""
    try:
        return sorted(p for p in directory.iterdir() if not p.is_dir())
    except PermissionError:
        raise ElmoFileError(
            f"{directory}: permission denied: the directory cannot be listed"
        ) from None


def _stem(name: str, suffix: str) -> Optional[str]:
    """`<stem>` of a published file name `elmo_<stem><suffix>`, else None."""
    return (
        name[len("elmo_") : -len(suffix)]
        if name.startswith("elmo_") and name.endswith(suffix)
        else None
    )


def _looks_like_options(path: Path) -> bool:
    """Named like an options file, or a small JSON object with 'lstm' and 'char_cnn' sections (read
    where it is inside its directory)."""
    if fnmatch(path.name, "*options*.json"):
        return True
    inside_dir(path.parent, path.name, OPTIONS_FILE)
    try:
        opts = read_json(path, inside=path.parent)
    except ElmoFileError:
        return False
    return isinstance(opts, dict) and "lstm" in opts and "char_cnn" in opts


def _one(found: Sequence[Path], directory: Path, what: str) -> Optional[Path]:
    if len(found) > 1:
        raise ElmoFileError(
            f"{directory}: several {what} files ({', '.join(p.name for p in found)}), which is "
            "ambiguous; pass an (options_file, weight_file) pair"
        )
    return found[0] if found else None


def _inside(directory: Path, options: Path, weights: Path) -> Tuple[Path, Path]:
    return inside_dir(directory, options.name, OPTIONS_FILE), inside_dir(
        directory, weights.name, WEIGHT_FILE
    )


def resolve_hdf5_pair(directory: Path) -> Tuple[Path, Path]:
    """A directory of published (`elmo_<stem>_options.json`) or plain (`options.json`) files -> the
    pair.

    Exactly one file must look like an options file; published names must agree on their stem."""
    files = _listing(directory)
    jsons = [p for p in files if p.suffix == ".json"]
    options = _one([p for p in jsons if _looks_like_options(p)], directory, "options JSON")
    if options is None:
        looked = (
            f" (looked at {', '.join(p.name for p in jsons)}: none has 'lstm' and 'char_cnn')"
            if jsons
            else ""
        )
        raise ElmoFileError(f"{directory}: no options file found{looked}")
    stem = _stem(options.name, "_options.json")
    published = [p for p in files if fnmatch(p.name, "elmo_*_weights.hdf5")]
    if stem is not None and published:
        weights = next((p for p in published if _stem(p.name, "_weights.hdf5") == stem), None)
        if weights is None:
            raise ElmoFileError(
                f"{directory}: {options.name} has no elmo_{stem}_weights.hdf5 beside it, only "
                f"{', '.join(p.name for p in published)} (mismatched stems); "
                "pass an (options_file, weight_file) pair"
            )
        return _inside(directory, options, weights)
    for pattern in ("elmo_*_weights.hdf5", "*weights*.hdf5", "*.hdf5"):
        weights = _one([p for p in files if fnmatch(p.name, pattern)], directory, "hdf5 weight")
        if weights is not None:
            return _inside(directory, options, weights)
    raise ElmoFileError(f"{directory}: no hdf5 weight file found (looked for *.hdf5)")


def detect(directory: Path) -> bool:
    """Always True: a directory no other format claims (this format comes last in `FORMATS`) is read
    as an options JSON + a `.hdf5` weight file, and `model_files` says what is missing or
    ambiguous."""
    return True


def held(directory: Path) -> List[str]:
    """The `.hdf5` files in `directory` (weights in this layout, or data a load would trip on)."""
    return [p.name for p in _listing(directory) if p.suffix == ".hdf5"]


def model_files(directory: Path) -> ModelFiles:
    """The `(options, weights)` pair of a directory (see `resolve_hdf5_pair`)."""
    return ModelFiles(KIND, *resolve_hdf5_pair(directory))


def read(model: ModelFiles) -> ModelData:
    """The options file and the weights of `model` (a directory's pair, a pair given, a published
    model's files): the memory a load needs is checked first, then every dataset (see `read_hdf5`);
    policy "warm", the warm state computed when needed."""
    raw = read_json(model.config, inside=model.directory)
    digest = raw.pop(WEIGHTS_DIGEST, None) if isinstance(raw, dict) else None
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
        raise ElmoFileError(f"{model.config}: '{WEIGHTS_DIGEST}' must be a sha256, got {digest!r}")
    options = BiLMOptions.from_dict(raw, source=str(model.config))
    if options.char_table:
        raise ElmoFileError(
            f"{model.config}: 'char_cnn.char_table' is for ELMoForManyLangs models; the bilm-tf "
            "hdf5 layout has no character table"
        )
    if options.forget_bias != 1.0:
        raise ElmoFileError(
            f"{model.config}: 'lstm.forget_bias' {options.forget_bias:g}: bilm-tf and AllenNLP "
            "fix the forget gate's bias at 1 in this layout and ignore the key, so this file's "
            "vectors there would differ; keep such a model in this project's format"
        )
    check_memory(HDF5_COPIES * 4 * options.n_parameters, str(model.weights))
    arrays = read_hdf5(model.weights, options, str(model.config), digest, model.directory)
    state_dict = tf_to_state_dict(arrays, options)
    # not in the file: computed
    state_dict["warm_h"] = torch.zeros(options.n_layers, 2, options.projection_dim)
    state_dict["warm_c"] = torch.zeros(options.n_layers, 2, options.lstm_dim)
    return ModelData(options, state_dict, str(model.weights), "warm")
