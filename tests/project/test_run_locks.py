"""The locks that let several processes share a training step: each run is claimed by one of
them, a lock its owner left behind is taken over (also where its pid now belongs to another
process), and a run left to another process is named at the end of the step."""

import json
import os
import subprocess
import sys

import pytest

from project.scripts.run_locks import claim
from project.scripts.run_study import Study
from project.scripts.study import SCALES

from ..helpers import REPO

HOLD = """
import sys, time
from pathlib import Path
from project.scripts.run_locks import claim
with claim(Path(sys.argv[1])) as mine:
    print(mine, flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """A live process holding a lock: call it with the lock's path; it is ended after the test."""
    started = []

    def hold(lock):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True, env=env
        )
        started.append(process)
        assert process.stdout.readline().strip() == "True"
        return process

    yield hold
    for process in started:
        process.kill()
        process.wait()


def test_processes_sharing_a_step_claim_each_run_once(tmp_path):
    """`run_study.py train` run by two processes at once: each run is claimed by one of them; the
    lock of a process that died is taken over."""
    lock = tmp_path / "pos-elmo-f1-s0.lock"
    with claim(lock) as first:
        with claim(lock) as second:
            assert first and not second
    assert not lock.exists()
    # a dead process's pid, in this format and the earlier one (a bare pid); a lock cut off
    for left_behind in ('{"pid": 999999999, "started": 1}', "999999999", ""):
        lock.write_text(left_behind)
        with claim(lock) as mine:
            assert mine and json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_lock_whose_pid_now_belongs_to_another_process_is_taken_over(tmp_path, holder):
    """The lock records its owner's pid and start time: a live process of that pid that started
    at another time (the pid reused, after a restart say) does not hold it."""
    lock = tmp_path / "pos-base-f0.1-s0.lock"
    process = holder(lock)
    record = json.loads(lock.read_text())
    assert record["pid"] == process.pid
    with claim(lock) as mine:
        assert not mine  # its owner is alive
    if record.get("started") is None:
        pytest.skip("no process start times here (/proc): the pid alone is checked")
    lock.write_text(json.dumps({**record, "started": record["started"] - 1}))
    with claim(lock) as mine:
        assert mine
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_run_left_to_another_process_is_named_at_the_end_of_the_step(tmp_path, holder, capsys):
    study = Study(SCALES["smoke"], str(tmp_path / "bilm"), "uner", tasks=["pos"], systems=["base"])
    study.training = tmp_path / "training"
    holder(study.training / "runs" / "pos-base-f1-s0.lock")
    study.train_step("main")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "left to another process" in last and "pos-base-f1-s0" in last, last
    assert not (study.training / "runs" / "pos-base-f1-s0").exists()
