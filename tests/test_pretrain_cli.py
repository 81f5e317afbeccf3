"""The `pretrain` command: bad input gives one clear message (no traceback); overrides; --help."""
from __future__ import annotations

import gzip

import pytest

from tests.pretrain_helpers import override_args, toy_sentences, write_corpus
from spacy_elmo.pretrain.cli import pretrain_command, split_overrides




def run(args, capsys):
    code = pretrain_command(None, [str(a) for a in args])
    err = capsys.readouterr().err
    return code, err


def test_split_overrides():
    rest, overrides = split_overrides(["out", "--training.max_steps", "5", "--whitespace", "--vocab.size=10",
                                       "--train", "x"])
    assert rest == ["out", "--whitespace", "--train", "x"]
    assert overrides == ["--training.max_steps", "5", "--vocab.size=10"]


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        pretrain_command(None, ["--help"])
    assert exc.value.code == 0
    assert "--section.key" in capsys.readouterr().out


def test_show_config_applies_overrides(capsys):
    assert pretrain_command(None, ["--show-config", "--training.max_steps", "7", "--whitespace"]) == 0
    out = capsys.readouterr().out
    assert "max_steps = 7" in out and 'tokenizer = "whitespace"' in out


@pytest.mark.parametrize("case", ["missing", "empty", "dev_oov", "vocab_too_large", "unknown_setting", "empty_dir"])
def test_bad_input_gives_a_message(tmp_path, capsys, case):
    train = write_corpus(tmp_path / "train.txt", toy_sentences(50))
    dev = write_corpus(tmp_path / "dev.txt", toy_sentences(5, seed=1))
    extra = []
    if case == "missing":
        train = tmp_path / "nope.txt"
        expect = "not found"
    elif case == "empty":
        with gzip.open(tmp_path / "empty.txt.gz", "wt") as f:
            f.write("\n\n  \n")
        train = tmp_path / "empty.txt.gz"
        expect = "empty"
    elif case == "dev_oov":
        dev = write_corpus(tmp_path / "oov.txt", ["zzz qqq xxx", "vvv www"])
        expect = "out of the vocabulary"
    elif case == "vocab_too_large":
        extra = ["--vocab.size", "100000"]
        expect = "larger than the training corpus"
    elif case == "unknown_setting":
        extra = ["--training.max_stepz", "3"]
        expect = "unknown config setting"
    else:
        (tmp_path / "d").mkdir()
        train = tmp_path / "d"
        expect = "holds no files"
    code, err = run([tmp_path / "out", *override_args(train, dev), *extra], capsys)
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith("error:") and expect in err, err


def test_cli_trains_and_resumes(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = [tmp_path / "out", "--no-progress", *override_args(train, train, training__max_steps=3)]
    assert run(args, capsys)[0] == 0
    assert (tmp_path / "out" / "model" / "bilm.json").is_file()
    code, err = run([*args, "--resume", "--training.max_steps", "5"], capsys)
    assert code == 0 and "resumed at step 3" in err
    code, err = run([*args, "--resume", "--model.lstm_dim", "8"], capsys)
    assert code == 1 and "model.lstm_dim" in err
