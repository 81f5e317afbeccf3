"""The typer application of `python -m spacy_elmo`, the one place expected failures become an
`error:` line, and the entry point. Each command lives in its own module of this package."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Optional

import typer

from ..errors import ElmoError
from ..weights import hub

app = typer.Typer(
    name="spacy_elmo",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
    help="ELMo for spaCy: embed text, convert and inspect weights, download the published models, "
    "pretrain a biLM, write a training config whose components read ELMo.",
)
WEIGHTS_HELP = (
    "weights: a directory (bilm-tf / AllenNLP options JSON + hdf5, an ELMoForManyLangs model, this "
    "project's format, or a saved spaCy pipeline: the biLM of its one elmo component) or a "
    "published "
    f"model downloaded before ({', '.join(hub.PUBLISHED)})"
)
# Typer reads the annotations at run time, so they keep `Optional[X]` (`X | None` needs Python
# 3.10).


@contextmanager
def errors():
    """Expected failures -> one `error: ...` line and exit code 1, never a traceback. Every expected
    failure is an `ElmoError` naming the file or setting; anything else is a bug and keeps its
    traceback."""
    try:
        yield
    except ElmoError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point of `python -m spacy_elmo` and the `spacy-elmo` script; exits with the command's
    code. A usage error (an unknown option or command, a missing argument, a value of the wrong
    type) is one `error:` line and exit 1 too, like every expected failure (click's own way is a box
    and exit 2); no arguments: the help."""
    # click's exceptions as this typer raises them: typer >= 0.2x carries its own copy of click
    try:
        from typer._click import exceptions as click_errors
    except ImportError:
        from click import exceptions as click_errors

    try:
        code = typer.main.get_command(app).main(args=argv, standalone_mode=False)
    except click_errors.NoArgsIsHelpError as err:
        typer.echo(err.ctx.get_help())
        code = 0
    except click_errors.ClickException as err:  # UsageError, BadParameter, ...: what the user typed
        where = getattr(err, "ctx", None)
        hint = f" (see '{where.command_path} --help')" if where is not None else ""
        typer.echo("error: " + " ".join(f"{err.format_message()}{hint}".split()), err=True)
        code = 1
    except typer.Abort:  # end of input at a prompt
        typer.echo("error: aborted", err=True)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
