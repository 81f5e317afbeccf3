"""Embed a file of sentences into hdf5 in the layout `allennlp elmo` wrote, streamed and resumable.

Output: one float32 dataset per input line, named `str(line_index)`, shaped
`(n_layers + 1, n_tokens, dim)` (or `(n_tokens, dim)` for one layer or a mix), and
`sentence_to_index`, a one-element string dataset holding JSON `{sentence text: "index"}`.

While it runs the file also holds `_sentences` (the text of each completed line) and the root
attribute `spacy_elmo.completed`, the number of lines whose datasets are on disk. The attribute
is written just before each flush, so a resumed run trusts exactly the lines of the last flush:
datasets beyond it are deleted and embedded again.
"""
from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from spacy.language import Language

from .bilm import BiLM

COMPLETED = "spacy_elmo.completed"
SETTINGS = "spacy_elmo.settings"
SENTENCES = "_sentences"
INDEX = "sentence_to_index"
LIBVER = ("v108", "latest")  # HDF5 1.8's file format or later (see `Output`)


def parse_layer(spec: str, num_output_layers: int) -> str | int:
    """`all`, `top`, `average` or a layer number `0 .. n_layers` (0: the token layer)."""
    if spec in ("all", "top", "average"):
        return spec
    if spec.isdigit() and int(spec) < num_output_layers:
        return int(spec)
    raise ValueError(f"--layer must be all, top, average or a number from 0 to {num_output_layers - 1}, got {spec!r}")


def select_layer(layers: np.ndarray, layer: str | int) -> np.ndarray:
    """`(n_layers + 1, n_tokens, dim)` -> itself (`all`) or `(n_tokens, dim)` (`top`, `average`, N)."""
    if layer == "all":
        return layers
    if layer == "average":
        return layers.mean(axis=0)
    return layers[-1 if layer == "top" else layer]


def count_lines(path: Path) -> int:
    """Lines of a text file (a last line without a newline counts), without decoding it."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def read_sentences(path: Path, nlp: Language | None = None, skip: int = 0) -> Iterator[tuple[str, list[str]]]:
    """`(text, tokens)` per line of a UTF-8 text file (stripped; tokenized by `nlp`'s tokenizer, or
    split on whitespace without one), or per Doc of a `.spacy` DocBin; lazily, after `skip` lines.
    Whitespace tokens are left out, as in the `elmo` component."""
    if path.suffix == ".spacy":
        from spacy.tokens import DocBin
        from spacy.vocab import Vocab

        docs = DocBin().from_disk(path).get_docs(nlp.vocab if nlp is not None else Vocab())
        for i, doc in enumerate(docs):
            if i >= skip:
                yield doc.text, [t.text for t in doc if not t.is_space]
        return
    with open(path, encoding="utf-8") as f:
        lines = (line.strip() for i, line in enumerate(f) if i >= skip)
        if nlp is None:
            for line in lines:
                yield line, line.split()
        else:
            for doc in nlp.tokenizer.pipe(lines, batch_size=1000):
                yield doc.text, [t.text for t in doc if not t.is_space]


class Output:
    """The hdf5 output file, closed and reopened at every flush: while a file stays open HDF5 keeps
    bookkeeping for every dataset written (a few hundred bytes each), which would grow without
    bound over a file of a million lines. Groups are written in the HDF5 1.8 format (`libver`), whose
    indexed link storage reads only the part of the root group's index it needs; the older format
    keeps all link names in one heap that is read whole and grows by doubling (RSS +45 MB over a
    million lines). Every h5py reads both."""

    def __init__(self, path: Path, mode: str):
        self.path = path
        self.h5 = h5py.File(path, mode, libver=LIBVER)

    def reopen(self) -> None:
        self.h5.close()
        self.h5 = h5py.File(self.path, "r+", libver=LIBVER)

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc) -> None:
        self.h5.close()


def open_output(path: Path, settings: dict[str, Any], resume: bool) -> tuple[Output, int]:
    """The output file, new or (`resume`) opened at its first incomplete line; `(file, lines done)`.

    Raises FileExistsError for an existing file without `resume`, ValueError for a file this
    command did not start or started with other `settings`."""
    if not path.exists():
        out = Output(path, "w")
        f = out.h5
        f.attrs[SETTINGS] = json.dumps(settings, sort_keys=True)
        f.attrs[COMPLETED] = 0
        f.create_dataset(SENTENCES, shape=(0,), maxshape=(None,), dtype=h5py.string_dtype(), chunks=(4096,))
        return out, 0
    if not resume:
        raise FileExistsError(f"{path} exists: pass --resume to continue it, or remove it")
    try:
        out = Output(path, "r+")
    except OSError as err:
        raise ValueError(f"{path}: cannot be opened to resume ({err}); remove it and start again") from None
    f = out.h5
    if COMPLETED not in f.attrs:
        f.close()
        raise ValueError(f"{path}: not an output of `python -m spacy_elmo embed` that can be resumed")
    started = json.loads(f.attrs[SETTINGS])
    if started != settings:
        f.close()
        changed = ", ".join(f"{k}: {started.get(k)!r} then, {v!r} now" for k, v in settings.items()
                            if started.get(k) != v)
        raise ValueError(f"{path} was started with other settings ({changed}); remove it or resume with the same ones")
    done = int(f.attrs[COMPLETED])
    if INDEX not in f:
        for key in [k for k in f if k.isdigit() and int(k) >= done]:
            del f[key]
        f[SENTENCES].resize((done,))
    return out, done


def write_embeddings(out: Output, bilm: BiLM, sentences: Iterable[tuple[str, list[str]]], *, start: int = 0,
                     layer: str | int = "all", batch_size: int = 64, flush_every: int = 10_000,
                     on_line: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Embed `(text, tokens)` pairs and write datasets `start`, `start + 1`, ... as they come, then
    `sentence_to_index`. Returns `(lines, tokens)` written by this call; `on_line(n_tokens)` is
    called after each line.

    Each run of `flush_every` lines goes through its own `bilm.embed_iter`, from an empty token
    cache, and is flushed at its end: a resumed run (which starts at a flush) then computes every
    line exactly as an uninterrupted one does, to the bit (a cached token layer carries the
    rounding of the batch it was first computed in).
    """
    it = iter(sentences)
    index, tokens = start, 0
    while True:
        chunk = list(islice(it, flush_every))
        if not chunk:
            break
        bilm.token_cache.clear()
        for (_, toks), layers in zip(chunk, bilm.embed_iter((toks for _, toks in chunk), batch_size=batch_size)):
            out.h5.create_dataset(str(index), data=select_layer(layers, layer))
            index += 1
            tokens += len(toks)
            if on_line is not None:
                on_line(len(toks))
        _flush(out.h5, [text for text, _ in chunk], index)
        out.reopen()
        trim_heap()
    _write_index(out.h5)
    return index - start, tokens


def bound_kernel_cache(capacity: int = 16) -> None:
    """Keep at most `capacity` oneDNN kernels (default 1024), unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    says otherwise. oneDNN keeps one per convolution shape, and a long file brings ever new shapes
    (words per encoder call, longest word): a full cache holds some 100 MB. oneDNN reads the setting
    when it makes its first kernel, so call this before the biLM runs."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc's malloc_trim; a no-op elsewhere): tensors of
    ever-changing shapes otherwise leave the heap fragmented, and RSS creeps up over a long file."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _flush(f: h5py.File, texts: list[str], done: int) -> None:
    """Append the texts of the lines just written, record `done` lines as complete, flush to disk."""
    ds = f[SENTENCES]
    ds.resize((done,))
    ds[done - len(texts) :] = texts
    f.attrs[COMPLETED] = done
    f.flush()


def _write_index(f: h5py.File) -> None:
    """`sentence_to_index` from `_sentences` (a repeated sentence maps to its last line, as in AllenNLP).

    The JSON is written pair by pair in line order, without building a dict: a repeated sentence
    appears once per line and a JSON reader keeps its last value (Python's `json` and AllenNLP's
    reader do). `json.dumps` escapes non-ASCII characters, so the JSON is ASCII: it is built once as
    bytes and written from that buffer as one fixed-length string (`f[INDEX][0]` reads it as bytes,
    as it does a variable-length one), so memory peaks at the JSON's size; a variable-length
    string would be copied twice more on the way."""
    ds = f[SENTENCES]
    text = bytearray(b"{")
    for begin in range(0, len(ds), 65536):
        if begin:
            text += b", "
        sentences = ds.asstr()[begin : begin + 65536]
        text += ", ".join(f'{json.dumps(s)}: "{i}"' for i, s in enumerate(sentences, begin)).encode("ascii")
    text += b"}"
    buffer = np.frombuffer(text, dtype=f"S{len(text)}")  # a view: no copy
    f.create_dataset(INDEX, (1,), dtype=buffer.dtype).write_direct(buffer)
    del f[SENTENCES]
    f.flush()
