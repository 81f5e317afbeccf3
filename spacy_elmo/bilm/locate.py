"""Where a model's files are: `locate` turns anything `load_bilm` accepts (a published name, a directory
in either format, an `(options, weights)` pair) into a `ModelFiles`, reading nothing but directory
listings (and, where asked, the cache manifest's checksums). Every entry point finds files through it.

One rule tells names from paths: a published name (`small`, `medium`, `original`, `original-5.5b`, a str)
is the cached model of that name, whatever the working directory holds; anything else (`./small`,
`small/`, an absolute path, any `Path`) is a path. A directory's files are read from it only (`inside_dir`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from ..errors import ElmoConfigError, ElmoFileError
from . import hub
from .efml_format import EFML_CHARS, EFML_CONFIG, EFML_ENCODER, EFML_MARKERS, EFML_TOKEN_EMBEDDER, EFML_WORDS
from .files import inside_dir
from .options import read_json
from .own_format import OWN_CONFIG, OWN_TABLE, OWN_WEIGHTS

ModelPath = Union[str, Path, Tuple[Union[str, Path], Union[str, Path]]]
PRETRAIN_MODEL = "model"  # where `python -m spacy_elmo pretrain OUT` saves the biLM: OUT/model
OPTIONS_FILE, WEIGHT_FILE = "ELMo options file", "ELMo weight file"  # what the readers call them


@dataclass(frozen=True)
class ModelFiles:
    """One model's files: `kind` "own" (`bilm.json` + `weights.pt` (+ `char_table.json`)), "hdf5" (options
    JSON + bilm-tf weights) or "efml" (an ELMoForManyLangs directory: `config.json`, `token_embedder.pkl`,
    then `encoder.pkl`, `char.dic` and `word.dic` as `others`); `published`: the name it was found under,
    with `verified` False while its files were placed by hand and not yet recorded in the cache manifest."""

    kind: str
    config: Path
    weights: Path
    published: Optional[str] = None
    verified: bool = True
    others: Tuple[Path, ...] = ()

    @property
    def paths(self) -> List[Path]:
        """The config (options) file, then the weights, then the other files."""
        return [self.config, self.weights, *self.others]


def _own(directory: Path) -> ModelFiles:
    table = directory / OWN_TABLE
    return ModelFiles("own", directory / OWN_CONFIG, directory / OWN_WEIGHTS,
                      others=(table,) if os.path.lexists(table) else ())


def _efml(directory: Path) -> ModelFiles:
    others = [directory / name for name in (EFML_ENCODER, EFML_CHARS, EFML_WORDS)]
    return ModelFiles("efml", directory / EFML_CONFIG, directory / EFML_TOKEN_EMBEDDER,
                      others=tuple(p for p in others if os.path.lexists(p)))


def _listing(directory: Path) -> List[Path]:
    """The entries of `directory` that are not directories, sorted (a FIFO or a device among them is
    refused when read); an unlistable directory says so (a glob would report it empty)."""
    try:
        return sorted(p for p in directory.iterdir() if not p.is_dir())
    except PermissionError:
        raise ElmoFileError(f"{directory}: permission denied: the directory cannot be listed") from None


def _stem(name: str, suffix: str) -> Optional[str]:
    """`<stem>` of a published file name `elmo_<stem><suffix>`, else None."""
    return name[len("elmo_"): -len(suffix)] if name.startswith("elmo_") and name.endswith(suffix) else None


def _looks_like_options(path: Path) -> bool:
    """Named like an options file, or a small JSON object with 'lstm' and 'char_cnn' sections (read where it is
    inside its directory)."""
    if fnmatch(path.name, "*options*.json"):
        return True
    inside_dir(path.parent, path.name, OPTIONS_FILE)
    try:
        opts = read_json(path)
    except ElmoFileError:
        return False
    return isinstance(opts, dict) and "lstm" in opts and "char_cnn" in opts


def _one(found: Sequence[Path], directory: Path, what: str) -> Optional[Path]:
    if len(found) > 1:
        raise ElmoFileError(f"{directory}: several {what} files ({', '.join(p.name for p in found)}), which is "
                              "ambiguous; pass an (options_file, weight_file) pair")
    return found[0] if found else None


def _inside(directory: Path, options: Path, weights: Path) -> Tuple[Path, Path]:
    return inside_dir(directory, options.name, OPTIONS_FILE), inside_dir(directory, weights.name, WEIGHT_FILE)


def resolve_hdf5_pair(directory: Path) -> Tuple[Path, Path]:
    """A directory of published (`elmo_<stem>_options.json`) or plain (`options.json`) files -> the pair.

    Exactly one file must look like an options file; published names must agree on their stem."""
    files = _listing(directory)
    jsons = [p for p in files if p.suffix == ".json"]
    options = _one([p for p in jsons if _looks_like_options(p)], directory, "options JSON")
    if options is None:
        looked = f" (looked at {', '.join(p.name for p in jsons)}: none has 'lstm' and 'char_cnn')" if jsons else ""
        raise ElmoFileError(f"{directory}: no options file found{looked}")
    stem = _stem(options.name, "_options.json")
    published = [p for p in files if fnmatch(p.name, "elmo_*_weights.hdf5")]
    if stem is not None and published:
        weights = next((p for p in published if _stem(p.name, "_weights.hdf5") == stem), None)
        if weights is None:
            raise ElmoFileError(f"{directory}: {options.name} has no elmo_{stem}_weights.hdf5 beside it, only "
                                  f"{', '.join(p.name for p in published)} (mismatched stems); "
                                  "pass an (options_file, weight_file) pair")
        return _inside(directory, options, weights)
    for pattern in ("elmo_*_weights.hdf5", "*weights*.hdf5", "*.hdf5"):
        weights = _one([p for p in files if fnmatch(p.name, pattern)], directory, "hdf5 weight")
        if weights is not None:
            return _inside(directory, options, weights)
    raise ElmoFileError(f"{directory}: no hdf5 weight file found (looked for *.hdf5)")


def locate(path: ModelPath, *, verify: bool = False) -> ModelFiles:
    """The files of `path`: a published model's name (`small`, ... in the cache, never downloaded here; never a
    directory of that name in the working directory: `./small` is one), a directory (this project's format, the
    output directory of `pretrain`, an ELMoForManyLangs model, or an options JSON + one `.hdf5`, published or
    plain names) or an `(options_file, weight_file)` pair. `verify`: check a cached model's files against the
    manifest's sha256. Raises ElmoFileError (missing, ambiguous, changed or outside files) or ElmoConfigError
    (not a path or a pair)."""
    if hub.is_published(path):
        directory = hub.model_dir(path)
        names = [f for f, _ in hub.published_files(path)]
        if not all(os.path.lexists(directory / f) for f in names):
            raise ElmoFileError(hub.missing_message(path, directory))
        verified = hub.verify(directory, path) if verify else True
        return ModelFiles("hdf5", directory / names[0], directory / names[1], published=path, verified=verified)
    if isinstance(path, (tuple, list)):
        if len(path) != 2:
            raise ElmoConfigError(f"pass (options_file, weight_file), got {len(path)} paths")
        return ModelFiles("hdf5", Path(path[0]), Path(path[1]))
    directory = Path(path)
    if not directory.exists():
        raise ElmoFileError(f"ELMo weights not found: {directory}")
    if not directory.is_dir():
        raise ElmoConfigError(f"{directory}: pass a directory or an (options_file, weight_file) pair")
    if os.path.lexists(directory / OWN_CONFIG):
        return _own(directory)
    if os.path.lexists(directory / PRETRAIN_MODEL / OWN_CONFIG):  # the output directory of `pretrain`
        return _own(inside_dir(directory, f"{PRETRAIN_MODEL}/{OWN_CONFIG}", "model config").parent)
    if any(os.path.lexists(directory / name) for name in EFML_MARKERS):  # missing ones: one error when read
        return _efml(directory)
    return ModelFiles("hdf5", *resolve_hdf5_pair(directory))
