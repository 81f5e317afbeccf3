"""Command line: `python -m spacy_elmo embed | convert | info | download | pretrain` (typer, like spaCy's).

Bad input (a missing file, an unknown model name, a corrupt download) ends a command with one
`error: ...` line on stderr and exit code 1. `pretrain` takes spaCy-style config overrides
(`--training.max_steps 100`) and is implemented in `spacy_elmo.pretrain.cli`.
"""
from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import torch
import typer

from .bilm import export_hdf5, hub, load_bilm, locate, read_state_dict, save_bilm
from .errors import ElmoFileError

app = typer.Typer(name="spacy_elmo", no_args_is_help=True, rich_markup_mode="markdown", add_completion=False,
                  pretty_exceptions_enable=False,
                  help="ELMo for spaCy: embed text, convert and inspect weights, download the published models, "
                       "pretrain a biLM.")
EXTRA_FILES = ("lm_head.pt", "vocab.txt")  # written next to a model by `pretrain`
LAYER_HELP = ("all: (n_layers + 1, n_tokens, dim) per line; top, average or a layer number (0: the token layer): "
              "(n_tokens, dim). AllenNLP's --all, --top, --average")
WEIGHTS_HELP = ("weights: a directory (bilm-tf / AllenNLP options JSON + hdf5, or this project's format) "
                f"or a published model downloaded before ({', '.join(hub.PUBLISHED)})")


# Typer reads the annotations at run time, so they keep `Optional[X]` (`X | None` needs Python 3.10).


@contextmanager
def errors():
    """Expected failures -> one `error: ...` line and exit code 1, never a traceback.

    Every reader turns a file it cannot read into ElmoFileError, which names the file; OSError covers missing
    files, permissions and full disks, ValueError a bad argument.
    """
    try:
        yield
    except (ElmoFileError, OSError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


# ---------------------------------------------------------------------------------------------- embed
@app.command("embed")
def embed_cli(
    input_path: Annotated[Path, typer.Argument(help="UTF-8 text, one sentence per line (only \\n ends a line, as `wc -l` "
                                                     "counts), or a .spacy DocBin")],
    output_path: Annotated[Path, typer.Argument(help="hdf5 file to write, in the layout `allennlp elmo` wrote; "
                                                      "with --shards, a directory of such files")],
    weights: Annotated[str, typer.Option("--weights", "-w", help=WEIGHTS_HELP)],
    lang: Annotated[str, typer.Option(help="tokenize with this spaCy language's tokenizer")] = "en",
    whitespace: Annotated[bool, typer.Option(help="the text is tokenized already: split on whitespace")] = False,
    layer: Annotated[str, typer.Option(help=LAYER_HELP)] = "all",
    batch_size: Annotated[int, typer.Option(min=1, help="sentences per biLM batch")] = 64,
    state: Annotated[Optional[str], typer.Option(help="state policy: warm (default), zero or carry")] = None,
    dtype: Annotated[str, typer.Option(help="float32 or float16 (half the size; float32 values rounded)")] = "float32",
    compression: Annotated[str, typer.Option(help="hdf5 compression of each line's array: none, gzip or lzf")] = "none",
    resume: Annotated[bool, typer.Option(help="continue an interrupted run on OUTPUT_PATH: keeps its complete parts, "
                                              "redoes the rest (the input and every setting must be the same)")] = False,
    flush_every: Annotated[int, typer.Option(min=1, help="lines per part: a kill loses at most the part being "
                                                         "written; a shard is made of whole parts")] = 10_000,
    shards: Annotated[Optional[int], typer.Option(min=1, help="write OUTPUT_PATH as a directory of N shard files "
                                                             "+ manifest.json; rerun the command to redo missing shards")] = None,
    shard: Annotated[Optional[str], typer.Option(help="I/N: write only shard I of N (0-based), for a job array; "
                                                      "the shards can run at the same time")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    threads: Annotated[Optional[int], typer.Option(min=1, help="torch threads (default: torch's, one per core); "
                                                   "1 on a machine that other jobs share")] = None,
    engine: Annotated[str, typer.Option(help="local: this process; ray: the shards written by a pool of Ray "
                                             "actors (needs --shards; pip install \"spacy_elmo[ray]\")")] = "local",
    address: Annotated[Optional[str], typer.Option(help="with --engine ray: join the Ray cluster at HOST:PORT "
                                                        "(or auto); INPUT_PATH, OUTPUT_PATH and the weights must "
                                                        "then be at the same path on every node (shared storage). "
                                                        "Default: start Ray on this machine's CPUs")] = None,
    workers: Annotated[Optional[int], typer.Option(min=1, help="with --engine ray: actors writing shards at once "
                                                   "(default: the cluster's CPUs / --threads-per-worker)")] = None,
    threads_per_worker: Annotated[Optional[int], typer.Option(min=1, help="with --engine ray: torch threads (and "
                                                              "CPUs reserved) per actor (default 1)")] = None,
):
    """Embed sentences into hdf5: one dataset per line (named by its index) + `sentence_to_index`.

    Streams: lines are read, embedded and written as they come (the README gives the memory
    measured over a million lines). Empty lines give arrays with 0 tokens. Crash-safe: work is kept
    in parts (in OUTPUT_PATH.partial/) that are written whole and renamed into place, and OUTPUT_PATH
    appears only when complete; after a kill or a full disk, `--resume` continues. Read the output
    with h5py or `spacy_elmo.open_embeddings(OUTPUT_PATH)` (a file or a shard directory). With
    `--shards N --engine ray`, a pool of Ray Data actors writes the shards (the same files), on this
    machine or on a Ray cluster (`--address`).
    """
    from tqdm import tqdm

    from .embed_file import (
        bound_kernel_cache,
        embed_sharded,
        embed_single,
        first_missing_line,
        new_job,
    )

    bound_kernel_cache()
    if threads is not None:
        torch.set_num_threads(threads)
    with errors():
        only = parse_shard(shard, shards)
        shards = shards if only is None else int(shard.split("/")[1])
        ray_run = ray_engine(engine, shards, only, address, workers, threads_per_worker)
        if ray_run is not None:  # the weights' fingerprint as the actors will see it (see `embed_job`)
            torch.set_num_threads(threads_per_worker or 1)
        bilm, job = new_job(input_path, output_path, weights, lang=lang, whitespace=whitespace, layer=layer,
                            batch_size=batch_size, state=state, dtype=dtype, compression=compression,
                            flush_every=flush_every, shards=shards, resume=resume)
    settings = job.settings
    bar = tqdm(total=settings["lines"], unit=" lines", disable=not progress)
    tokens = 0

    def on_line(n_tokens: int, lines: int = 1) -> None:
        nonlocal tokens
        tokens += n_tokens
        bar.update(lines)

    job.on_line = on_line
    start = time.perf_counter()
    try:
        with errors():
            if ray_run is not None:
                del bilm  # each worker loads its own
                wrote = ray_run(job, weights, address=address, workers=workers,
                                threads_per_worker=threads_per_worker or 1,
                                on_shard=lambda lines, n_tokens: on_line(n_tokens, lines))
            else:
                wrote = embed_sharded(bilm, job, only) if shards else embed_single(bilm, job, resume)
    except KeyboardInterrupt:
        where = "" if shards else f" (from line {first_missing_line(job)})"
        typer.echo(f"interrupted: continue with {'the same command' if shards else '--resume'}{where}", err=True)
        raise typer.Exit(130) from None
    finally:
        bar.close()
    if not wrote:
        typer.echo(f"{output_path} is complete already ({job.lines_done} lines)", err=True)
        return
    seconds = time.perf_counter() - start
    typer.echo(f"wrote {output_path}: {job.lines_done + job.lines_run} lines ({job.lines_run} in this run), "
               f"{tokens} tokens in {seconds:.1f} s, {tokens / max(seconds, 1e-9):,.0f} tokens/s", err=True)


def ray_engine(engine: str, shards: Optional[int], only: Optional[int], *ray_options: Any):
    """None for `--engine local`; for `ray`, `distributed.embed_job` (after checking the options)."""
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine must be local or ray, got {engine!r}")
    if engine == "local":
        if any(option is not None for option in ray_options):
            raise ValueError("--address, --workers and --threads-per-worker go with --engine ray")
        return None
    if not shards or only is not None:
        raise ValueError("--engine ray writes every shard of --shards N: give --shards N (and not --shard I/N)")
    try:
        from .distributed import embed_job
    except ModuleNotFoundError:
        raise ValueError('--engine ray needs Ray: pip install "spacy_elmo[ray]"') from None
    return embed_job


def parse_shard(spec: Optional[str], shards: Optional[int]) -> Optional[int]:
    """`--shard I/N` -> I, checked against `--shards`; None without it."""
    if spec is None:
        return None
    i, _, n = spec.partition("/")
    if not (i.isdigit() and n.isdigit() and int(i) < int(n)) or (shards is not None and shards != int(n)):
        raise ValueError(f"--shard must be I/N with 0 <= I < N (and N equal to --shards), got {spec!r}")
    return int(i)


# -------------------------------------------------------------------------------------------- convert
@app.command("convert")
def convert_cli(
    src: Annotated[str, typer.Argument(help=WEIGHTS_HELP)],
    dest: Annotated[Path, typer.Argument(help="output directory (new or empty)")],
    to: Annotated[Optional[str], typer.Option(help="own or hdf5 (default: the other format than SRC's)")] = None,
    stem: Annotated[Optional[str], typer.Option(help="with --to hdf5: files `elmo_<stem>_options.json`, "
                                                     "`elmo_<stem>_weights.hdf5`")] = None,
):
    """Convert weights between the bilm-tf / AllenNLP hdf5 layout and this project's format.

    `load_bilm` gives the same outputs before and after, bit for bit. The softmax and vocabulary that
    `pretrain` writes beside a model (lm_head.pt, vocab.txt) are copied along, so `pretrain
    --init-from DEST` continues with them.
    """
    with errors():
        bilm = load_bilm(src)
        target = to or ("hdf5" if locate(src).kind == "own" else "own")
        if target not in ("own", "hdf5"):
            raise ValueError(f"--to must be own or hdf5, got {target!r}")
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise FileExistsError(f"{dest} exists and is not an empty directory")
        extras = [Path(src) / name for name in EXTRA_FILES if Path(src).is_dir() and (Path(src) / name).is_file()]
        for extra in extras:
            if extra.suffix == ".pt":  # copied only if it is a plain state dict, as `pretrain --init-from` reads it
                read_state_dict(extra, str(extra))
        if target == "hdf5":
            paths = list(export_hdf5(bilm, dest, stem=stem))
            if bilm.state_policy != "warm":
                typer.echo(f"note: the hdf5 layout does not record the state policy: load it with "
                           f"state={bilm.state_policy!r} to get the same outputs", err=True)
        else:
            paths = locate(save_bilm(bilm, dest)).paths
        for extra in extras:
            paths.append(Path(shutil.copy2(extra, dest / extra.name)))
    typer.echo("wrote " + " ".join(str(p) for p in paths))


# ----------------------------------------------------------------------------------------------- info
def parameter_counts(bilm) -> dict[str, int]:
    """Parameters per part: char embedding, char CNN, each highway, projection, each LSTM layer per direction."""
    counts: dict[str, int] = {}
    for name, p in bilm.named_parameters():
        parts = name.split(".")
        if parts[0] == "lstm":  # (2, ...): forward and backward stacked
            for d, direction in enumerate(("forward", "backward")):
                key = f"LSTM layer {parts[2]} {direction}"
                counts[key] = counts.get(key, 0) + p[d].numel()
            continue
        if parts[1] == "highways":
            key = f"highway {parts[2]}"
        else:
            key = {"char_embedding": "char embedding", "convs": "char CNN"}.get(parts[1], "projection")
        counts[key] = counts.get(key, 0) + p.numel()
    return dict(sorted(counts.items(), key=lambda kv: (kv[0].startswith("LSTM"), kv[0] == "projection")))


def describe(model: str, state: str | None = None) -> dict[str, Any]:
    """Everything `info` reports, JSON-friendly."""
    bilm = load_bilm(model, state=state)
    files = locate(model).paths
    extra = [files[0].parent / name for name in EXTRA_FILES if (files[0].parent / name).is_file()]
    softmax = None
    if extra and extra[0].name == "lm_head.pt":
        softmax = sum(t.numel() for t in read_state_dict(extra[0], str(extra[0])).values())
    o = bilm.options
    return {
        "model": model, "state_policy": bilm.state_policy,
        "parameters": sum(p.numel() for p in bilm.parameters()),
        "parameters_by_part": parameter_counts(bilm.bilm), "softmax_parameters": softmax,
        "widths": {"char embedding": o.char_dim, "char CNN filters": o.n_filters, "token layer": o.projection_dim,
                   "LSTM cell": o.lstm_dim, "LSTM projection": o.projection_dim, "ELMo layers": bilm.output_dim},
        "output_layers": bilm.num_output_layers, "output_dim": bilm.output_dim,
        "fingerprint": bilm.fingerprint(), "options": o.sizes(),
        "files": [{"path": str(p), "bytes": p.stat().st_size, "sha256": hub.sha256_file(p)} for p in files + extra],
    }


@app.command("info")
def info_cli(
    model: Annotated[str, typer.Argument(help=WEIGHTS_HELP)],
    state: Annotated[Optional[str], typer.Option(help="state policy: warm, zero or carry")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")] = False,
):
    """Architecture, parameters per part, layer widths and the sha256 of each file of a biLM."""
    with errors():
        report = describe(model, state)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from wasabi import msg

    o = report["options"]
    msg.divider(f"ELMo biLM: {model}")
    msg.table({"char CNN": f"char_dim {o['char_dim']}, filters {o['filters']}, {o['activation']}",
               "highway layers": o["n_highway"],
               "LSTM": f"{o['n_layers']} layers per direction, cell clip {o['cell_clip']}, proj clip {o['proj_clip']}, "
                       f"skip connections {o['use_skip_connections']}",
               "output": f"{report['output_layers']} layers x {report['output_dim']}",
               "state policy": report["state_policy"], "fingerprint": report["fingerprint"]}, max_col=200)
    msg.divider("Widths")
    msg.table(report["widths"])
    msg.divider("Parameters")
    rows = [(k, f"{v:,}") for k, v in report["parameters_by_part"].items()]
    rows.append(("biLM total", f"{report['parameters']:,}"))
    if report["softmax_parameters"] is not None:
        rows.append(("softmax (lm_head.pt)", f"{report['softmax_parameters']:,}"))
    msg.table(rows, aligns=("l", "r"))
    msg.divider("Files")
    msg.table([(f["path"], f"{f['bytes']:,}", f["sha256"]) for f in report["files"]],
              header=("file", "bytes", "sha256"), aligns=("l", "r", "l"), max_col=200)


# ------------------------------------------------------------------------------------------- download
@app.command("download")
def download_cli(
    name: Annotated[str, typer.Argument(help=", ".join(hub.PUBLISHED))],
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
):
    """Fetch a published AllenNLP model into the cache ($SPACY_ELMO_CACHE, default ~/.cache/spacy_elmo).

    Resumable (an interrupted download continues from its .part file); a file is complete when its
    size matches the server's, then it must load, and its sha256 is recorded and checked on every
    later use. `load_bilm(NAME)` and the `elmo` component's `weights = NAME` then use the cache.
    """
    from tqdm import tqdm

    from .bilm.download import download

    def bar(desc: str, total: int, initial: int):
        return tqdm(desc=desc, total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024)

    with errors():
        directory = download(hub.check_name(name), progress=bar if progress else None)
    typer.echo(f"{name}: {directory} (load with spacy_elmo.load_bilm({name!r}) or the elmo component's "
               f"weights = \"{name}\")")


# ------------------------------------------------------------------------------------------- pretrain
@app.command("pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pretrain_cli(
    ctx: typer.Context,
    output: Annotated[Optional[str], typer.Argument(
        metavar="OUTPUT_DIR", show_default=False,
        help="directory for the model, checkpoints and metrics (not needed with --show-config)")] = None,
    config: Annotated[Optional[Path], typer.Option(
        help="a .cfg file (default: the built-in config, a small English biLM; see --show-config)")] = None,
    train: Annotated[Optional[list[str]], typer.Option(
        help="training text, one sentence per line: a file or a directory, optionally gzipped (sets "
             "paths.train); repeat it, or list more paths after OUTPUT_DIR")] = None,
    dev: Annotated[Optional[str], typer.Option(help="dev text for perplexity (sets paths.dev)")] = None,
    lang: Annotated[Optional[str], typer.Option(
        help="tokenize with this spaCy language's tokenizer (sets corpus.tokenizer and corpus.lang)")] = None,
    whitespace: Annotated[bool, typer.Option(help="the text is tokenized already: split on whitespace")] = False,
    init_from: Annotated[Optional[str], typer.Option(
        help="continue training this biLM: a directory saved here, bilm-tf / AllenNLP hdf5 weights, or a "
             "published model's name (from the cache that `download` fills)")] = None,
    resume: Annotated[bool, typer.Option(
        help="continue the run in OUTPUT_DIR from its last checkpoint (same config and corpus; only when to "
             "stop, evaluate or checkpoint may change)")] = False,
    export_hdf5: Annotated[bool, typer.Option(help="also write OUTPUT_DIR/model-hdf5 in the bilm-tf layout")] = False,
    device: Annotated[str, typer.Option(
        help="torch device: cpu, cuda or cuda:N (under torchrun each process takes cuda:LOCAL_RANK)")] = "cpu",
    threads: Annotated[Optional[int], typer.Option(min=1, help="torch threads per process (default: torch's)")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar (--no-progress: log lines only)")] = True,
    show_config: Annotated[bool, typer.Option(help="print the resolved config and exit")] = False,
):
    """Train an ELMo biLM from raw text, one sentence per line.

    Config overrides in spaCy's style follow the options: any `--section.key value` of the config, e.g.
    `--training.max_steps 100 --vocab.size 10000 --softmax.type full`. Data parallel: `torchrun
    --nproc_per_node N -m spacy_elmo pretrain ...` (gloo on CPU); each process reads its own rows of
    every batch and gradients are summed over all of them.

    Output: OUTPUT_DIR/model (loadable by spacy_elmo.load_bilm and the `elmo` component, with the
    softmax, vocabulary and training.json), metrics.jsonl (dev perplexity), checkpoint/ (for
    --resume; published whole, so a kill at any moment resumes bit for bit), model-hdf5 (with
    --export-hdf5).
    """
    from .pretrain.cli import parse_arguments, resolve_config, run_training

    with errors():
        out, more, overrides = parse_arguments(([output] if output is not None else []) + ctx.args, train)
        resolved = resolve_config(config, overrides, train=[*(train or []), *more], dev=dev, lang=lang,
                                  whitespace=whitespace, export_hdf5=export_hdf5)
        if show_config:
            typer.echo(resolved.to_str())
            return
        if out is None:
            raise ValueError("OUTPUT_DIR is required (the directory to write the model to)")
        try:
            run_training(resolved, out, resume=resume, init_from=init_from, device=device, threads=threads,
                         progress=progress)
        except KeyboardInterrupt:
            typer.echo("interrupted; continue with --resume (from the last checkpoint)", err=True)
            raise typer.Exit(130) from None


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m spacy_elmo` and the `spacy-elmo` script; exits with the command's code."""
    app(args=argv)
