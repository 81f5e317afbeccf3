"""The command line, `python -m spacy_elmo COMMAND`: one module per command (embed, convert, info,
download, pretrain, init-config, init-random) on the typer application of `app`."""

from . import convert, download, embed, info, init_config, init_random, pretrain  # noqa: F401 (each registers its command)
from .app import app, main

__all__ = ["app", "main"]
