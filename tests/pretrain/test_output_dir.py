"""The output directory of `pretrain`: a run in it is never replaced unasked, one that cannot be
written is one error line, a bad device is refused before any work, and a run resumes from any
working directory."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from spacy_elmo import ElmoFileError, ElmoResumeError
from spacy_elmo.pretrain import Trainer

from ..helpers import (
    ENV,
    one_error_line,
    override_args,
    quiet_train,
    run_pretrain,
    tiny_config,
    tmpfs,
    toy_sentences,
    write_corpus,
)


def files_of(out):
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_a_new_run_never_replaces_an_earlier_one(tmp_path):
    """A new run (no resume) over a run's checkpoint or model is refused before anything is
    written; over a run stopped while writing its first checkpoint it starts afresh."""
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    quiet_train(tiny_config(corpus, None, training__max_steps=3, training__eval_every=1), out)
    files = files_of(out)
    new = tiny_config(corpus, None, training__max_steps=3, training__seed=7)
    with pytest.raises(ElmoResumeError, match=r"\(its checkpoint at step 3 and its model\): pass"):
        Trainer(new, out, progress_bar=False, log=lambda m: None)
    assert files_of(out) == files
    shutil.rmtree(out / "model")
    (out / "checkpoint" / "checkpoint.json").unlink()  # its parts, published by no manifest
    Trainer(new, out, progress_bar=False, log=lambda m: None)
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoint").exists()
    with pytest.raises(ElmoFileError, match="no checkpoint"):
        quiet_train(new, out, resume=True)


def test_rerunning_into_a_run_without_resume_is_one_error_and_keeps_the_run(tmp_path, capsys):
    """Refused before the corpus is read: a rerun whose corpus is too small for one batch (which
    fails only after reading it) leaves the run as it was too; --help says so."""
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    args = [out, "--no-progress", *override_args(corpus, None, training__checkpoint_every=5)]
    assert run_pretrain([*args, "--training.max_steps", "8"], capsys)[0] == 0
    files = files_of(out)
    tiny = write_corpus(tmp_path / "tiny.txt", ["a b"])
    expect = (
        f"error: {out} holds a pretrain run (its checkpoint at step 8 and its model): pass "
        "--resume to continue it, or remove it (or choose another output)"
    )
    for more in (["--training.max_steps", "5"], ["--paths.train", str(tiny)]):
        code, err = run_pretrain([*args, *more], capsys)
        assert code == 1 and one_error_line(err) == expect
        assert files_of(out) == files
    shutil.rmtree(out / "model")
    code, err = run_pretrain([*args, "--training.max_steps", "5"], capsys)
    assert code == 1 and one_error_line(err) == expect.replace(" and its model", "")
    code, out_text = run_pretrain(["--help"], capsys, "out")
    assert code == 0 and "never overwritten" in " ".join(out_text.replace("│", " ").split())


@pytest.mark.timeout(180)
def test_a_second_run_on_the_directory_of_a_live_run_is_refused_naming_its_pid(tmp_path, capsys):
    """While a run goes on (another process, before its first checkpoint), a second run on its
    directory, new or --resume, is one error naming the holder's pid, and the first run's curve
    stays its own; once it is killed (-9) its lock blocks nothing."""
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    args = [out, "--no-progress", "--threads", "1", *override_args(corpus, None)]
    args += ["--training.eval_every", "1", "--training.max_steps", "3"]
    first = subprocess.Popen(
        [sys.executable, "-m", "spacy_elmo", "pretrain", *map(str, args)]
        + ["--training.max_steps", "1000000"],
        env=ENV,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not (out / "metrics.jsonl").exists():  # it trains: its first report is written
            assert first.poll() is None, "the first run ended"
            time.sleep(0.05)
        expect = (
            f"error: {out} is locked by another process that is writing it (pid {first.pid} on "
            f"{socket.gethostname()}; {out / 'lock'}): wait for it to finish, or stop it and run "
            "again"
        )
        for more in ([], ["--resume"]):
            code, err = run_pretrain([*args, *more], capsys)
            assert code == 1 and one_error_line(err) == expect
        assert first.poll() is None
        steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()]
        assert steps == list(range(1, len(steps) + 1))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    code, err = run_pretrain(args, capsys)
    assert code == 0, err
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()] == [1, 2, 3]


@pytest.mark.parametrize(
    "device,expect",
    [
        ("nonsense", "device must be 'cpu', 'cuda' or 'cuda:N', got 'nonsense'"),
        ("cuda:99", "device 'cuda:99': this "),
    ],
)
def test_a_bad_device_is_one_error_before_any_work(tmp_path, capsys, device, expect):
    missing = tmp_path / "no-such-corpus.txt"  # never read: the device is checked first
    code, err = run_pretrain(
        [tmp_path / "out", *override_args(missing, None), "--device", device], capsys
    )
    assert code == 1 and one_error_line(err).startswith(f"error: {expect}"), err
    assert not (tmp_path / "out").exists()


def test_an_output_dir_that_cannot_be_created_is_one_error(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    (tmp_path / "afile").write_text("a file", encoding="utf-8")
    code, err = run_pretrain([tmp_path / "afile" / "sub", *override_args(corpus, None)], capsys)
    assert code == 1
    assert (
        one_error_line(err) == f"error: cannot write {tmp_path / 'afile' / 'sub'}: Not a directory"
    )
    with tmpfs(tmp_path / "disk", "4m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        code, err = run_pretrain([disk / "out", *override_args(corpus, None)], capsys)
        assert code == 1
        assert one_error_line(err) == f"error: cannot write {disk / 'out'}: read-only file system"


def test_a_run_resumes_from_another_working_directory(tmp_path, capsys, monkeypatch):
    """The run records its corpus paths absolute; a run recorded before that (relative paths)
    resumes from the directory it started in and is named clearly from another."""
    (tmp_path / "elsewhere").mkdir()
    write_corpus(tmp_path / "train.txt", toy_sentences(100))
    write_corpus(tmp_path / "dev.txt", toy_sentences(5, seed=1))
    monkeypatch.chdir(tmp_path)

    def run(out, corpus, dev, steps, *more):
        args = [out, "--no-progress", *override_args(corpus, dev, training__max_steps=steps)]
        return run_pretrain([*args, *more], capsys)

    assert run("out", "train.txt", "dev.txt", 2)[0] == 0
    corpus, dev = str(tmp_path / "train.txt"), str(tmp_path / "dev.txt")
    assert list(json.loads((tmp_path / "out" / "corpus.json").read_text())) == [corpus]
    assert f'train = "{corpus}"' in (tmp_path / "out" / "config.cfg").read_text()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, err = run("../out", "../train.txt", "../dev.txt", 3, "--resume")
    assert code == 0 and "resumed at step 2" in err, err
    # as a run of an earlier version recorded it: paths relative to where it started
    config = tmp_path / "out" / "config.cfg"
    config.write_text(config.read_text().replace(corpus, "train.txt").replace(dev, "dev.txt"))
    record = tmp_path / "out" / "corpus.json"
    record.write_text(json.dumps({"train.txt": json.loads(record.read_text())[corpus]}))
    code, err = run("../out", "../train.txt", "../dev.txt", 4, "--resume")
    assert code == 1
    assert one_error_line(err).endswith(
        "with 'train.txt' (relative to the directory that run started in: resume from there)"
    )
    monkeypatch.chdir(tmp_path)
    code, err = run("out", "train.txt", "dev.txt", 4, "--resume")
    assert code == 0 and "resumed at step 3" in err, err


def test_resume_refuses_an_edited_dev_file_as_an_edited_training_file(tmp_path, capsys):
    """The dev file's sha256 is recorded at the start like the training files': a dev set edited
    at the same path would mix two dev sets in metrics.jsonl, so --resume refuses it, in the same
    words."""
    train, dev = (
        write_corpus(tmp_path / name, toy_sentences(100, seed=seed))
        for name, seed in (("train.txt", 0), ("dev.txt", 1))
    )
    out = tmp_path / "out"

    def run(steps, *more):
        args = [out, "--no-progress", *override_args(train, dev, training__max_steps=steps)]
        return run_pretrain([*args, *more], capsys)

    assert run(2)[0] == 0
    for edited, what, record in ((dev, "dev", "dev.json"), (train, "training", "corpus.json")):
        kept = edited.read_bytes()
        write_corpus(edited, toy_sentences(100, seed=7))
        code, err = run(3, "--resume")
        assert code == 1 and one_error_line(err) == (
            f"error: --resume: the {what} file {edited} was edited (its sha256 differs) since the "
            f"run started (recorded in {out / record}); resume only on the same corpus"
        )
        edited.write_bytes(kept)
    code, err = run(3, "--resume")
    assert code == 0 and "resumed at step 2" in err, err


def test_a_run_leaves_no_lock_file_and_one_refused_after_locking_no_directory(tmp_path, capsys):
    """The lock file goes with the run that held it; a run refused after making and locking its
    output directory (a dev set out of the vocabulary) removes the directory it made."""
    train = write_corpus(tmp_path / "train.txt", toy_sentences(50))
    oov = write_corpus(tmp_path / "oov.txt", ["zzz qqq xxx"])
    args = override_args(train, None, training__max_steps=1)
    assert run_pretrain([tmp_path / "out", "--no-progress", *args], capsys)[0] == 0
    assert (tmp_path / "out" / "model").is_dir() and not (tmp_path / "out" / "lock").exists()
    code, err = run_pretrain([tmp_path / "new", *override_args(train, oov)], capsys)
    assert code == 1 and "out of the vocabulary" in err, err
    assert not (tmp_path / "new").exists()
