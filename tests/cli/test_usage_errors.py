"""The README's claim "bad input ends with one `error:` line and exit code 1" holds for the command
line's own argument errors too (typer and click answer them with exit 2 inside a box otherwise):
issue 34 item 11."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..helpers import ENV, REPO, one_error_line, run_cli

USAGE_ERRORS = [
    (["info", "--bogus", "x"], "no such option: --bogus"),
    (["info"], "missing argument 'MODEL'"),
    (["embed", "in.txt", "out.hdf5"], "missing option '--weights'"),
    (
        ["embed", "in.txt", "out.hdf5", "--weights", "small", "--batch-size", "abc"],
        "invalid value for '--batch-size'",
    ),
    (["embed", "in.txt", "out.hdf5", "--weights", "small", "--batch-size", "0"], "--batch-size"),
    (["no-such-command"], "no such command 'no-such-command'"),
    (["convert", "a", "b", "c"], "unexpected extra argument(s) (c)"),
]


@pytest.mark.parametrize("args,says", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_a_usage_error_is_one_error_line_and_exit_1(args, says, capsys):
    assert run_cli(*args) == 1
    out = capsys.readouterr()
    line = one_error_line(out.err)
    assert says.lower() in line.lower() and out.out == ""
    assert "--help" in line  # where to look next


def test_a_usage_error_in_a_child_process():
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "info", "--bogus"],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert one_error_line(done.stderr).startswith("error: No such option: --bogus")


def test_help_and_no_arguments_still_print_the_usage(capsys):
    assert run_cli() == 0
    assert "Usage" in capsys.readouterr().out
    assert run_cli("--help") == 0
    assert "Usage" in capsys.readouterr().out
    assert run_cli("info", "--help") == 0
    assert "Usage" in capsys.readouterr().out


def test_an_unexpected_error_keeps_its_own_traceback(monkeypatch, tmp_path):
    """A bug is not an expected failure: it reaches the caller as itself (it was an AttributeError
    of the error handling)."""
    from spacy_elmo.cli import info

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(info, "describe", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli("info", tmp_path)
