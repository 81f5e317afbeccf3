"""`python -m spacy_elmo embed`: a corpus into hdf5 (see `spacy_elmo.embed`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..embed.options import DEFAULT_MAX_DOCBIN_BYTES, EmbedOptions
from ..weights.locate import describe_source
from .app import WEIGHTS_HELP, app, errors

if TYPE_CHECKING:
    from ..embed import EmbedInterrupted, EmbedResult

LAYER_HELP = (
    "all: (n_layers + 1, n_tokens, dim) per line; top, average or a layer number (0: the token "
    "layer): "
    "(n_tokens, dim). AllenNLP's --all, --top, --average"
)


@app.command("embed")
def embed_cli(
    input_path: Annotated[
        Path,
        typer.Argument(
            help="UTF-8 text, one sentence per line (only \\n ends a line; a last line "
            "without one counts too), or a .spacy DocBin"
        ),
    ],
    output_path: Annotated[
        Path,
        typer.Argument(
            help="hdf5 file to write, in the layout `allennlp elmo` wrote; "
            "with --shards, a directory of such files"
        ),
    ],
    weights: Annotated[str, typer.Option("--weights", "-w", help=WEIGHTS_HELP)],
    lang: Annotated[
        str,
        typer.Option(
            help="tokenize text with this spaCy language's tokenizer, keeping `<S>`, `</S>` and "
            "the model's unknown word (the corpus.unk_token it was pretrained with; `<unk>` where "
            "it records none) whole, as pretrain does (a .spacy DocBin's Docs keep their tokens)"
        ),
    ] = "en",
    whitespace: Annotated[
        bool, typer.Option(help="the text is tokenized already: split on whitespace")
    ] = False,
    layer: Annotated[str, typer.Option(help=LAYER_HELP)] = "all",
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            help="biLM batch size: sentences per batch under --state carry (bilm-tf's batches: "
            "consecutive lines, --flush-every rounded up to a multiple of it); "
            "else a memory bound (up to 8x this many per packed batch; the vectors move within "
            "float32 rounding)",
        ),
    ] = 64,
    state: Annotated[
        Optional[str],
        typer.Option(
            help="state policy: warm, zero or carry (default: the weights' own: warm for hdf5 "
            "weights, zero for ELMoForManyLangs, the saved one for save_bilm / pretrain models)"
        ),
    ] = None,
    precision: Annotated[
        str,
        typer.Option(
            help="of the biLM's LSTM matrix products: float32, bfloat16 (where the "
            "CPU or GPU has it natively), int8 (CPU) or auto (the fastest of "
            "these here); the vectors written stay float32"
        ),
    ] = "float32",
    device: Annotated[str, typer.Option(help="where the biLM runs: cpu, cuda or cuda:N")] = "cpu",
    dtype: Annotated[
        str, typer.Option(help="float32 or float16 (half the size; float32 values rounded)")
    ] = "float32",
    compression: Annotated[
        str, typer.Option(help="hdf5 compression of each line's array: none, gzip or lzf")
    ] = "none",
    resume: Annotated[
        bool,
        typer.Option(
            help="continue an interrupted run on OUTPUT_PATH: keeps its complete parts, "
            "redoes the rest (the input and every setting must be the same); not under "
            "--state carry, where the same command starts an interrupted run again"
        ),
    ] = False,
    flush_every: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="lines per block (a line's arrays depend on its block). A single output file is "
            "written a block at a time, each a part: a kill loses at most the part being written; "
            "under --shards N a shard is whole blocks and each shard is one file, written whole: a "
            "kill loses the shard in progress. Default 10,000, or lines/N where --shards N "
            "needs more blocks (then within float32 rounding of a single run: give both the same "
            "--flush-every, and the same threads, for the same bits: --threads, or a Ray actor's "
            "--threads-per-worker); under --state carry, rounded up to a multiple of --batch-size",
        ),
    ] = None,
    shards: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="write OUTPUT_PATH as a directory of N shard files "
            "+ manifest.json; rerun the command to redo missing shards",
        ),
    ] = None,
    shard: Annotated[
        Optional[str],
        typer.Option(
            help="I/N: write only shard I of N (0-based), for a job array; "
            "the shards can run at the same time"
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    threads: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="torch threads (default: torch's, one per core); "
            "1 on a machine that other jobs share (with --engine ray: "
            "--threads-per-worker)",
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="local: this process; ray: the shards written by a pool of Ray "
            'actors (needs --shards; pip install "spacy_elmo[ray]"). Ray pays off '
            "on inputs that take minutes, across several machines or GPUs: starting "
            "Ray and its actors takes about 10 s (where one process embeds 80 "
            "lines in 1 s); on one machine, --threads or --shard I/N processes "
            "start at once"
        ),
    ] = "local",
    address: Annotated[
        Optional[str],
        typer.Option(
            help="with --engine ray: join the Ray cluster at HOST:PORT "
            "(or auto); INPUT_PATH, OUTPUT_PATH and the weights must "
            "then be at the same path on every node (shared storage). "
            "Default: start Ray on this machine's CPUs"
        ),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="with --engine ray: actors writing shards at once "
            "(default: as many as the cluster's CPUs / --threads-per-worker and GPUs hold, at "
            "most one per shard)",
        ),
    ] = None,
    threads_per_worker: Annotated[
        Optional[int],
        typer.Option(
            min=1, help="with --engine ray: torch threads (and CPUs reserved) per actor (default 1)"
        ),
    ] = None,
    gpus_per_worker: Annotated[
        Optional[float],
        typer.Option(
            help="with --engine ray and --device cuda: GPUs reserved "
            "per actor (default 1; 0.5: two actors share a GPU)"
        ),
    ] = None,
    max_docbin_bytes: Annotated[
        int,
        typer.Option(
            help="a .spacy INPUT_PATH may decompress to at most this many "
            "bytes (a bound on zlib bombs)"
        ),
    ] = DEFAULT_MAX_DOCBIN_BYTES,
):
    """Embed sentences into hdf5: one dataset per line (named by its index) + `sentence_to_index`.

    Streams: lines are read, embedded and written as they come (bench/README.md gives the memory
    measured over a million lines). Empty lines give arrays with 0 tokens. Crash-safe: work is kept
    in parts (in OUTPUT_PATH.partial/) that are written whole and renamed into place, and
    OUTPUT_PATH appears only when complete; after a kill or a full disk, `--resume` continues. Read
    the output with h5py or `spacy_elmo.open_embeddings(OUTPUT_PATH)` (a file or a shard directory).
    With `--shards N --engine ray`, a pool of Ray Data actors writes the shards (the same files), on
    this machine or on a Ray cluster (`--address`), on CPUs or, with `--device cuda`, each on its
    GPU. The command sets glibc's allocator to keep freed memory for the next batch (faster:
    bench/README.md).
    """
    from ..bilm import allocator
    from ..embed import EmbedInterrupted, run

    allocator.keep_freed_memory()

    options = EmbedOptions(
        input_path,
        output_path,
        weights,
        lang=lang,
        whitespace=whitespace,
        layer=layer,
        batch_size=batch_size,
        state=state,
        precision=precision,
        device=device,
        dtype=dtype,
        compression=compression,
        resume=resume,
        flush_every=flush_every,
        shards=shards,
        shard=shard,
        threads=threads,
        engine=engine,
        address=address,
        workers=workers,
        threads_per_worker=threads_per_worker,
        gpus_per_worker=gpus_per_worker,
        max_docbin_bytes=max_docbin_bytes,
    )
    with progress_bar(progress) as show:
        try:
            with errors():
                result = run(options, progress=show)
        except EmbedInterrupted as err:
            typer.echo(f"interrupted: {next_step(err)}", err=True)
            raise typer.Exit(130) from None
    report(result, output_path, weights, shard)


def next_step(err: EmbedInterrupted) -> str:
    """What continues an interrupted run (lines counted from 1, as in other messages)."""
    if err.starts_over:
        return "a --state carry run cannot be resumed: the same command starts it again"
    if err.resume_from is None:
        return "continue with the same command"
    return f"continue with --resume (from line {err.resume_from + 1}, counting from 1)"


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A `progress(done, total)` for `run` that shows a tqdm bar of lines (`enabled`: shown), made
    at the first line (the lines a resumed run keeps are known by then) and closed after the
    block."""
    from tqdm import tqdm

    bar = None

    def show(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, initial=done - 1, unit=" lines", disable=not enabled)
        bar.update(done - bar.n)

    try:
        yield show
    finally:
        if bar is not None:
            bar.close()


def report(result: EmbedResult, output_path: Path, weights: str, shard: Optional[str]) -> None:
    """What a run did, on stderr: the lines and tokens it wrote, and their speed; after `--shard
    I/N`, the shards still missing."""
    if describe_source(weights) != weights:  # a spaCy pipeline: say whose biLM
        typer.echo(f"weights: the {describe_source(weights)}", err=True)
    if result.precision_reason.startswith("auto"):
        typer.echo(f"precision {result.precision} ({result.precision_reason})", err=True)
    i, _, n = (shard or "").partition("/")
    if not result.wrote and shard is not None and result.missing:
        typer.echo(f"{output_path}: shard {i} of {n} is complete already", err=True)
    elif not result.wrote:
        typer.echo(f"{output_path} is complete already ({result.lines_done} lines)", err=True)
    else:
        seconds = max(result.seconds, 1e-9)
        typer.echo(
            f"wrote {output_path}: {result.lines_done + result.lines_run} lines "
            f"({result.lines_run} in this run), {result.tokens} tokens in {result.seconds:.1f} s, "
            f"{result.tokens / seconds:,.0f} tokens/s",
            err=True,
        )
    if result.missing:
        *most, last = map(str, result.missing)
        which = f"shards {', '.join(most)} and {last}" if most else f"shard {last}"
        typer.echo(
            f"{which} of {output_path} {'are' if most else 'is'} still missing (--shard I/{n} "
            "writes shard I)",
            err=True,
        )
