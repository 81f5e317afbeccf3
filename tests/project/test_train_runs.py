"""A study run is trained in the step's own process (`study.spacy_train`): the same pipeline, bit
for bit, as `python -m spacy train` with the same arguments, which the step shows; spaCy's own
failure stops the step with one error line."""

import subprocess
import sys

import pytest
import spacy
from spacy.tokens import Doc, DocBin

from project.scripts.run_study import size_overrides
from project.scripts.study import spacy_train

from ..helpers import CONFIGS, ENV, REPO, toy_sentences

CONFIG = CONFIGS / "tagger_elmo.cfg"


def tagged(path, n, seed):
    """`n` toy sentences tagged by a rule, as a DocBin at `path`."""
    vocab, docs = spacy.blank("en").vocab, DocBin()
    for line in toy_sentences(n, seed):
        words = line.split()
        tags = ["PUNCT" if w in ".!" else "PROPN" if w.istitle() else "X" for w in words]
        docs.add(Doc(vocab, words=words, tags=tags))
    docs.to_disk(path)
    return str(path)


def test_a_run_in_the_steps_process_is_the_run_of_spacy_train(fixture_dir, tmp_path, capsys):
    overrides = {
        "paths.train": tagged(tmp_path / "train.spacy", 24, seed=1),
        "paths.dev": tagged(tmp_path / "dev.spacy", 8, seed=2),
        "paths.elmo": str(fixture_dir),
        "system.seed": 3,
        "system.gpu_allocator": None,
        "training.max_steps": 4,
        "training.eval_frequency": 2,
        **size_overrides(CONFIG, 3, 32),
    }
    spacy_train(CONFIG, tmp_path / "here", overrides)
    shown = capsys.readouterr().out.splitlines()[0]
    assert shown.startswith(f"$ python -m spacy train {CONFIG} --output {tmp_path / 'here'} ")
    # the command as shown, in a process of its own
    command = [sys.executable, *shown.split()[2:]]
    command[command.index("--output") + 1] = str(tmp_path / "apart")
    done = subprocess.run(command, env=ENV, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for part in ("tok2vec/model", "tagger/model", "elmo/model"):
        here, apart = (tmp_path / run / "model-last" / part for run in ("here", "apart"))
        assert here.read_bytes() == apart.read_bytes(), part


def test_where_spacy_train_stops_the_step_stops_with_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        spacy_train(CONFIGS / "tagger_base.cfg", tmp_path / "out", {"no_such.setting": 1})
    assert stop.value.code == "error: spacy train stopped (exit code 1): see above"
    assert "no_such" in capsys.readouterr().out
