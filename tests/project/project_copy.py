"""A copy of the spaCy project in a temporary directory, and `python -m spacy project ...` run in
it."""

import os
import shutil
import subprocess
import sys

from ..helpers import REPO


def copy_project(target):
    shutil.copy(REPO / "project.yml", target / "project.yml")
    for part in ("configs", "scripts"):
        shutil.copytree(
            REPO / "project" / part,
            target / "project" / part,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    for name in ("assets.json", "__init__.py"):
        shutil.copy(REPO / "project" / name, target / "project" / name)


def spacy_project(*args, cwd, env=None, check=True, timeout=900):
    """Run `python -m spacy project ARGS` in cwd (spacy_elmo importable); with check, assert it
    succeeds."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "project", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result
