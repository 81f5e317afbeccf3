"""`python -m spacy_elmo convert`: weights between the bilm-tf / AllenNLP hdf5 layout and this
project's format."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ElmoConfigError, ElmoFileError
from ..files import atomic_dir, exists, inside_dir, open_regular, write_errors
from ..pretrain.outputs import HEAD_FILE, VOCAB_FILE
from ..weights import export_hdf5, load_bilm, locate, read_state_dict, save_bilm
from ..weights.hdf5_export import check_stem
from ..weights.locate import describe_source
from .app import WEIGHTS_HELP, app, errors

EXTRA_FILES = (HEAD_FILE, VOCAB_FILE)  # written next to a model by `pretrain`


def copy_inside(extra: Path, target_dir: Path, inside: Path) -> Path:
    """`extra` copied into `target_dir` from the file opened, once it is found inside the model
    directory `inside` (see `files.open_regular`); the copy's path."""
    target = target_dir / extra.name
    with open_regular(extra, "extra model file", inside=inside) as f, open(target, "wb") as out:
        shutil.copyfileobj(f, out)
    return target


@app.command("convert")
def convert_cli(
    src: Annotated[str, typer.Argument(help=WEIGHTS_HELP)],
    dest: Annotated[Path, typer.Argument(help="output directory (new or empty)")],
    to: Annotated[
        Optional[str], typer.Option(help="own or hdf5 (default: the other format than SRC's)")
    ] = None,
    stem: Annotated[
        Optional[str],
        typer.Option(
            help="with --to hdf5: files `elmo_<stem>_options.json`, `elmo_<stem>_weights.hdf5`"
        ),
    ] = None,
):
    """Convert weights between the bilm-tf / AllenNLP hdf5 layout and this project's format (an
    ELMoForManyLangs model converts to this project's format only).

    `load_bilm` gives the same outputs before and after, bit for bit. The hdf5 layout keeps no state
    policy and loads as warm: a zero or carry model stays in this project's format, and so does one
    that reads its tokens lowercased (bilm-tf and AllenNLP would feed it cased text). The softmax
    and vocabulary that `pretrain` writes beside a model (lm_head.pt, vocab.txt) are copied along,
    so `pretrain --init-from DEST` continues with them. DEST appears complete or not at all (a full
    disk leaves nothing behind).
    """
    with errors():
        check_stem(stem)
        bilm, files = load_bilm(src), locate(src)
        target = to or ("hdf5" if files.kind == "own" else "own")
        if target not in ("own", "hdf5"):
            raise ElmoConfigError(f"--to must be own or hdf5, got {target!r}")
        if stem is not None and target != "hdf5":
            raise ElmoConfigError("--stem names the files of the hdf5 layout: add --to hdf5")
        if exists(dest, "output directory") and (not dest.is_dir() or any(dest.iterdir())):
            raise ElmoFileError(f"{dest} exists and is not an empty directory")
        # beside the model's weights (`pretrain`'s OUT/model), never in the cache of published ones
        home = files.weights.parent
        inside = files.directory or home  # the directory given, which every file read is inside
        extras = [
            inside_dir(home, name, "extra model file")
            for name in EXTRA_FILES
            if not files.published and (home / name).is_file()
        ]
        for extra in extras:
            # copied only if it is a plain state dict, as `pretrain --init-from` reads it
            if extra.name == HEAD_FILE:
                read_state_dict(extra, str(extra), inside=inside)
        with write_errors(dest), atomic_dir(dest) as tmp:  # DEST appears complete or not at all
            if target == "hdf5":
                written = list(export_hdf5(bilm, tmp, stem=stem))
            else:
                written = locate(save_bilm(bilm, tmp)).paths
            written += [copy_inside(extra, tmp, inside) for extra in extras]
        paths, source = [dest / path.name for path in written], describe_source(src)
    typer.echo(
        "wrote "
        + " ".join(str(p) for p in paths)
        + ("" if source == src else f" (from the {source})")
    )
