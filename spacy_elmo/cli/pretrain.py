"""`python -m spacy_elmo pretrain`: its typer declaration, the arguments typer leaves (OUTPUT_DIR
and spaCy-style `--section.key value` overrides), the config, and the run, on one process or under
torchrun."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Dict, List, Optional, Sequence, Tuple

import typer
from thinc.api import Config

from ..errors import ElmoConfigError
from ..pretrain import load_config
from .app import app, errors


@app.command(
    "pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def pretrain_cli(
    ctx: typer.Context,
    output: Annotated[
        Optional[str],
        typer.Argument(
            metavar="OUTPUT_DIR",
            show_default=False,
            help="directory for the model, checkpoints and metrics (not needed with --show-config)",
        ),
    ] = None,
    config: Annotated[
        Optional[Path],
        typer.Option(
            help="a .cfg file (default: the built-in config, a small English biLM; see "
            "--show-config)"
        ),
    ] = None,
    train: Annotated[
        Optional[list[str]],
        typer.Option(
            help="training text, one sentence per line (only \\n ends a line, as in embed): a file "
            "or a directory, optionally gzipped (sets paths.train); repeat it, or list more paths "
            "after OUTPUT_DIR"
        ),
    ] = None,
    dev: Annotated[
        Optional[str], typer.Option(help="dev text for perplexity (sets paths.dev)")
    ] = None,
    lang: Annotated[
        Optional[str],
        typer.Option(
            help="tokenize with this spaCy language's tokenizer (sets corpus.tokenizer and "
            "corpus.lang)"
        ),
    ] = None,
    whitespace: Annotated[
        bool,
        typer.Option(help="the text is tokenized already: split on whitespace (not with --lang)"),
    ] = False,
    init_from: Annotated[
        Optional[str],
        typer.Option(
            help="continue training this biLM: a directory (a pretrain OUTPUT_DIR or its model/, "
            "or one holding bilm-tf / AllenNLP options and hdf5 weights) or a published model's "
            "name (from the cache that `download` fills). The run keeps its sizes: a --model.* "
            "setting that differs is an error; and its corpus.lowercase and corpus.unk_token, "
            "unless given"
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="continue the run in OUTPUT_DIR from its last checkpoint (same config and corpus; "
            "only when to stop, evaluate or checkpoint may change). Without it, an OUTPUT_DIR "
            "holding a run's checkpoint or model is refused, never overwritten; a finished run "
            "(its model saved) says so and keeps its files"
        ),
    ] = False,
    export_hdf5: Annotated[
        bool,
        typer.Option(
            help="also write OUTPUT_DIR/model-hdf5 in the bilm-tf layout (which loads as state "
            "policy warm and reads tokens as written: a run whose model reads otherwise, e.g. "
            "--training.scheme sentences or --corpus.lowercase true, is refused)"
        ),
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            help="torch device: cpu, cuda or cuda:N (under torchrun each process takes "
            "cuda:LOCAL_RANK)"
        ),
    ] = "cpu",
    threads: Annotated[
        Optional[int], typer.Option(min=1, help="torch threads per process (default: torch's)")
    ] = None,
    progress: Annotated[
        bool, typer.Option(help="show a progress bar (--no-progress: log lines only)")
    ] = True,
    show_config: Annotated[bool, typer.Option(help="print the resolved config and exit")] = False,
):
    """Train an ELMo biLM from raw text, one sentence per line (only \\n ends a line, as in
    `embed`: a lone \\r does not).

    Config overrides in spaCy's style follow the options: any `--section.key value` of the config,
    e.g. `--training.max_steps 100 --vocab.size 10000 --softmax.type full`. Data parallel: `torchrun
    --nproc_per_node N -m spacy_elmo pretrain ...` (gloo on CPU); each process reads its own rows of
    every batch and gradients are summed over all of them.

    Output: OUTPUT_DIR/model (loadable by spacy_elmo.load_bilm and the `elmo` component, with the
    softmax, vocabulary and training.json), metrics.jsonl (dev perplexity, and the training loss:
    with softmax.type sampled, the sampled softmax's, far below the full softmax's, as the progress
    bar's loss and ppl say), checkpoint/ (for --resume; published whole, so a kill at any moment
    resumes bit for bit), model-hdf5 (with --export-hdf5). A new run refuses an OUTPUT_DIR that
    holds a run: --resume continues it, else remove it or choose another. A run locks OUTPUT_DIR
    while it goes on: a second run on it, --resume too, is refused, naming the holder's pid.
    """
    with errors():
        out, more, overrides = parse_arguments(
            ([output] if output is not None else []) + ctx.args, train
        )
        resolved = resolve_config(
            config,
            overrides,
            train=[*(train or []), *more],
            dev=dev,
            lang=lang,
            whitespace=whitespace,
            export_hdf5=export_hdf5,
        )
        if show_config:
            typer.echo(resolved.to_str())
            return
        if out is None:
            raise ElmoConfigError("OUTPUT_DIR is required (the directory to write the model to)")
        try:
            run_training(
                resolved,
                out,
                resume=resume,
                init_from=init_from,
                given=list(overrides),
                device=device,
                threads=threads,
                progress=progress,
            )
        except KeyboardInterrupt:
            from ..pretrain.outputs import interrupted_note

            typer.echo(interrupted_note(Path(out)), err=True)
            raise typer.Exit(130) from None


def split_overrides(extra: List[str]) -> Tuple[List[str], List[str]]:
    """Separate dotted `--section.key [value]` / `--section.key=value` arguments from the others."""
    rest: List[str] = []
    overrides: List[str] = []
    i = 0
    while i < len(extra):
        arg = extra[i]
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if "." in name:
            overrides.append(arg)
            if "=" not in arg and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                overrides.append(extra[i + 1])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return rest, overrides


def parse_overrides(overrides: List[str]) -> Dict[str, Any]:
    """Dotted `--section.key [value]` arguments (as `split_overrides` gives them) ->
    `{"section.key": value}`, values read as `spacy train` reads them (JSON where they parse, else
    strings), SPACY_CONFIG_OVERRIDES included."""
    from spacy.cli._util import parse_config_overrides  # private to spaCy: this is its one caller

    try:
        return parse_config_overrides(list(overrides))  # a copy: it consumes the list it is given
    except SystemExit:
        raise ElmoConfigError(f"cannot parse the config overrides {' '.join(overrides)}") from None


def parse_arguments(
    args: List[str], train: Optional[List[str]]
) -> Tuple[Optional[str], List[str], Dict[str, Any]]:
    """The arguments typer did not take, in command-line order -> (OUTPUT_DIR or None, more training
    paths, config overrides). Paths after OUTPUT_DIR extend `--train` (`--train a.txt b.txt`)."""
    rest, overrides = split_overrides(args)
    unknown = [a for a in rest if a.startswith("-") and len(a) > 1]
    if unknown:
        raise ElmoConfigError(
            f"no such option: {unknown[0]} (config overrides are --section.key VALUE; see --help)"
        )
    output, more = (rest[0] if rest else None), rest[1:]
    if more and not train:
        raise ElmoConfigError(f"unexpected argument {more[0]!r}: pretrain takes one OUTPUT_DIR")
    return output, more, parse_overrides(overrides)


def resolve_config(
    path: Optional[Path],
    values: Dict[str, Any],
    *,
    train: List[str],
    dev: Optional[str],
    lang: Optional[str],
    whitespace: bool,
    export_hdf5: bool,
) -> Config:
    """The config file plus the command's shortcuts (--train, --dev, --lang, ...) plus dotted
    overrides."""
    if lang is not None and whitespace:
        raise ElmoConfigError(
            "--lang and --whitespace contradict each other (spaCy's tokenizer or splitting on "
            "whitespace): pass one"
        )
    values = dict(values)
    if train:
        values.setdefault("paths.train", train[0] if len(train) == 1 else list(train))
    if dev is not None:
        values.setdefault("paths.dev", dev)
    if lang is not None:
        values.setdefault("corpus.tokenizer", "spacy")
        values.setdefault("corpus.lang", lang)
    if whitespace:
        values.setdefault("corpus.tokenizer", "whitespace")
    if export_hdf5:
        values.setdefault("training.export_hdf5", True)
    return load_config(path, values)


def run_training(
    config: Config,
    output: str,
    *,
    resume: bool,
    init_from: Optional[str],
    device: str,
    threads: Optional[int],
    progress: bool,
    given: Sequence[str] = (),
) -> None:
    """Train as `config` says into `output` (`given`: the dotted settings the command line set);
    under torchrun (WORLD_SIZE > 1) as one of its processes."""
    import torch
    import torch.distributed as dist

    from ..bilm.device import check_device
    from ..pretrain import train

    check_device(device)  # before torch.distributed starts with it
    if threads:
        torch.set_num_threads(threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        if device.startswith("cuda"):
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    train(
        config,
        output,
        resume=resume,
        init_from=init_from,
        given=given,
        device=device,
        progress_bar=progress,
        log=lambda msg: print(msg, file=sys.stderr),
    )
    if distributed:
        dist.destroy_process_group()
