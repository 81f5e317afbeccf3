"""`python -m spacy_elmo download`: a published model into the cache."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..weights import hub
from .app import app, errors


@app.command("download")
def download_cli(
    name: Annotated[str, typer.Argument(help=", ".join(hub.PUBLISHED))],
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
    deadline: Annotated[
        Optional[float],
        typer.Option(
            min=0.001,
            help="seconds each file may take, all of each request (headers too) and retries "
            "included (default: a minute plus the most bytes the file may have at 64 KiB/s: "
            "for the weights, their parameters in float32, 5% and 1 MiB more; the part file "
            "stays for the next run)",
        ),
    ] = None,
):
    """Fetch a published AllenNLP model into the cache ($SPACY_ELMO_CACHE, default
    ~/.cache/spacy_elmo).

    Resumable: an interrupted download continues from its .part file where the server still names
    the file it came from (If-Range with its ETag or Last-Modified), else starts over. A file is
    complete when its size matches the server's, then it must load and have the published model's
    sizes (LSTM, projection, char CNN), and its sha256 is recorded and checked on every later use.
    `load_bilm(NAME)` and the `elmo` component's `weights = NAME` then use the cache. A file larger
    than the published one can be is refused; a full disk is one error that removes the part file.
    $SPACY_ELMO_BASE_URL names a mirror of AllenNLP's server (the same paths below it).
    """
    from tqdm import tqdm

    from ..weights.download import download

    def bar(desc: str, total: int, initial: int):
        return tqdm(
            desc=desc, total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024
        )

    with errors():
        directory = download(
            hub.check_name(name), progress=bar if progress else None, deadline=deadline
        )
    typer.echo(
        f"{name}: {directory} (load with spacy_elmo.load_bilm({name!r}) or the elmo component's "
        f'weights = "{name}")'
    )
