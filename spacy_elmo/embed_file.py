"""Embed a file of sentences into hdf5 in the layout `allennlp elmo` wrote: streamed, crash-safe,
resumable, optionally in shards.

The input is read and embedded in blocks of `flush_every` lines; each block starts from an empty
token cache, so a line's arrays depend only on its block (a cached token layer carries the rounding
of the batch it was first computed in): a resumed run, a shard and an uninterrupted run compute
every line alike, to the bit. The files are written by `embed_output`: pieces that become visible
only when complete (a part per block beside a single output, assembled at the end; or the shards of
a sharded output), with a manifest recording the input's sha256 and every setting.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from spacy.language import Language

from .bilm import BiLM, load_bilm
from .embed_output import (
    FORMAT,
    LOCK,
    MANIFEST,
    SETTINGS,
    TMP,
    WorkDir,
    assemble,
    check_settings,
    fsync_dir,
    plan,
    take_lock,
    write_error,
    write_piece,
)
from .errors import ElmoFileError

DTYPES = ("float32", "float16")
COMPRESSIONS = ("none", "gzip", "lzf")


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


def _bad_utf8(path: Path, line: int, offset: int, err: UnicodeDecodeError) -> ElmoFileError:
    return ElmoFileError(f"{path}: invalid UTF-8 on line {line}, byte {offset} of the file ({err.reason}): "
                         "convert it to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)")


def scan_input(path: Path) -> dict[str, Any]:
    """`input` (resolved path), `input_bytes`, `input_sha256` and `lines` of an input, in one pass.

    Lines are counted as `wc -l` does (only \\n ends one; a last line without it counts too). Text
    is checked to be UTF-8 here, before any work: ElmoFileError names the line and byte offset."""
    digest, size, lines, last = hashlib.sha256(), 0, 0, b"\n"
    rest, rest_at = b"", 0  # the bytes after the last \n so far, and their offset in the file
    docbin = path.suffix == ".spacy"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
            last = block[-1:]
            if docbin:
                continue
            buf = rest + block
            cut = buf.rfind(b"\n") + 1
            _check_utf8(path, buf[:cut], rest_at, lines)
            lines += buf.count(b"\n", 0, cut)
            rest, rest_at = buf[cut:], rest_at + cut
    if docbin:
        from spacy.tokens import DocBin

        lines = len(DocBin().from_disk(path))
    else:
        _check_utf8(path, rest, rest_at, lines)
        lines += last != b"\n"
    return {"input": str(path.resolve()), "input_bytes": size, "input_sha256": digest.hexdigest(), "lines": lines}


def _check_utf8(path: Path, chunk: bytes, at: int, lines_before: int) -> None:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _bad_utf8(path, lines_before + chunk.count(b"\n", 0, err.start) + 1, at + err.start, err) from None


def read_sentences(path: Path, nlp: Language | None = None, skip: int = 0) -> Iterator[tuple[str, list[str]]]:
    """`(text, tokens)` per line of a UTF-8 text file (stripped; tokenized by `nlp`'s tokenizer, or
    split on whitespace without one), or per Doc of a `.spacy` DocBin; lazily, after `skip` lines.
    Only \\n ends a line (as `wc -l` counts): a \\r, U+2028 or NUL inside a line stays in its text.
    Whitespace tokens are left out, as in the `elmo` component."""
    if path.suffix == ".spacy":
        from spacy.tokens import DocBin
        from spacy.vocab import Vocab

        docs = DocBin().from_disk(path).get_docs(nlp.vocab if nlp is not None else Vocab())
        for i, doc in enumerate(docs):
            if i >= skip:
                yield doc.text, [t.text for t in doc if not t.is_space]
        return
    lines = (text.strip() for text in _decoded_lines(path, skip))
    if nlp is None:
        for line in lines:
            yield line, line.split()
    else:
        for doc in nlp.tokenizer.pipe(lines, batch_size=1000):
            yield doc.text, [t.text for t in doc if not t.is_space]


def _decoded_lines(path: Path, skip: int) -> Iterator[str]:
    offset = 0
    with open(path, "rb") as f:  # binary: iteration splits on b"\n" only
        for number, raw in enumerate(f, 1):
            if number > skip:
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise _bad_utf8(path, number, offset + err.start, err) from None
            offset += len(raw)


def embed_blocks(bilm: BiLM, sentences: Iterable[tuple[str, list[str]]], *, block: int, layer: str | int = "all",
                 batch_size: int = 64, dtype: str = "float32",
                 on_line: Callable[[int], None] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """`(text, array)` per `(text, tokens)`: the chosen layers `(n_layers + 1, n_tokens, dim)` or
    `(n_tokens, dim)` as `dtype`. Every `block` lines start again from an empty token cache."""
    it = iter(sentences)
    while chunk := list(islice(it, block)):
        bilm.token_cache.clear()
        for (text, toks), layers in zip(chunk, bilm.embed_iter((toks for _, toks in chunk), batch_size=batch_size)):
            yield text, select_layer(layers, layer).astype(dtype, copy=False)
            if on_line is not None:
                on_line(len(toks))
        trim_heap()


@dataclass
class Job:
    """What to embed and how: the input, its tokenizer, every setting that shapes the output."""

    input_path: Path
    output: Path
    settings: dict[str, Any]  # scan_input's keys + weights, state, layer, batch_size, flush_every, tokenizer, ...
    nlp: Language | None = None
    layer: str | int = "all"
    shards: int | None = None
    on_line: Callable[[int], None] | None = None
    lines_done: int = 0  # lines found complete when the run started
    lines_run: int = 0  # lines embedded by this run

    @property
    def block(self) -> int:
        return self.settings["flush_every"]


def new_job(input_path: Path, output: Path, weights: str, *, lang: str = "en", whitespace: bool = False,
            layer: str = "all", batch_size: int = 64, state: str | None = None, dtype: str = "float32",
            compression: str = "none", flush_every: int = 10_000, shards: int | None = None,
            resume: bool = False) -> tuple[BiLM, Job]:
    """Check the arguments of a run, load the biLM and scan the input: the biLM and the Job, whose
    settings are recorded with the output (and must match when a run continues)."""
    import spacy

    if not input_path.is_file():
        raise FileNotFoundError(f"input not found: {input_path}")
    if dtype not in DTYPES or compression not in COMPRESSIONS:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)} and --compression one of "
                         f"{', '.join(COMPRESSIONS)}, got {dtype!r} and {compression!r}")
    bilm = load_bilm(weights, state=state)
    chosen = parse_layer(layer, bilm.num_output_layers)
    if (resume or shards) and bilm.state_policy == "carry":
        raise ValueError(f"{'--shards' if shards else '--resume'} needs a deterministic state policy (warm or "
                         "zero): under carry a line's vectors depend on every line before it")
    docbin = input_path.suffix == ".spacy"
    try:
        nlp = None if whitespace and not docbin else spacy.blank(lang)
    except ImportError as err:
        raise ValueError(f"--lang {lang}: not a language spaCy knows ({err})") from None
    settings = {**scan_input(input_path), "weights": bilm.fingerprint(), "state": bilm.state_policy,
                "layer": layer, "batch_size": batch_size, "flush_every": flush_every, "dtype": dtype,
                "compression": compression, "shards": shards,
                "tokenizer": "docbin" if docbin else "whitespace" if whitespace else f"spacy:{lang}"}
    return bilm, Job(input_path, output, settings, nlp=nlp, layer=chosen, shards=shards)


def write_range(bilm: BiLM, job: Job, work: WorkDir, i: int, start: int, stop: int,
                sentences: Iterable[tuple[str, list[str]]] | None = None) -> None:
    """Embed input lines `start:stop` into piece `i` of `work`, a whole file renamed into place when
    complete. `sentences` continues a reader already at line `start`;
    without it the input is opened here: a worker (a process, a Ray actor) writes a shard with this
    one call."""
    if sentences is None:
        sentences = read_sentences(job.input_path, job.nlp, skip=start)
    lines = embed_blocks(bilm, islice(sentences, stop - start), block=job.block, layer=job.layer,
                         batch_size=job.settings["batch_size"], dtype=job.settings["dtype"], on_line=job.on_line)
    compression = None if job.settings["compression"] == "none" else job.settings["compression"]
    path = work.piece(i)
    try:
        write_piece(path, start, stop - start, lines, job.settings, compression=compression, reopen_every=job.block)
    except OSError as err:
        raise write_error(err, path) from None
    job.lines_run += stop - start


def _manifest(job: Job, kind: str, ranges: list[tuple[int, int]]) -> dict[str, Any]:
    return {"format": FORMAT, "output": kind, "settings": job.settings, "ranges": [list(r) for r in ranges]}


def _new_dir(path: Path, exist_ok: bool = False) -> None:
    try:
        path.mkdir(exist_ok=exist_ok)
        fsync_dir(path.parent)
    except FileExistsError:
        raise ElmoFileError(f"{path} appeared meanwhile: another process is writing it") from None
    except OSError as err:
        raise write_error(err, path) from None


def embed_single(bilm: BiLM, job: Job, resume: bool) -> bool:
    """Write `job.output` as one file through parts in `OUTPUT.partial/`. Returns False where the
    output was complete already. A kill at any moment loses at most the part being written:
    `resume` keeps the complete parts, redoes the others and assembles again."""
    out, partial = job.output, job.output.with_name(job.output.name + ".partial")
    work = WorkDir(partial, out, "part")
    if out.exists():
        if not resume:
            raise ElmoFileError(f"{out} exists: pass --resume to continue it, or remove it")
        check_settings(out, _file_settings(out), job.settings)
        if partial.exists():  # killed while removing it, after OUTPUT was complete
            work.lock()
            _remove_dir(partial)
            work.unlock()
        job.lines_done = job.settings["lines"]
        return False
    if partial.exists() and not resume:
        raise ElmoFileError(f"{out}: an interrupted run is in {partial}: pass --resume to continue it")
    try:
        if not partial.exists():
            _new_dir(partial)
        work.lock()
        if (partial / MANIFEST).is_file():
            manifest = work.manifest()
            check_settings(out, manifest["settings"], job.settings)
            ranges = [tuple(r) for r in manifest["ranges"]]
        else:  # new, or killed before its manifest was written
            ranges = plan(job.settings["lines"], job.block, None)
            work.write_manifest(_manifest(job, "file", ranges))
        _run_pieces(bilm, job, work, ranges)
        try:
            assemble([work.piece(i) for i in range(len(ranges))], out, job.settings, partial, reopen_every=job.block)
        except OSError as err:
            raise write_error(err, out) from None
        _remove_dir(partial)
    finally:
        work.unlock()
    return True


def embed_sharded(bilm: BiLM, job: Job, only: int | None = None) -> bool:
    """Write `job.output` as a directory of `job.shards` shards and `manifest.json`; only shard
    `only` where given. Rerunning redoes the missing shards (a shard killed mid-write is redone
    whole). Returns False where every shard asked for was complete already."""
    work, ranges, todo = start_sharded(job, only)
    for i in todo:
        write_shard(bilm, job, work, i, ranges[i])
        record_complete(work, len(ranges))
    return bool(todo)


def start_sharded(job: Job, only: int | None = None) -> tuple[WorkDir, list[tuple[int, int]], list[int]]:
    """Make or check the shard directory and its manifest: the directory, every shard's line range
    and the shards still to write (only `only` where given)."""
    out = job.output
    ours = (LOCK, MANIFEST + TMP)  # a run that made the directory and has not written its manifest yet
    if out.exists() and (not out.is_dir() or not (out / MANIFEST).is_file()
                         and any(p.name not in ours for p in out.iterdir())):
        raise ElmoFileError(f"{out} exists and is not a sharded output of `python -m spacy_elmo embed`: "
                            "choose another output")
    ranges = plan(job.settings["lines"], job.block, job.shards)
    if any(start == stop for start, stop in ranges) and job.settings["lines"]:
        blocks = -(-job.settings["lines"] // job.block)
        raise ElmoFileError(f"--shards {job.shards}: {job.input_path} has {blocks} block(s) of --flush-every "
                            f"{job.block} lines; give a smaller --flush-every (a shard is whole blocks)")
    _new_dir(out, exist_ok=True)
    manifests = WorkDir(out, out, "shard")
    with take_lock(out / LOCK, out, wait=True):
        complete = manifests.complete(len(ranges))
        if (out / MANIFEST).is_file():
            manifest = manifests.manifest()
            check_settings(out, manifest["settings"], job.settings)
            if manifest["complete"] != complete:  # killed between a shard's rename and the manifest's update
                manifests.write_manifest({**manifest, "complete": complete})
        else:
            manifests.write_manifest({**_manifest(job, "shards", ranges), "complete": [False] * len(ranges)})
    todo = [i for i, done in enumerate(complete) if not done and only in (None, i)]
    job.lines_done = sum(b - a for (a, b), done in zip(ranges, complete) if done)
    return manifests, ranges, todo


def write_shard(bilm: BiLM, job: Job, work: WorkDir, i: int, lines: tuple[int, int]) -> None:
    """Write shard `i` (input lines `lines`) whole, unless it is there already; its lock keeps a
    second writer (another `--shard I/N`, a retried Ray task) off it meanwhile."""
    with take_lock(work.path / f"{work.piece(i).name}.lock", work.output):
        if not work.piece(i).is_file():
            write_range(bilm, job, work, i, *lines)


def record_complete(work: WorkDir, n: int) -> None:
    """Record in the manifest which of the `n` shards are on disk (under the directory's lock)."""
    with take_lock(work.path / LOCK, work.output, wait=True):
        manifest = work.manifest()
        manifest["complete"] = work.complete(n)
        work.write_manifest(manifest)


def _run_pieces(bilm: BiLM, job: Job, work: WorkDir, ranges: list[tuple[int, int]]) -> None:
    """Write the missing pieces in order, reading the input once."""
    done = work.complete(len(ranges))
    job.lines_done = sum(b - a for (a, b), d in zip(ranges, done) if d)
    sentences = None
    for i, ((start, stop), complete) in enumerate(zip(ranges, done)):
        if complete:
            continue
        if sentences is None:
            sentences = read_sentences(job.input_path, job.nlp, skip=start)
        write_range(bilm, job, work, i, start, stop, sentences)
        if i + 1 < len(ranges) and done[i + 1]:
            sentences = None  # the next pieces are there: open again where work resumes


def first_missing_line(job: Job) -> int:
    """The first line not in a complete piece of an interrupted single-file run (for messages)."""
    partial = WorkDir(job.output.with_name(job.output.name + ".partial"), job.output, "part")
    try:
        ranges = [tuple(r) for r in partial.manifest()["ranges"]]
    except ElmoFileError:
        return 0
    return next((a for i, (a, _) in enumerate(ranges) if not partial.piece(i).is_file()), job.settings["lines"])


def _file_settings(path: Path) -> dict[str, Any]:
    try:
        with h5py.File(path, "r") as f:
            if SETTINGS not in f.attrs:
                raise ElmoFileError(f"{path}: not an output of `python -m spacy_elmo embed`")
            return json.loads(f.attrs[SETTINGS])
    except OSError as err:
        raise ElmoFileError(f"{path}: exists and cannot be read as hdf5 ({err}): choose another output") from None


def _remove_dir(path: Path) -> None:
    try:
        shutil.rmtree(path)
        fsync_dir(path.parent)
    except OSError as err:
        raise write_error(err, path) from None


def bound_kernel_cache(capacity: int = 16) -> None:
    """Keep at most `capacity` oneDNN kernels (default 1024), unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    says otherwise. oneDNN keeps one per convolution shape, and a long file brings ever new shapes
    (words per encoder call, longest word), so an unbounded cache grows with the file. oneDNN reads the setting
    when it makes its first kernel, so call this before the biLM runs."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc's malloc_trim; a no-op elsewhere): tensors of
    ever-changing shapes otherwise leave the heap fragmented, and RSS creeps up over a long file."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
