"""One error base: every kind is an `ElmoError`, the old names still work (with a
DeprecationWarning), and the command line turns an `ElmoError` into one `error:` line and leaves
other exceptions (bugs) their traceback."""

from __future__ import annotations

import pytest

import spacy_elmo
from spacy_elmo import ElmoConfigError, ElmoError, ElmoFileError, ElmoResourceError, ElmoResumeError
from spacy_elmo.cli.app import errors


def test_kinds_share_the_base_and_keep_their_builtin_parents():
    for kind in (ElmoConfigError, ElmoFileError, ElmoResourceError, ElmoResumeError):
        assert issubclass(kind, ElmoError)
    assert issubclass(ElmoFileError, ValueError) and issubclass(ElmoConfigError, ValueError)
    assert issubclass(ElmoResourceError, OSError) and issubclass(ElmoResumeError, ElmoFileError)


@pytest.mark.parametrize(
    "module,name,target",
    [
        ("spacy_elmo.bilm", "WeightFileError", ElmoFileError),
        ("spacy_elmo.bilm", "BiLMConfigError", ElmoFileError),
        ("spacy_elmo.pretrain", "PretrainError", ElmoError),
    ],
)
def test_old_names_warn_and_still_catch(module, name, target):
    import importlib

    with pytest.warns(DeprecationWarning, match=name):
        old = getattr(importlib.import_module(module), name)
    assert old is target


def test_the_command_line_catches_elmo_errors_only(capsys):
    import typer

    with pytest.raises(typer.Exit) as exit_info:
        with errors():
            raise ElmoConfigError("--layer must be all, top, average or a number")
    assert exit_info.value.exit_code == 1
    assert capsys.readouterr().err == "error: --layer must be all, top, average or a number\n"
    # a bug (here a plain ValueError) is not dressed up as bad input
    with pytest.raises(ValueError):
        with errors():
            raise ValueError("internal")


def test_every_public_error_name_is_exported():
    assert {
        "ElmoError",
        "ElmoConfigError",
        "ElmoFileError",
        "ElmoResourceError",
        "ElmoResumeError",
    } <= set(spacy_elmo.__all__)
