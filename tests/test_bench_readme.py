"""bench/README.md's commands run as written, or say what they need: the study's own biLM
(`project/training/full/bilm/model`) exists only once the study's pretrain step has run (issue 34
item 11)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from .helpers import ENV, REPO

BENCH_README = REPO / "bench" / "README.md"
STUDY_BILM = "project/training/full/bilm/model"


def test_every_mention_of_the_study_bilm_says_what_writes_it():
    text = BENCH_README.read_text(encoding="utf-8")
    places = [m.end() for m in re.finditer(re.escape(STUDY_BILM), text)]
    assert places
    for end in places:
        assert "spacy project run all" in text[end : end + 300], text[end - 200 : end + 300]


def bench_precision_command() -> list:
    """The `--skip-speed` command of bench/README.md, as its arguments."""
    text = " ".join(BENCH_README.read_text(encoding="utf-8").split())
    found = re.search(r"`python (bench/bench_precision\.py --skip-speed[^`]*)`", text)
    assert found, (
        "bench/README.md has no `python bench/bench_precision.py --skip-speed ...` command"
    )
    return shlex.split(found.group(1))


@pytest.mark.timeout(300)
def test_bench_precision_as_written(tmp_path):
    """Without the study's biLM: one line naming what writes it, no traceback; with the study's path
    left out, as the README says, it runs on the fixture alone."""
    args = bench_precision_command()
    assert STUDY_BILM in args
    if (REPO / STUDY_BILM).exists():
        pytest.skip("the study's biLM exists here: the command would run for minutes")
    done = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[
        -3000:
    ]
    assert STUDY_BILM in lines[0] and "spacy project run all" in lines[0]
    without = [a for a in args if a != STUDY_BILM]
    done = subprocess.run(
        [sys.executable, *without],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "allennlp_elmo_fixture" in done.stdout
