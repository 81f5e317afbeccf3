"""Data-parallel training: 2 CPU processes (torchrun, gloo) equal one process on both ranks'
batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from ..helpers import override_args, quiet_train, tiny_config, toy_sentences, write_corpus


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_two_processes_equal_one_on_the_union(tmp_path, scheme):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(300))
    settings = dict(
        training__scheme=scheme,
        training__max_steps=6,
        training__batch_tokens=60,
        training__learning_rate=0.01,
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "spacy_elmo",
        "pretrain",
        str(tmp_path / "ddp"),
        "--threads",
        "1",
        "--no-progress",
        *override_args(train_path, None, **settings),
    ]
    # stream: stopped at step 3, then resumed: every rank's part of the checkpoint counts
    if scheme == "stream":
        result = subprocess.run(
            [*cmd, "--training.max_steps", "3"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        manifest = json.loads((tmp_path / "ddp" / "checkpoint" / "checkpoint.json").read_text())
        assert (manifest["step"], manifest["world"]) == (3, 2)
        assert sorted(manifest["sha256"]) == ["model.pt", "rank0.pt", "rank1.pt"]
        # each rank draws its own dropout masks: their generators differ
        step_dir = tmp_path / "ddp" / "checkpoint" / "step-000000003"
        rngs = [torch.load(step_dir / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
        assert not torch.equal(rngs[0]["torch_rng"], rngs[1]["torch_rng"])
        cmd.append("--resume")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 process(es)" in result.stderr
    assert ("resumed at step 3" in result.stderr) == (scheme == "stream")

    # one process, batches twice as large: rank r's rows / sentences are its share of each global
    # batch
    settings["training__batch_tokens"] = 120
    quiet_train(tiny_config(train_path, None, **settings), tmp_path / "single")
    for name in ("weights.pt", "lm_head.pt"):
        a = torch.load(tmp_path / "ddp" / "model" / name, weights_only=True)
        b = torch.load(tmp_path / "single" / "model" / name, weights_only=True)
        for key in a:
            if key.startswith("warm_"):
                continue
            torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)
    # and the two ranks did not each train alone: a single process on one rank's batches differs
    settings["training__batch_tokens"] = 60
    quiet_train(tiny_config(train_path, None, **settings), tmp_path / "half")
    a = torch.load(tmp_path / "ddp" / "model" / "weights.pt", weights_only=True)
    c = torch.load(tmp_path / "half" / "model" / "weights.pt", weights_only=True)
    assert not torch.allclose(a["lstm.layers.0.w_input"], c["lstm.layers.0.w_input"], atol=1e-5)


# Rank 0 alone is pressed Ctrl-C (SIGINT) during its 5th step, as a signal may reach one process
# first; with the other rank it stops after the next step, both writing the checkpoint of that step.
ONE_RANK_PRESSED = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
from spacy_elmo.cli import main
from spacy_elmo.pretrain.train import Trainer
step = Trainer._step
def pressed(self, *args):
    if self.rank == 0 and self.progress.step == 4:
        os.kill(os.getpid(), signal.SIGINT)
    return step(self, *args)
Trainer._step = pressed
main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_under_torchrun_checkpoints_every_rank_at_one_step(tmp_path):
    """Ctrl-C saves the step under torchrun too: all processes stop after the same step and write
    its checkpoint, which `--resume` continues (it used to lose every step since the last one)."""
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(300))
    script = tmp_path / "one_rank_pressed.py"
    script.write_text(ONE_RANK_PRESSED, encoding="utf-8")
    settings = dict(training__max_steps=40, training__batch_tokens=60)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + [str(script), "pretrain", str(tmp_path / "ddp"), "--threads", "1", "--no-progress"]
        + override_args(train_path, None, **settings),
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=280,
    )
    assert result.returncode != 0, result.stderr[-3000:]
    assert "checkpoint of step 6 saved" in result.stderr, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "ddp" / "checkpoint" / "checkpoint.json").read_text())
    assert (manifest["step"], manifest["world"]) == (6, 2)
    assert not (tmp_path / "ddp" / "model").exists()
