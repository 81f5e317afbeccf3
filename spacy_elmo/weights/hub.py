"""The published AllenNLP models by name: their sizes, where they live in the cache and whether
they are intact.

A model `NAME` lives in `$SPACY_ELMO_CACHE/NAME/` (default `~/.cache/spacy_elmo/NAME/`) under its
published file names, with `manifest.json` recording each file's size and sha256. No official
checksums exist, so a file is trusted on first use (when a download completes, or the first time
files placed by hand load) and verified on every later use. Nothing here touches the network
(`spacy_elmo.weights.download` does).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Union
from urllib.parse import urlsplit

from ..errors import ElmoConfigError, ElmoFileError
from ..files import (
    RECORD_BYTES,
    read_regular,
    regular_file,
    sha256_file,
    write_atomic,
    write_error,
)

PUBLISHED = {
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original-5.5b": "2x4096_512_2048cnn_2xhighway_5.5B",
}
BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
MANIFEST = "manifest.json"
# What a download may receive of each published file, at most. No official sizes exist; the options
# JSON files are under 1 KB, and a weights file holds the float32 parameters of its architecture
# (DESIGN.md, counted by `tests/weights/test_download.py` from `BiLM`: 13.6M small, 28.0M medium,
# 93.6M original and original-5.5b, which share the architecture) plus the hdf5 structure of some 30
# datasets, well under 1 MB: bound by 5% more + 1 MB.
OPTIONS_MAX_BYTES = 64 << 10
PARAMETERS = {
    "small": 13_593_296,
    "medium": 28_027_728,
    "original": 93_600_848,
    "original-5.5b": 93_600_848,
}


# The published models' sizes (DESIGN.md): LSTM cell, projection, highway layers; all share the char
# CNN. original-5.5b has original's.
SIZES = {"small": (1024, 128, 1), "medium": (2048, 256, 1), "original": (4096, 512, 2)}
FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
# What `check_architecture` compares: BiLMOptions attribute -> its name in a message
ARCHITECTURE = {
    "lstm_dim": "LSTM dim",
    "projection_dim": "projection dim",
    "n_layers": "LSTM layers",
    "n_highway": "highway layers",
    "char_dim": "char embedding dim",
    "filters": "char CNN filters",
}


def published_options(size: str) -> Dict[str, Any]:
    """The bilm-tf options of the published model `size` (small, medium or original)."""
    if size not in SIZES:
        raise ElmoConfigError(f"--size must be one of {', '.join(SIZES)}, got {size!r}")
    dim, projection, highways = SIZES[size]
    return {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": projection,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": dim,
            "n_layers": 2,
        },
        "char_cnn": {
            "activation": "relu",
            "filters": FILTERS,
            "n_highway": highways,
            "embedding": {"dim": 16},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }


def check_architecture(name: str, options: Any, path: Union[str, Path], note: str = "") -> None:
    """ElmoFileError naming `path` (and adding `note`) where `options` (BiLMOptions) do not have the
    sizes of the published model `name`: what they hold and what `name` has."""
    dim, projection, highways = SIZES["original" if name == "original-5.5b" else check_name(name)]
    published = {
        "lstm_dim": dim,
        "projection_dim": projection,
        "n_layers": 2,
        "n_highway": highways,
        "char_dim": 16,
        "filters": [list(f) for f in FILTERS],
    }
    held = {k: getattr(options, k) for k in ARCHITECTURE}
    held["filters"] = [list(f) for f in held["filters"]]
    wrong = [
        f"{ARCHITECTURE[k]} {held[k]}, '{name}' has {published[k]}"
        for k in ARCHITECTURE
        if held[k] != published[k]
    ]
    if wrong:
        raise ElmoFileError(
            f"{path}: not the published model '{name}', whose sizes differ: {'; '.join(wrong)}"
            f"{note}"
        )


def is_published(name: object) -> bool:
    return isinstance(name, str) and name in PUBLISHED


def check_name(name: str) -> str:
    if not is_published(name):
        raise ElmoConfigError(
            f"unknown model name {name!r}; the published models are {', '.join(PUBLISHED)}"
        )
    return name


def max_bytes(name: str) -> tuple[int, int]:
    """The most bytes the options JSON and the weights file of the published model `name` may
    hold."""
    return OPTIONS_MAX_BYTES, int(4 * PARAMETERS[check_name(name)] * 1.05) + (1 << 20)


def cache_setting() -> str:
    """Which setting places the cache, as `NAME=value`: `SPACY_ELMO_CACHE`, else `HOME`. An empty or
    unset HOME is refused (ElmoConfigError) rather than taken as `/`."""
    if os.environ.get("SPACY_ELMO_CACHE"):
        return f"SPACY_ELMO_CACHE={os.environ['SPACY_ELMO_CACHE']}"
    if not os.environ.get("HOME"):
        raise ElmoConfigError(
            "no cache directory for the published ELMo models: HOME is "
            f"{'empty' if 'HOME' in os.environ else 'not set'} and SPACY_ELMO_CACHE is not set; "
            "set SPACY_ELMO_CACHE to a directory (e.g. SPACY_ELMO_CACHE=/path/to/elmo_cache)"
        )
    return f"HOME={os.environ['HOME']}"


def cache_dir() -> Path:
    """`$SPACY_ELMO_CACHE`, else `$HOME/.cache/spacy_elmo`. Raises ElmoConfigError naming the
    setting where the place cannot be a directory (a file, `/dev/null`) or neither is set (see
    `cache_setting`)."""
    setting = cache_setting()
    name, value = setting.split("=", 1)
    path = Path(value) if name == "SPACY_ELMO_CACHE" else Path(value) / ".cache" / "spacy_elmo"
    for place in (path, *path.parents):  # the nearest that exists must be a directory
        if os.path.lexists(place):
            if not place.is_dir():
                raise ElmoConfigError(
                    f"{setting}: {place} is not a directory, so the cache of the published ELMo "
                    f"models ({path}) cannot be there; set SPACY_ELMO_CACHE to a directory"
                )
            break
    return path


def model_dir(name: str, cache: Optional[Union[str, Path]] = None) -> Path:
    return Path(cache or cache_dir()) / check_name(name)


def make_model_dir(name: str, cache: Optional[Union[str, Path]] = None) -> Path:
    """`model_dir`, created: ElmoConfigError naming the setting (or `cache`) where that fails."""
    directory = model_dir(name, cache)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        where = f"cache {cache}" if cache else cache_setting()
        raise ElmoConfigError(
            f"{where}: cannot create the cache directory {directory} ({err.strerror or err}); "
            "set SPACY_ELMO_CACHE to a writable directory"
        ) from None
    return directory


def base_url() -> str:
    """`$SPACY_ELMO_BASE_URL` (a mirror, or a local server in tests), else AllenNLP's bucket."""
    return (os.environ.get("SPACY_ELMO_BASE_URL") or BASE_URL).rstrip("/")


def published_files(name: str, base: Optional[str] = None) -> list[tuple[str, str]]:
    """`[(file_name, url)]` of the options JSON and the hdf5 weights of a published model;
    ElmoConfigError for a base that is not an http(s) or file URL."""
    stem = PUBLISHED[check_name(name)]
    base = (base or base_url()).rstrip("/")
    if urlsplit(base).scheme not in ("http", "https", "file"):
        raise ElmoConfigError(
            f"the models' base URL {base!r} (SPACY_ELMO_BASE_URL) must start with https://, "
            "http:// or file://"
        )
    names = [f"elmo_{stem}_options.json", f"elmo_{stem}_weights.hdf5"]
    return [(n, f"{base}/{stem}/{n}") for n in names]


def read_manifest(directory: Path) -> dict[str, dict]:
    """`{file_name: {"bytes": int, "sha256": str, "source": str}}`, empty when there is none."""
    path = directory / MANIFEST
    if not os.path.lexists(path):
        return {}
    data = read_regular(path, "model cache manifest", RECORD_BYTES)
    try:
        files = json.loads(data.decode("utf-8"))["files"]
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise ElmoFileError(
            f"{path}: unreadable manifest ({err}); delete it to record the files again"
        ) from None
    if not isinstance(files, dict) or not all(
        isinstance(e, dict) and type(e.get("bytes")) is int and isinstance(e.get("sha256"), str)
        for e in files.values()
    ):
        raise ElmoFileError(
            f"{path}: unreadable manifest (each file needs an integer 'bytes' and a 'sha256'); "
            "delete it to record the files again"
        )
    return files


def write_manifest(directory: Path, name: str, files: dict[str, dict]) -> None:
    write_atomic(directory / MANIFEST, json.dumps({"name": name, "files": files}, indent=2))


def record(directory: Path, name: str, sources: dict[str, str]) -> dict[str, dict]:
    """Hash the files `sources` names (`{file_name: where it came from}`) and write the manifest."""
    files = {
        f: {
            "bytes": (directory / f).stat().st_size,
            "sha256": sha256_file(directory / f),
            "source": src,
        }
        for f, src in sources.items()
    }
    write_manifest(directory, name, files)
    return files


def record_by_hand(directory: Path, name: str, stacklevel: int = 3) -> None:
    """Record the published model `name`'s files placed by hand in `directory` in the manifest;
    where it cannot be written (a read-only cache), a warning: the model loads."""
    try:
        record(directory, name, {f: "placed by hand" for f, _ in published_files(name)})
    except OSError as err:
        warnings.warn(
            f"{write_error(err, directory / MANIFEST)}: model '{name}' loads, but its files "
            "placed by hand are not recorded, so they are not checked against checksums later",
            stacklevel=stacklevel,
        )


def missing_message(name: str, directory: Path) -> str:
    files = published_files(name)
    return (
        f"ELMo model '{name}' is not in the cache {directory} ({cache_setting()}): run "
        f"`python -m spacy_elmo download {name}`, "
        f"or place {' and '.join(f for f, _ in files)} there by hand (from "
        f"{' and '.join(u for _, u in files)})"
    )


def verify(directory: Path, name: str) -> bool:
    """Check the files of `name` in `directory` against the manifest. Returns False where there is
    no manifest yet (files placed by hand); raises ElmoFileError naming a file that changed."""
    recorded = read_manifest(directory)
    if not recorded:
        return False
    for file_name, _ in published_files(name):
        entry = recorded.get(file_name)
        path = directory / file_name
        if entry is None:
            raise ElmoFileError(
                f"{path}: not in {directory / MANIFEST}; delete the manifest to record the files "
                f"again"
            )
        if (
            regular_file(path, "cached model file").st_size != entry["bytes"]
            or sha256_file(path) != entry["sha256"]
        ):
            raise ElmoFileError(
                f"{path}: sha256 differs from the one recorded when it was stored "
                f"({entry['sha256']}): the file is "
                f"corrupt or was replaced. Delete it and run `python -m spacy_elmo download "
                f"{name}` again"
            )
    return True
