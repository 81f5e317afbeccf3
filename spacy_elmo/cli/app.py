"""The typer application of `python -m spacy_elmo`, the one place expected failures become an `error:` line,
and the entry point. Each command lives in its own module of this package."""
from __future__ import annotations

from contextlib import contextmanager

import typer

from ..bilm import hub
from ..errors import ElmoError

app = typer.Typer(name="spacy_elmo", no_args_is_help=True, rich_markup_mode="markdown", add_completion=False,
                  pretty_exceptions_enable=False,
                  help="ELMo for spaCy: embed text, convert and inspect weights, download the published models, "
                       "pretrain a biLM, write a training config whose components read ELMo.")
WEIGHTS_HELP = ("weights: a directory (bilm-tf / AllenNLP options JSON + hdf5, an ELMoForManyLangs model, or this "
                f"project's format) or a published model downloaded before ({', '.join(hub.PUBLISHED)})")
# Typer reads the annotations at run time, so they keep `Optional[X]` (`X | None` needs Python 3.10).


@contextmanager
def errors():
    """Expected failures -> one `error: ...` line and exit code 1, never a traceback. Every expected failure
    is an `ElmoError` naming the file or setting; anything else is a bug and keeps its traceback."""
    try:
        yield
    except ElmoError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m spacy_elmo` and the `spacy-elmo` script; exits with the command's code."""
    app(args=argv)
