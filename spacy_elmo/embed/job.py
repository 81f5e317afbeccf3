"""One `embed` run: its plan (blocks, parts or shards), writing the pieces that are missing,
assembling a single output, resuming after a kill.

The input is read and embedded in blocks of `flush_every` lines (under carry a multiple of the
batch size, so that the batches are bilm-tf's: a row carries the state of the batch before); each
block starts from an empty token cache, so a line's arrays depend only on its block (a cached token
layer carries the rounding of the batch it was first computed in): a resumed run, a shard and an
uninterrupted run compute every line alike, to the bit. Pieces become visible only when complete
(a part per block beside a single output, assembled at the end; or the shards of a sharded output);
the work directory's manifest records the input's sha256 and every setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Optional, TypedDict, Union

import torch
from spacy.language import Language

from ..about import __version__
from ..bilm import ElmoEmbedder
from ..dir_lock import held_by, locked
from ..errors import ElmoConfigError, ElmoFileError, ElmoResumeError
from ..files import is_temporary, regular_file
from ..tokenizer import blank, spacy_name
from ..weights import load_bilm
from .compute import embed_blocks, parse_layer
from .h5writer import RESUME_RETRY, HDF5Output, write_error
from .options import EmbedOptions
from .outdir import LOCK, MANIFEST, Manifest, WorkDir, check_settings, plan
from .sentences import InputChanged, check_unchanged, read_sentences, scan_input
from .writer import OutputWriter


class Settings(TypedDict):
    """What an output records of the run that wrote it (the root attribute `spacy_elmo.settings` of
    each file, the manifest's `settings`): the input (`scan_input`), what changes a float32 result's
    bits (threads, torch, the weights' fingerprint, ...) and the options that shape the output. A
    run continues an output only under the same (`outdir.check_settings`)."""

    input: str
    input_bytes: int
    input_sha256: str
    lines: int
    threads: int
    torch: str
    spacy_elmo: str
    weights_fingerprint: str
    state: str
    precision: str
    device: str
    layer: str
    batch_size: int
    flush_every: int
    dtype: str
    compression: str
    shards: Optional[int]
    tokenizer: str


@dataclass
class Job:
    """One run: its checked `options`, the `settings` it records, the `writer` of its files, the
    input's tokenizer (`nlp`; None: split on whitespace) and the layer chosen; `on_line(n_tokens)`
    follows each line embedded; `lines_done`: lines found complete when the run started,
    `lines_run`: lines embedded by it; `missing`: the shards not written when it ended;
    `input_identity`: the input's at the scan (`sentences.identity`), checked where it is opened
    and before each piece becomes visible."""

    options: EmbedOptions
    settings: Settings
    writer: OutputWriter
    nlp: Optional[Language] = None
    layer: Union[str, int] = "all"
    on_line: Optional[Callable[[int], None]] = None
    lines_done: int = 0
    lines_run: int = 0
    missing: tuple[int, ...] = ()
    input_identity: Optional[tuple[int, int, int, int]] = None

    @property
    def input_path(self) -> Path:
        return self.options.input_path

    @property
    def output(self) -> Path:
        return self.options.output

    @property
    def shards(self) -> Optional[int]:
        return self.options.shards

    @property
    def block(self) -> int:
        return self.settings["flush_every"]


def new_job(options: EmbedOptions) -> tuple[ElmoEmbedder, Job]:
    """Load the biLM and scan the input of a run of `options` (checked: `EmbedOptions.check`): the
    embedder and the Job, whose settings are recorded with the output (and must match when a run
    continues)."""
    o = options
    regular_file(o.input_path, "input")  # read twice (scanned, then embedded): no pipe
    bilm = load_bilm(o.weights, state=o.state, precision=o.precision, device=o.device)
    chosen = parse_layer(o.layer, bilm.num_output_layers)
    if (o.resume and not bilm.state_policy.allows_resume) or (
        o.shards and not bilm.state_policy.allows_regrouping
    ):
        raise ElmoConfigError(
            f"{'--shards' if o.shards else '--resume'} needs a deterministic state policy (warm "
            "or zero): under carry a line's vectors depend on every line before it"
            f"{'' if o.shards else '; without --resume, an interrupted carry run starts again'}"
        )
    docbin = o.input_path.suffix == ".spacy"
    unk_token = bilm.options.unk_token  # the model's unknown word, kept whole
    try:
        nlp = None if o.whitespace and not docbin else blank(o.lang, unk_token)
    except ImportError as err:
        raise ElmoConfigError(f"--lang {o.lang}: not a language spaCy knows ({err})") from None
    tokenizer = (
        "docbin" if docbin else "whitespace" if o.whitespace else spacy_name(o.lang, unk_token)
    )
    scanned = scan_input(o.input_path, o.max_docbin_bytes)
    identity = scanned.pop("identity")
    settings = Settings(
        **scanned,
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        spacy_elmo=__version__,
        weights_fingerprint=bilm.fingerprint(),
        state=bilm.state_policy.value,
        precision=bilm.precision,
        device=bilm.device.type,
        layer=o.layer,
        batch_size=o.batch_size,
        flush_every=o.block_size(scanned["lines"], not bilm.state_policy.allows_regrouping),
        dtype=o.dtype,
        compression=o.compression,
        shards=o.shards,
        tokenizer=tokenizer,
    )
    writer = HDF5Output(None if o.compression == "none" else o.compression)
    return bilm, Job(o, settings, writer, nlp=nlp, layer=chosen, input_identity=identity)


def write_range(
    bilm: ElmoEmbedder,
    job: Job,
    work: WorkDir,
    i: int,
    start: int,
    stop: int,
    sentences: Optional[Iterable[tuple[str, list[str]]]] = None,
) -> None:
    """Embed input lines `start:stop` into piece `i` of `work`, a whole file renamed into place when
    complete. `sentences` continues a reader already at line `start`;
    without it the input is opened here: a worker (a process, a Ray actor) writes a shard with this
    one call. The input is checked unchanged after its last line is read, before the piece is
    renamed into place."""
    if sentences is None:
        sentences = _read(job, start)
    lines = embed_blocks(
        bilm,
        islice(sentences, stop - start),
        block=job.block,
        layer=job.layer,
        batch_size=job.settings["batch_size"],
        dtype=job.settings["dtype"],
        on_line=job.on_line,
        first_line=start + 1,
    )
    path = work.piece(i)
    try:
        job.writer.write_piece(path, start, stop - start, _checked(job, lines), job.settings)
    except OSError as err:
        raise write_error(err, path) from None
    job.lines_run += stop - start


def _read(job: Job, start: int) -> Iterable[tuple[str, list[str]]]:
    o = job.options
    return read_sentences(o.input_path, job.nlp, start, o.max_docbin_bytes, job.input_identity)


def _checked(job: Job, lines: Iterable[Any]) -> Iterator[Any]:
    """`lines`, then InputChanged where the input changed since the scan (see `write_range`)."""
    try:
        yield from lines
        check_unchanged(job.input_path, job.input_identity)
    except InputChanged as err:
        if not job.shards:
            raise
        # the manifest records the input as it was
        raise InputChanged(f"{err} after removing {job.output}") from None


def embed_single(bilm: ElmoEmbedder, job: Job, resume: bool) -> bool:
    """Write `job.output` as one file through parts in `OUTPUT.partial/`. Returns False where the
    output was complete already. A kill at any moment loses at most the part being written:
    `resume` keeps the complete parts, redoes the others and assembles again. Under a state policy
    that cannot resume (carry), a run starts an interrupted carry run's work over."""
    out, partial = job.output, job.output.with_name(job.output.name + ".partial")
    work = WorkDir(partial, out, "part")
    if out.is_dir():
        raise ElmoFileError(
            f"{out} is a directory: name an output file (inside it, say), or pass --shards N to "
            "write a sharded output into it"
        )
    resumable = bilm.state_policy.allows_resume
    if out.exists():
        if not resume:
            todo = "pass --resume to continue it, or remove it" if resumable else "remove it first"
            raise ElmoResumeError(f"{out} exists: {todo}")
        check_settings(out, job.writer.read_settings(out), job.settings, readable=True)
        if partial.exists():  # killed while removing it, after OUTPUT was complete
            work.lock()
            work.remove()
            work.unlock()
        job.lines_done = job.settings["lines"]
        return False
    if partial.exists() and not resume:
        who = held_by(partial / LOCK)
        if who:
            raise ElmoResumeError(
                f"{out}: another process is writing it ({who}; {partial}): wait for it to "
                "finish, or stop it and run again"
            )
        if resumable:
            raise ElmoResumeError(
                f"{out}: an interrupted run is in {partial}: pass --resume to continue it"
            )
    try:
        if not partial.exists():
            work.create()
        work.lock()
        if work.has_manifest() and not resumable:
            _start_over(job, work)
        if work.has_manifest():
            manifest = work.manifest()
            record, remove = work.path / MANIFEST, work.path
            check_settings(out, manifest.settings, job.settings, record=record, remove=remove)
            ranges = manifest.ranges
        else:  # new, or killed before its manifest was written
            ranges = plan(job.settings["lines"], job.block, None)
            work.write_manifest(Manifest("file", job.settings, ranges))
        try:
            _run_pieces(bilm, job, work, ranges)
        except InputChanged:
            work.remove()  # its parts are of an input that is gone
            raise
        try:
            job.writer.assemble(
                [work.piece(i) for i in range(len(ranges))], out, job.settings, partial
            )
        except OSError as err:
            raise write_error(err, out) from None
        work.remove()
    finally:
        work.unlock()
    return True


def _start_over(job: Job, work: WorkDir) -> None:
    """Clear the work of an interrupted run that cannot be continued (`--state carry`), whose lock
    the caller holds; ElmoResumeError where it was a run that can (its work is kept)."""
    then = work.manifest().settings.get("state")
    if then != job.settings["state"]:
        raise ElmoResumeError(
            f"{job.output}: an interrupted run of --state {then} is in {work.path}: continue it "
            f"with --resume and its settings, or remove {work.path}"
        )
    work.clear()


def embed_sharded(bilm: ElmoEmbedder, job: Job, only: Optional[int] = None) -> bool:
    """Write `job.output` as a directory of `job.shards` shards and `manifest.json`; only shard
    `only` where given. Rerunning redoes the missing shards (a shard killed mid-write is redone
    whole). Returns False where every shard asked for was complete already; `job.missing` holds
    the shards still to write after it (another `--shard I/N`'s)."""
    work, ranges, todo = start_sharded(job, only)
    for i in todo:
        write_shard(bilm, job, work, i, ranges[i])
        record_complete(work)
    job.missing = tuple(i for i, done in enumerate(work.complete(len(ranges))) if not done)
    return bool(todo)


def start_sharded(
    job: Job, only: Optional[int] = None, threads_flag: str = "--threads"
) -> tuple[WorkDir, list[tuple[int, int]], list[int]]:
    """Make or check the shard directory and its manifest: the directory, every shard's line range
    and the shards still to write (only `only` where given; `threads_flag`: see
    `outdir.check_settings`)."""
    out = job.output
    if out.exists() and (
        not out.is_dir()
        or not os.path.lexists(out / MANIFEST)
        # a run that made the directory and has not written its manifest yet
        and any(p.name != LOCK and not is_temporary(p.name, MANIFEST) for p in out.iterdir())
    ):
        raise ElmoFileError(
            f"{out} exists and is not a sharded output of `python -m spacy_elmo embed`: "
            "choose another output"
        )
    ranges = plan(job.settings["lines"], job.block, job.shards)
    if any(start == stop for start, stop in ranges) and job.settings["lines"]:
        lines, blocks = job.settings["lines"], -(-job.settings["lines"] // job.block)
        smaller = (
            "fewer shards or a smaller --flush-every" if job.block > 1 else f"{lines} or fewer"
        )
        raise ElmoFileError(
            f"--shards {job.shards}: {job.input_path} has {lines} line(s), {blocks} block(s) of "
            f"--flush-every {job.block} lines; a shard is whole blocks: give {smaller}"
        )
    manifests = WorkDir(out, out, "shard")
    manifests.create(exist_ok=True)
    with locked(out / LOCK, out, True, RESUME_RETRY):
        complete = manifests.complete(len(ranges))
        if manifests.has_manifest():
            manifest = manifests.manifest()
            # readable as it is where complete, each shard with its record (see `check_shards`)
            readable = all(manifest.complete or [False]) and all(manifest.shards or [None])
            check_settings(
                out,
                manifest.settings,
                job.settings,
                only is not None,
                threads_flag=threads_flag,
                record=out / MANIFEST,
                readable=readable,
            )
            # killed between a shard's rename and the manifest's update
            manifest = manifests.record_complete(manifest)
        else:
            manifest = Manifest(
                "shards", job.settings, ranges, [False] * len(ranges), [None] * len(ranges)
            )
            manifests.write_manifest(manifest)
    todo = [i for i, done in enumerate(complete) if not done and only in (None, i)]
    asked = [i for i, done in enumerate(complete) if done and only in (None, i)]
    # sha256 where all asked for is complete already
    manifests.check_shards(manifest, [] if todo else asked)
    job.lines_done = sum(b - a for (a, b), done in zip(ranges, complete) if done)
    return manifests, ranges, todo


def write_shard(
    bilm: ElmoEmbedder, job: Job, work: WorkDir, i: int, lines: tuple[int, int]
) -> None:
    """Write shard `i` (input lines `lines`) whole, unless it is there already; its lock keeps a
    second writer (another `--shard I/N`, a retried Ray task) off it meanwhile (its file is removed
    after)."""
    with locked(work.path / f"{work.piece(i).name}.lock", work.output, False, RESUME_RETRY):
        if not work.piece(i).is_file():
            write_range(bilm, job, work, i, *lines)


def record_complete(work: WorkDir) -> None:
    """Record in the manifest which shards are on disk (under the directory's lock)."""
    with locked(work.path / LOCK, work.output, True, RESUME_RETRY):
        work.record_complete(work.manifest())


def _run_pieces(bilm: ElmoEmbedder, job: Job, work: WorkDir, ranges: list[tuple[int, int]]) -> None:
    """Write the missing pieces in order, reading the input once."""
    done = work.complete(len(ranges))
    job.lines_done = sum(b - a for (a, b), d in zip(ranges, done) if d)
    sentences = None
    for i, ((start, stop), complete) in enumerate(zip(ranges, done)):
        if complete:
            continue
        if sentences is None:
            sentences = _read(job, start)
        write_range(bilm, job, work, i, start, stop, sentences)
        if i + 1 < len(ranges) and done[i + 1]:
            sentences = None  # the next pieces are there: open again where work resumes


def first_missing_line(job: Job) -> int:
    """The first line not in a complete piece of an interrupted single-file run (for messages)."""
    partial = WorkDir(job.output.with_name(job.output.name + ".partial"), job.output, "part")
    try:
        ranges = partial.manifest().ranges
    except ElmoFileError:
        return 0
    return next(
        (a for i, (a, _) in enumerate(ranges) if not partial.piece(i).is_file()),
        job.settings["lines"],
    )
