"""What the tests share: paths and data, a load that must be refused, the memory a call leaves
held, the project's configs resized for the fixture biLM, CoNLL-U sentences, Docs carrying random
layers, tiny pretraining corpora and configs and quiet training, and the command line run in-process
or as a child."""

from __future__ import annotations

import errno
import gc
import json
import os
import random
import subprocess
import tracemalloc
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import h5py
import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from spacy_elmo import ElmoFileError, load_bilm
from spacy_elmo.cli import main
from spacy_elmo.doc_data import ElmoDocData, token_spans
from spacy_elmo.extensions import install_extensions
from spacy_elmo.pretrain import load_config, train

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("SPACY_ELMO_DATA", REPO.parent / "shared" / "data"))
CONFIGS = REPO / "project" / "configs"
# The AllenNLP fixture biLM: 2 LSTM layers of projection 16 -> 3 output layers of width 32.
FIXTURE_LAYERS, FIXTURE_WIDTH = 3, 32
# Float32 results differ by CPU, BLAS kernel (MKL, oneDNN, AMX) and thread count. The worst float32
# difference seen from the TensorFlow fixture is 1.19e-6 (an Intel Xeon with AMX;
# MKL_CBWR=COMPATIBLE with 1 thread on AMD), and two float32 runs that batch differently stay
# closer. Float32 comparisons allow 10x the worst seen; exactness of the algorithm (regrouping,
# caches, the packed path) is checked in float64, where rounding is ~1e-16 per step.
FLOAT32_ATOL = 1.2e-5
FLOAT64_ATOL = 1e-10
from project.scripts.corpora import read_conllu  # noqa: E402,F401 (the project's CoNLL-U reader)


# ----------------------------------------------------------------------------------------------
# data
def data_path(*parts: str) -> Path:
    """A path under the shared data directory, or a skip naming what is missing (a failure where
    SPACY_ELMO_REQUIRE_DATA=1, as in CI, which always has the data)."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        message = f"shared data not found: {path} (set SPACY_ELMO_DATA to the data directory)"
        if os.environ.get("SPACY_ELMO_REQUIRE_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def refused(path, *fragments) -> str:
    """`load_bilm(path)` raises one ElmoFileError: one line, holding every fragment -> the line."""
    with pytest.raises(ElmoFileError) as err:
        load_bilm(path)
    message = str(err.value)
    assert "\n" not in message and all(f in message for f in fragments), message
    return message


def held_after(run) -> int:
    """Bytes that Python objects made while `run()` ran still hold after it returned (what it
    returns dropped)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------------ spaCy configs
def tagged_examples(nlp, sentences) -> List[Example]:
    """Examples whose predicted Docs have no sentence boundaries (as `spacy train` makes them)."""
    return [Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, tags=t)) for w, t in sentences]


def fixture_config(name: str, fixture_dir: Path, **overrides) -> Config:
    """A shipped config from project/configs, resized for the fixture biLM."""
    config = Config().from_disk(CONFIGS / name, interpolate=False)
    config["paths"]["elmo"] = str(fixture_dir)
    config["system"]["gpu_allocator"] = None
    if "elmo" in config["components"]:
        config["components"]["tok2vec"]["model"]["embed"]["elmo"]["width"] = FIXTURE_WIDTH
    for dotted, value in overrides.items():
        *path, key = dotted.split(".")
        node = config
        for part in path:
            node = node[part]
        node[key] = value
    return config


# ---------------------------------------------------------------------------------- thinc layers
N_LAYERS, WIDTH = 3, 8


def docs_with_layers(lengths, seed=0, dtype=np.float32) -> List[Doc]:
    """One Doc of each length, with random biLM layers `(N_LAYERS, length, WIDTH)` and no mix."""
    install_extensions()
    rng = np.random.default_rng(seed)
    nlp = spacy.blank("en")
    docs = []
    for n in lengths:
        doc = Doc(nlp.vocab, words=["w%d" % i for i in range(n)])
        doc._.elmo_data = ElmoDocData(
            layers=rng.normal(size=(N_LAYERS, n, WIDTH)).astype(dtype),
            mixed=None,
            mix_weights=np.full(N_LAYERS, 1 / N_LAYERS, dtype="f"),
            spans=token_spans(doc),
        )
        docs.append(doc)
    return docs


def mix_layer(model):
    """The first `elmo_mix` node of `model`."""
    return next(node for node in model.walk() if node.name == "elmo_mix")


# ------------------------------------------------------------------------------------- pretraining
SUBJECTS = [
    "the cat",
    "a dog",
    "the old man",
    "my sister",
    "the company",
    "a small bird",
    "John",
    "the teacher",
]
VERBS = ["saw", "liked", "found", "sold", "painted", "followed", "visited", "ignored"]
OBJECTS = [
    "the house",
    "a red car",
    "the river",
    "two books",
    "the market",
    "an apple",
    "the garden",
    "her friend",
]
ENDINGS = [".", "yesterday .", "on Monday .", "again .", "in the morning .", "!"]


def toy_sentences(n: int, seed: int = 0) -> List[str]:
    """`n` sentences of a small grammar: structured enough for an LM to learn quickly."""
    rng = random.Random(seed)
    return [
        " ".join(
            [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(ENDINGS)]
        )
        for _ in range(n)
    ]


def write_corpus(path: Path, lines: List[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


TINY = {
    "corpus.tokenizer": "whitespace",
    "vocab.size": None,
    "model.char_dim": 4,
    "model.filters": [[1, 8], [2, 8], [3, 16]],
    "model.n_highway": 1,
    "model.projection_dim": 16,
    "model.lstm_dim": 32,
    "model.n_layers": 2,
    "softmax.type": "full",
    "training.batch_tokens": 80,
    "training.window": 10,
    "training.max_epochs": None,
    "training.max_steps": 20,
    "training.optimizer": "adam",
    "training.learning_rate": 0.01,
    "training.dropout": 0.0,
    "training.eval_every": None,
    "training.checkpoint_every": 1000,
    "training.eval_batch_size": 16,
}


def tiny_values(train: Path, dev: Path, model: bool, overrides: Dict[str, Any]) -> Dict[str, Any]:
    """TINY with the corpus and `overrides` (`section__key` names); `model=False`: without its
    `model.*` sizes (a run `--init-from` a model keeps the model's)."""
    values: Dict[str, Any] = {
        **{k: v for k, v in TINY.items() if model or not k.startswith("model.")},
        "paths.train": str(train),
        "paths.dev": str(dev) if dev else None,
    }
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return values


def tiny_config(train: Path, dev: Path = None, *, model: bool = True, **overrides: Any):
    """The built-in config with tiny sizes (see `tiny_values`)."""
    return load_config(None, tiny_values(train, dev, model, overrides))


def override_args(train: Path, dev: Path = None, *, model: bool = True, **overrides: Any):
    """The same tiny config as CLI arguments (`--section.key value`) -> a list of strings."""
    args: List[str] = []
    for key, value in tiny_values(train, dev, model, overrides).items():
        args += [f"--{key}", json.dumps(value) if not isinstance(value, str) else value]
    return args


def quiet_train(config, out, **kwargs):
    """`train` with no progress bar, no log and no warning that bfloat16 runs as float32 on a CPU
    without it -> its summary."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "precision 'bfloat16'", RuntimeWarning)
        return train(config, out, progress_bar=False, log=lambda m: None, **kwargs)


def pretrained_with_unk(directory: Path, unk_token: str) -> Path:
    """A tiny biLM pretrained (2 steps, spaCy's tokenizer) on text holding `unk_token`, its
    `corpus.unk_token` -> its model directory."""
    corpus = write_corpus(
        directory / "train.txt", [f"{s} ({unk_token})" for s in toy_sentences(50)]
    )
    config = tiny_config(
        corpus, None, corpus__tokenizer="spacy", corpus__unk_token=unk_token, training__max_steps=2
    )
    quiet_train(config, directory / "out")
    return directory / "out" / "model"


# ------------------------------------------------------------------------------------- command line
SENTS = [["The", "cat", "sat", "."], ["Hello"], ["a", "b", "c", "d", "e", "f"]]
LINES = [
    "The cat sat on the mat .",
    "",
    "Hello world",
    "The cat sat on the mat .",
    "a b c d e f g h i j k l",
]
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", ".", "über", "x1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def run_cli(*args) -> int:
    """`python -m spacy_elmo ARGS` in this process -> its exit code. A command's `--threads` sets
    the process's torch threads (its own process ends after it): the count before is restored, so
    that later tests, and the runs they record (`embed --resume` checks threads), do not take it."""
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as exit_info:
            main([str(a) for a in args])
    finally:
        torch.set_num_threads(threads)
    return exit_info.value.code


def run_pretrain(args, capsys, stream="err"):
    """`python -m spacy_elmo pretrain ARGS` in this process (see `run_cli`) -> (exit code, stderr
    or stdout)."""
    code = run_cli("pretrain", *args)
    return code, getattr(capsys.readouterr(), stream)


def write_lines(path, lines):
    """`lines`, each ended by a newline, into `path` (UTF-8)."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_output(path):
    """An `embed` output file -> `({name: array}, sentence_to_index, attributes)`."""
    with h5py.File(path, "r") as f:
        arrays = {k: f[k][...] for k in f if k != "sentence_to_index"}
        return arrays, json.loads(f["sentence_to_index"][0]), dict(f.attrs)


def generated(path: Path, n: int, seed: int = 0) -> Path:
    """`n` lines of 0 to 11 random WORDS into `path`."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(" ".join(rng.choice(WORDS, size=rng.integers(0, 12))) + "\n")
    return path


def one_error_line(err: str) -> str:
    """The one `error: ...` line of `err`; fails the test if there is any other line or a
    traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of `size` mounted at `path` (root, as in CI); skips where mounting is not allowed."""
    path.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            check=False,
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs is not allowed here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class _FullDisk:
    """A file object that takes `room` more bytes, then raises ENOSPC."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def write(self, data):
        if len(data) > self.room:
            self.file.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


def full_disk_in_torch_save(monkeypatch, name: str, number: int = 1, room: int = 100) -> None:
    """The `number`-th `torch.save` to a file whose name holds `name` meets a full disk after `room`
    bytes: torch raises its RuntimeError from the OSError, as on a real full disk."""
    real, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        if name in str(getattr(f, "name", f)):
            calls.append(f)
            if len(calls) == number:
                if isinstance(f, (str, Path)):
                    with open(f, "wb") as file:
                        return real(obj, _FullDisk(file, room), *args, **kwargs)
                return real(obj, _FullDisk(f, room), *args, **kwargs)
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def kill_at_rename(name: str) -> str:
    """A script running the CLI that kills itself (SIGKILL) when it renames a file to `name`."""
    return f"""
import os, signal, sys
real = os.replace
def replace(src, dst, *a, **k):
    if str(dst).endswith({name!r}):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
from spacy_elmo.cli import main
main(sys.argv[1:])
"""


def interrupt_embed_at_line(monkeypatch, line: int) -> None:
    """Ctrl-C (KeyboardInterrupt) while `embed` makes the dataset of its `line`-th line (counted
    from 1)."""
    from spacy_elmo.embed import compute

    real, calls = compute.select_layer, []

    def interrupted(layers, layer):
        calls.append(1)
        if len(calls) == line:
            raise KeyboardInterrupt
        return real(layers, layer)

    monkeypatch.setattr(compute, "select_layer", interrupted)


def iter_hdf5_datasets(path: Path) -> Iterator[Tuple[str, np.ndarray]]:
    """Every dataset of an hdf5 file as `(name, array)`, by name."""
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(
            lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None
        )
        for name in sorted(names):
            yield name, f[name][...]
