"""The study's scripts on bad input, run as the project runs them: one `error:` line and exit code
1, before any work, never a traceback."""

import os
import subprocess
import sys

import pytest

from project.scripts.run_study import Study
from project.scripts.study import SCALES
from spacy_elmo import ElmoFileError

from ..helpers import REPO
from .project_copy import copy_project


def script(project, name, *args):
    """`python -m project.scripts.NAME ARGS` in the project copy `project`."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", f"project.scripts.{name}", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("pretrain_bilm", ["--weights", "/nonexistent"], "ELMo weights not found: /nonexistent"),
        (
            "run_study",
            ["train", "--bilm", "/nonexistent", "--tasks", "pos", "--systems", "base", "elmo"],
            "ELMo weights not found: /nonexistent",
        ),
        ("run_study", ["train", "--fractions", "0.5"], "0.5"),
    ],
)
def test_bad_input_to_a_script_is_one_error_line(tmp_path, name, args, message):
    copy_project(tmp_path)
    result = script(tmp_path, name, "--scale", "smoke", *args)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "project" / "training" / "smoke" / "runs").exists()


def test_missing_biLM_stops_the_training_step_before_any_run(tmp_path):
    """The base runs need no biLM, but the step stops at once rather than after them."""
    study = Study(SCALES["smoke"], "/nonexistent", "uner", tasks=["pos"], systems=["base", "elmo"])
    study.training = tmp_path / "training"
    with pytest.raises(ElmoFileError, match="/nonexistent"):
        study.train_step("main")
    assert not (study.training / "runs").exists()


def test_a_fraction_outside_the_study_is_refused_naming_the_studys_fractions():
    with pytest.raises(SystemExit) as stop:
        Study(SCALES["full"], None, "uner", fractions=[0.5, 1.0])
    message = str(stop.value)
    assert message.startswith("error: ") and "0.5" in message, message
    assert "1%, 10%, 100%" in message or "0.01, 0.1, 1" in message, message
