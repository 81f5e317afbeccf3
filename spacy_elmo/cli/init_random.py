"""`python -m spacy_elmo init-random`: random, untrained weights in a published model's layout, for
offline use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ElmoFileError
from ..files import atomic_dir, exists, write_errors
from ..weights.hub import SIZES
from ..weights.untrained import write_untrained
from .app import app, errors


@app.command("init-random")
def init_random_cli(
    output: Annotated[Path, typer.Argument(help="directory to write (new or empty)")],
    size: Annotated[
        str,
        typer.Option(
            help=f"the published model whose sizes and file names it takes: {', '.join(SIZES)}"
        ),
    ] = "small",
    seed: Annotated[
        int, typer.Option(min=0, max=2**32 - 1, help="the same seed writes the same weights")
    ] = 0,
):
    """Write a biLM of random, untrained weights in a published model's layout: every example runs
    offline.

    For trying the API and the commands without downloading (the published small model is 54 MB):
    its vectors mean nothing. Labelled untrained in its options file: `load_bilm` warns
    (ElmoUntrainedWarning) and `info` says so. Pass OUTPUT wherever the examples name a published
    model ("small").
    """
    with errors():
        if exists(output, "output directory") and (not output.is_dir() or any(output.iterdir())):
            raise ElmoFileError(f"{output} exists and is not an empty directory")
        with write_errors(output), atomic_dir(output) as tmp:
            written = write_untrained(tmp, size, seed)
    typer.echo(
        f"wrote {' '.join(str(output / path.name) for path in written)}: random, untrained weights "
        f"at the "
        f"published {size} model's sizes, for trying the API offline (its vectors mean nothing); "
        f"pass "
        f'"{output}" wherever the examples say "{size}"'
    )
