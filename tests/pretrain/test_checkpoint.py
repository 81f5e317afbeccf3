"""Checkpoints and `--resume`: a kill at any point of a checkpoint resumes bit for bit, parts that
disagree are refused, hostile or missing files give one error line, an edited corpus is noticed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from spacy_elmo import ElmoFileError, ElmoResourceError, load_bilm
from spacy_elmo.files import sha256_file
from spacy_elmo.pretrain import checkpoint, train

from ..helpers import (
    REPO,
    full_disk_in_torch_save,
    override_args,
    quiet_train,
    run_pretrain,
    tiny_config,
    toy_sentences,
    write_corpus,
)

# Dropout, the sampled softmax and carried states: a resume that mixes two checkpoints shows.
SETTINGS = dict(
    training__scheme="stream",
    training__dropout=0.2,
    softmax__type="sampled",
    softmax__n_samples=20,
    training__optimizer="adagrad",
    training__learning_rate=0.2,
    training__checkpoint_every=4,
    training__max_steps=10,
    training__eval_every=3,
)

# A child process trains with SETTINGS and kills itself (SIGKILL) just before the `number`-th call
# of `function` whose arguments mention `name` (torch.save: a part; os.replace: publishing;
# shutil.rmtree: dropping the previous checkpoint).
CHILD = """
import os, shutil, signal, sys
import torch
torch.set_num_threads(1)
from tests.helpers import tiny_config
from spacy_elmo.pretrain import checkpoint, train
function, name, number, out, train_path, settings = sys.argv[1:7]
module, attribute = function.split(".")
target = {"torch": torch, "os": os, "shutil": shutil}[module]
real, calls = getattr(target, attribute), [0]
def hooked(*args, **kwargs):
    if any(name in str(a) for a in args):
        calls[0] += 1
        if calls[0] == int(number):
            os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
setattr(target, attribute, hooked)
train(tiny_config(train_path, None, **eval(settings)), out, progress_bar=False, log=lambda m: None)
"""


def assert_same_model(a, b):
    for name in ("weights.pt", "lm_head.pt"):
        x = torch.load(a / "model" / name, weights_only=True)
        y = torch.load(b / "model" / name, weights_only=True)
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), (name, key)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "train.txt", toy_sentences(300))


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    quiet_train(tiny_config(corpus, None, **SETTINGS), out)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kill",
    [
        ("torch.save", "model.pt", 2),
        ("torch.save", "rank0.pt", 3),
        ("os.replace", "checkpoint.json", 2),
        ("shutil.rmtree", "step-", 1),
    ],
    ids=["between-parts", "before-last", "before-publishing", "before-cleanup"],
)
def test_kill_inside_a_checkpoint_then_resume_is_bit_exact(corpus, uninterrupted, tmp_path, kill):
    """Killed inside the second checkpoint (step 8; "before-last": inside the final one at step 10):
    the resumed run ends with the weights of the uninterrupted one."""
    out = tmp_path / "out"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, kill), str(out), str(corpus), repr(SETTINGS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert child.returncode == -9, child.stderr[-2000:]
    assert not (out / "model").exists()
    assert (out / "lock").exists()  # the killed run's: its flock went with it, blocking nothing
    quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    assert_same_model(out, uninterrupted)
    assert metric_steps(out) == metric_steps(uninterrupted) == [3, 6, 9, 10]  # none twice
    assert metric_losses(out) == metric_losses(uninterrupted)  # from the last report, not resume


# A child process runs `python -m spacy_elmo pretrain ARGS` and presses Ctrl-C (SIGINT) in the
# middle of the report of step $AT (3: the first, the first checkpoint would be at step 4; 10: the
# final one, after the final checkpoint).
CTRL_C = """
import os, signal, sys
# SIGINT taken as in a terminal, also where the suite runs as a background job (SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
import torch
torch.set_num_threads(1)
from spacy_elmo.cli import main
from spacy_elmo.pretrain.train import Trainer
report = Trainer._report
def pressed(self, *args):
    if self.progress.step == int(os.environ["AT"]):
        os.kill(os.getpid(), signal.SIGINT)
    report(self, *args)
Trainer._report = pressed
main(sys.argv[1:])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("at", [3, 10])
def test_ctrl_c_checkpoints_the_step_and_resume_is_bit_exact(corpus, uninterrupted, tmp_path, at):
    """Ctrl-C ends the step it came in, saves it, says which step --resume continues from; the
    resumed run ends with the weights and the learning curve of the uninterrupted one."""
    out = tmp_path / "out"
    child = subprocess.run(
        [sys.executable, "-c", CTRL_C, "pretrain", str(out), "--no-progress"]
        + override_args(corpus, None, **SETTINGS),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "OMP_NUM_THREADS": "1", "AT": str(at)},
    )
    assert child.returncode == 130, child.stderr[-2000:]
    last = child.stderr.strip().splitlines()[-1]
    assert last == f"interrupted; continue with --resume (from the checkpoint of step {at})", last
    quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    assert_same_model(out, uninterrupted)
    assert metric_steps(out) == metric_steps(uninterrupted) == [3, 6, 9, 10]
    assert metric_losses(out) == metric_losses(uninterrupted)


def test_resuming_a_complete_run_trains_nothing_and_records_nothing(
    corpus, uninterrupted, tmp_path
):
    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    summary = quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    assert summary["steps"] == 10
    assert metric_steps(out) == [3, 6, 9, 10]  # no second record of step 10
    assert_same_model(out, uninterrupted)


def model_files(out):
    """Each file of OUT/model and OUT/model-hdf5 (and the directories) -> (inode, mtime, sha256)."""
    files = {}
    for directory in (out / "model", out / "model-hdf5"):
        if directory.exists():
            stat = directory.stat()
            files[directory.name] = (stat.st_ino, stat.st_mtime_ns)
            for path in directory.iterdir():
                stat = path.stat()
                files[path.name] = (stat.st_ino, stat.st_mtime_ns, sha256_file(path))
    return files


def test_resuming_a_finished_run_says_so_and_leaves_its_model_untouched(
    corpus, uninterrupted, tmp_path
):
    """A finished run resumed: one line says it is finished, its model (and export) keep their
    files; where its final save was interrupted (the model incomplete, the export asked for and
    missing) it saves them as an uninterrupted run does."""
    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    before, logged = model_files(out), []
    saved = json.loads((out / "model" / "training.json").read_text())
    config = tiny_config(corpus, None, **SETTINGS)
    summary = train(config, out, resume=True, progress_bar=False, log=logged.append)
    assert model_files(out) == before and summary == saved
    assert logged[-1] == f"{out} finished at step 10: its model ({out / 'model'}) is saved", logged
    assert not any(line.startswith("saved") for line in logged)
    (out / "model" / "lm_head.pt").unlink()  # a save interrupted, as no save of ours leaves it
    quiet_train(config, out, resume=True)
    assert_same_model(out, uninterrupted)
    assert model_files(out) != before
    export = tiny_config(corpus, None, **SETTINGS, training__export_hdf5=True)
    quiet_train(export, out, resume=True)  # asked for the export it lacks: written
    assert (out / "model-hdf5" / "weights.hdf5").is_file()
    before, logged = model_files(out), []
    train(export, out, resume=True, progress_bar=False, log=logged.append)
    assert model_files(out) == before and "finished at step 10" in logged[-1]


def metric_steps(out):
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def metric_losses(out):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["train_loss"] for line in lines]


class Evil:
    """Unpickling this runs `touch MARKER`: a checkpoint must never be unpickled freely."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def rehash(out, part):
    """Record `part`'s sha256 in the checkpoint's manifest, as a consistent but hostile set
    would."""
    manifest_path = out / "checkpoint" / "checkpoint.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sha256"][part.name] = sha256_file(part)
    manifest_path.write_text(json.dumps(manifest))


@pytest.fixture()
def cli_run(corpus, tmp_path, capsys):
    """A finished 3-step run through the CLI; returns its arguments."""
    args = [tmp_path / "out", "--no-progress", *override_args(corpus, None, training__max_steps=3)]
    assert run_pretrain(args, capsys)[0] == 0
    return args


def test_resume_without_config_is_one_error_line(cli_run, tmp_path, capsys):
    (tmp_path / "out" / "config.cfg").unlink()
    code, err = run_pretrain([*cli_run, "--resume"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error:"), err
    assert str(tmp_path / "out" / "config.cfg") in err


def test_hostile_checkpoint_is_refused_unread(cli_run, tmp_path, capsys):
    marker = tmp_path / "pwned"
    part = tmp_path / "out" / "checkpoint" / "step-000000003" / "model.pt"
    torch.save({"model": Evil(marker)}, part)
    rehash(tmp_path / "out", part)  # the manifest vouches for it: only the unpickler stands guard
    code, err = run_pretrain([*cli_run, "--resume", "--training.max_steps", "5"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error:"), err
    assert str(part) in err and not marker.exists()


def test_resume_notices_a_corpus_edited_in_place(tmp_path):
    lines = toy_sentences(300)
    path = write_corpus(tmp_path / "train.txt", lines)
    quiet_train(tiny_config(path, None, training__max_steps=3), tmp_path / "out")
    size = path.stat().st_size
    write_corpus(path, [line.replace("the cat", "the dog") for line in lines])  # same length
    assert path.stat().st_size == size
    with pytest.raises(ElmoFileError, match=str(path)):
        quiet_train(tiny_config(path, None, training__max_steps=6), tmp_path / "out", resume=True)


def test_parts_that_disagree_are_refused(corpus, tmp_path):
    """The on-disk state a kill between two unpublished writes made before checkpoints were atomic:
    this step's rank part beside the previous step's model part. Refused, naming both files."""
    out = tmp_path / "out"
    quiet_train(tiny_config(corpus, None, **SETTINGS), out)
    final = out / "checkpoint" / "step-000000010"
    old = tmp_path / "step-8"
    quiet_train(tiny_config(corpus, None, **{**SETTINGS, "training__max_steps": 8}), tmp_path / "b")
    shutil.copytree(tmp_path / "b" / "checkpoint" / "step-000000008", old)
    shutil.copy(old / "model.pt", final / "model.pt")
    with pytest.raises(ElmoFileError, match="parts disagree.*model.pt.*sha256"):
        quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    rehash(out, final / "model.pt")
    with pytest.raises(
        ElmoFileError,
        match=r"parts disagree: .*checkpoint.json is of step 10, .*model.pt of step 8",
    ):
        quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    manifest_path = out / "checkpoint" / "checkpoint.json"
    manifest = json.loads(manifest_path.read_text())
    for bad in (
        {"directory": "../../elsewhere"},
        {"sha256": {"../../etc/passwd": "0"}},
        {"step": "10"},
    ):
        manifest_path.write_text(json.dumps({**manifest, **bad}))
        with pytest.raises(ElmoFileError, match="checkpoint.json: not a checkpoint manifest"):
            quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)
    manifest_path.unlink()
    with pytest.raises(ElmoFileError, match="no checkpoint"):
        quiet_train(tiny_config(corpus, None, **SETTINGS), out, resume=True)


@pytest.mark.parametrize("content", ["evil", "not tensors"])
def test_a_hostile_softmax_to_continue_from_is_refused_unread(
    cli_run, corpus, tmp_path, capsys, content
):
    marker = tmp_path / "pwned"
    head = tmp_path / "out" / "model" / "lm_head.pt"
    torch.save(Evil(marker) if content == "evil" else {"weight": [1, 2]}, head)
    args = [
        tmp_path / "again",
        "--no-progress",
        "--init-from",
        tmp_path / "out" / "model",
        *override_args(corpus, None, training__max_steps=1),
    ]
    code, err = run_pretrain(args, capsys)
    assert (
        code == 1 and "Traceback" not in err and err.endswith("\n") and err.count("error:") == 1
    ), err
    last = err.splitlines()[-1]
    assert last.startswith("error:") and str(head) in last and not marker.exists()


# ----------------------------------------------------------------------------------------- a full
# disk
def full_disk_line(err):
    """The last line of a run that met a full disk: its one `error:` line, no traceback."""
    assert "Traceback" not in err and err.count("error:") == 1, err
    return err.splitlines()[-1]


@pytest.mark.timeout(120)
def test_a_full_disk_while_checkpointing_then_resume_is_bit_exact(
    corpus, uninterrupted, tmp_path, capsys, monkeypatch
):
    """ENOSPC while the second checkpoint's model part is written (step 8): one `error:` line naming
    the part, exit 1; step 4's checkpoint stays and nothing of step 8 is left; with space freed,
    `--resume` ends with the uninterrupted run's weights."""
    out = tmp_path / "out"
    args = [out, "--no-progress", *override_args(corpus, None, **SETTINGS)]
    full_disk_in_torch_save(monkeypatch, "model.pt", number=2)
    code, err = run_pretrain(args, capsys)
    assert code == 1 and full_disk_line(err) == (
        f"error: disk full while writing {out}/checkpoint/step-000000008/"
        "model.pt: free space and run again with --resume"
    )
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == [
        "checkpoint.json",
        "step-000000004",
    ]
    assert not (out / "model").exists()
    monkeypatch.undo()
    assert run_pretrain([*args, "--resume"], capsys)[0] == 0
    assert_same_model(out, uninterrupted)
    assert metric_steps(out) == [3, 6, 9, 10]


def test_a_full_disk_at_the_first_checkpoint_leaves_none(corpus, tmp_path, monkeypatch):
    """Without an earlier checkpoint the advice is to run again (`--resume` would find none)."""
    out = tmp_path / "out"
    full_disk_in_torch_save(monkeypatch, "rank0.pt")
    with pytest.raises(ElmoResourceError) as info:
        quiet_train(
            tiny_config(corpus, None, training__max_steps=2, training__checkpoint_every=1), out
        )
    assert str(info.value) == (
        f"disk full while writing {out}/checkpoint/step-000000001/rank0.pt: "
        "free space and run again"
    )
    assert list((out / "checkpoint").iterdir()) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("part", ["weights.pt", "lm_head.pt"])
def test_a_full_disk_while_saving_the_model_leaves_none(
    corpus, uninterrupted, tmp_path, capsys, monkeypatch, part
):
    """ENOSPC while the final model is written: no `model` directory, no temporary one; `--resume`
    writes it (from the final checkpoint, without training again)."""
    out = tmp_path / "out"
    args = [out, "--no-progress", *override_args(corpus, None, **SETTINGS)]
    full_disk_in_torch_save(monkeypatch, part, number=1)
    code, err = run_pretrain(args, capsys)
    assert code == 1 and full_disk_line(err) == (
        f"error: disk full while writing {out}/model: free space and run again with --resume"
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "bilm_options.json",
        "checkpoint",
        "config.cfg",
        "corpus.json",
        "metrics.jsonl",
        "vocab.txt",
    ]
    monkeypatch.undo()
    assert run_pretrain([*args, "--resume"], capsys)[0] == 0
    assert_same_model(out, uninterrupted)


def test_a_full_disk_while_recording_metrics_keeps_whole_lines(
    corpus, tmp_path, capsys, monkeypatch
):
    """ENOSPC in the middle of a line of metrics.jsonl: the line is cut off again, one error
    line."""
    out = tmp_path / "out"
    real = os.write

    def write(fd, data):
        if (
            os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl")
            and (out / "metrics.jsonl").stat().st_size
        ):
            real(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    args = [
        out,
        "--no-progress",
        *override_args(corpus, None, training__max_steps=4, training__eval_every=1),
    ]
    code, err = run_pretrain(args, capsys)
    assert code == 1 and full_disk_line(err) == (
        f"error: disk full while writing {out}/metrics.jsonl: free space and run again"
    )
    assert metric_steps(out) == [1]


def manifest_in(root, **fields):
    """A checkpoint root holding step 3's directory and a manifest of `fields` over a valid one."""
    (root / "step-000000003").mkdir(parents=True)
    manifest = {
        "step": 3,
        "world": 1,
        "directory": "step-000000003",
        "sha256": {"model.pt": "0" * 64, "rank0.pt": "0" * 64},
        **fields,
    }
    (root / "checkpoint.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "fields",
    [
        {"world": 0, "sha256": {"model.pt": "0" * 64}},
        {"world": -1, "sha256": {"model.pt": "0" * 64}},
        {"sha256": {"model.pt": "0" * 64, "rank0.pt": 0}},
        {"world": 2},
        {"sha256": ["model.pt", "rank0.pt"]},
        {"world": 10**12},
    ],
    ids=["no-process", "negative", "digest-not-text", "rank-part-missing", "list", "huge"],
)
def test_a_manifest_of_no_process_or_a_digest_that_is_no_text_is_refused(tmp_path, fields):
    """A manifest of world 0 named no rank part: this rank's part would be read unchecked. Digests
    as a list were an AttributeError (a traceback); a huge world a list of as many part names."""
    root = manifest_in(tmp_path / "checkpoint", **fields)
    with pytest.raises(ElmoFileError, match="checkpoint.json: not a checkpoint manifest"):
        checkpoint.read_manifest(root)


def test_a_checkpoint_of_the_layout_before_manifests_is_named_so(tmp_path):
    root = tmp_path / "checkpoint"
    root.mkdir()
    with pytest.raises(ElmoFileError, match="not found$"):
        checkpoint.read_manifest(root)
    torch.save({"step": 3}, root / "model.pt")
    with pytest.raises(ElmoFileError, match="not found .only files of an older layout"):
        checkpoint.read_manifest(root)


def test_a_published_part_without_what_resume_reads_is_refused_naming_it(tmp_path):
    """Parts whose digests the manifest vouches for, but that lack a key resume reads: one error
    naming the part and the keys, not a KeyError."""
    root = tmp_path / "checkpoint"
    own = {"step": 3, "torch_rng": torch.zeros(2), "head_rng": torch.zeros(2), "state": {}}
    checkpoint.save(root, 3, 0, 1, own, {"step": 3, "model": {}})
    with pytest.raises(ElmoFileError, match=r"model.pt: not a part .* \(no optimizer, progress\)"):
        checkpoint.load(root, 0)
    checkpoint.save(
        root, 4, 0, 1, {"step": 4}, {"step": 4, "model": {}, "optimizer": {}, "progress": {}}
    )
    assert not (root / "step-000000003").exists()
    with pytest.raises(ElmoFileError, match=r"rank0.pt: not a part .* \(no torch_rng, head_rng"):
        checkpoint.load(root, 0)


def exported_weights(out):
    """The weights of OUT/model-hdf5 as a biLM reads them."""
    return dict(load_bilm(out / "model-hdf5", state="zero").network.named_parameters())


def test_a_run_killed_between_saving_its_model_and_its_export_exports_again(corpus, tmp_path):
    """The model and its bilm-tf export are two directories, each replaced whole: a run resumed
    to more steps and killed between the two leaves the export of the earlier end. Resumed again,
    it finds its model saved but an export of other weights, and exports again."""
    config = tiny_config(corpus, None, **SETTINGS, training__export_hdf5=True)
    out, earlier = tmp_path / "out", tmp_path / "earlier"
    quiet_train(config, out)
    export = exported_weights(out)
    quiet_train(
        tiny_config(
            corpus, None, **{**SETTINGS, "training__max_steps": 8}, training__export_hdf5=True
        ),
        earlier,
    )
    shutil.rmtree(out / "model-hdf5")
    shutil.copytree(earlier / "model-hdf5", out / "model-hdf5")
    stale = exported_weights(out)
    assert not all(torch.equal(stale[k], export[k]) for k in export)
    quiet_train(config, out, resume=True)
    resaved = exported_weights(out)
    assert resaved.keys() == export.keys()
    assert all(torch.equal(resaved[k], export[k]) for k in export)
