"""The `pretrain` command: bad input gives one clear message (no traceback); overrides; --help."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest
import torch
import typer
from thinc.api import Config

from spacy_elmo import ElmoConfigError
from spacy_elmo.cli import app
from spacy_elmo.cli.pretrain import split_overrides
from spacy_elmo.pretrain import load_config, train

from ..helpers import (
    data_path,
    one_error_line,
    override_args,
    run_pretrain,
    tiny_config,
    toy_sentences,
    write_corpus,
)


def test_split_overrides():
    rest, overrides = split_overrides(
        ["out", "--training.max_steps", "5", "--whitespace", "--vocab.size=10", "--train", "x"]
    )
    assert rest == ["out", "--whitespace", "--train", "x"]
    assert overrides == ["--training.max_steps", "5", "--vocab.size=10"]


def test_help(capsys):
    code, out = run_pretrain(["--help"], capsys, "out")
    assert code == 0
    assert "--section.key" in out


def test_a_typer_command_with_help_on_every_option(capsys):
    command = typer.main.get_command(app).commands["pretrain"]
    options = {p.name: p for p in command.params if p.param_type_name == "option"}
    assert {
        "config",
        "train",
        "dev",
        "lang",
        "whitespace",
        "init_from",
        "resume",
        "export_hdf5",
        "device",
        "threads",
        "progress",
        "show_config",
    } <= options.keys()
    assert [name for name, p in options.items() if not p.help] == []
    code, out = run_pretrain(["--help"], capsys, "out")
    assert code == 0 and "torch device" in out


def test_show_config_applies_overrides(capsys):
    code, out = run_pretrain(
        ["--show-config", "--training.max_steps", "7", "--whitespace"], capsys, "out"
    )
    assert code == 0
    assert "max_steps = 7" in out and 'tokenizer = "whitespace"' in out
    # --lang sets corpus.tokenizer and corpus.lang; --train and --dev set paths.train and paths.dev
    args = ["--show-config", "--lang", "de", "--train", "a.txt", "--dev", "b.txt"]
    code, out = run_pretrain(args, capsys, "out")
    config = Config().from_str(out, interpolate=False)
    assert code == 0 and (config["corpus"]["tokenizer"], config["corpus"]["lang"]) == (
        "spacy",
        "de",
    )
    assert (config["paths"]["train"], config["paths"]["dev"]) == ("a.txt", "b.txt")


@pytest.mark.parametrize(
    "case", ["missing", "empty", "dev_oov", "vocab_too_large", "unknown_setting", "empty_dir"]
)
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
    code, err = run_pretrain([tmp_path / "out", *override_args(train, dev), *extra], capsys)
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith("error:") and expect in err, err


@pytest.mark.parametrize("damage", ["latin1", "latin1.gz", "truncated.gz", "corrupt.gz"])
def test_an_unreadable_corpus_file_is_one_error_naming_it(tmp_path, capsys, damage):
    """Non-UTF-8 text names its line (as `wc -l` counts) and byte, past the decoder's first chunk;
    a damaged .gz names the file."""
    lines = "".join(s + "\n" for s in toy_sentences(3000)).encode("utf-8")
    data = lines + "caf\u00e9 au lait\n".encode("latin-1") + lines
    expect = f"invalid UTF-8 on line 3001, byte {len(lines) + 3}"
    if damage.endswith(".gz"):
        packed = gzip.compress(lines * 2)
        data = {
            "latin1.gz": gzip.compress(data),
            "truncated.gz": packed[: len(packed) // 2],
            "corrupt.gz": packed[:20] + bytes(64) + packed[84:],
        }[damage]
        expect = expect + " of the decompressed file" if damage == "latin1.gz" else "cannot read"
    train = tmp_path / f"train.txt{'.gz' if damage.endswith('.gz') else ''}"
    train.write_bytes(data)
    code, err = run_pretrain([tmp_path / "out", *override_args(train, None)], capsys)
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("error:") and str(train) in err and expect in err, err


def test_cli_trains_and_resumes(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = [tmp_path / "out", "--no-progress", *override_args(train, train, training__max_steps=3)]
    assert run_pretrain(args, capsys)[0] == 0
    assert (tmp_path / "out" / "model" / "bilm.json").is_file()
    code, err = run_pretrain([*args, "--resume", "--training.max_steps", "5"], capsys)
    assert code == 0 and "resumed at step 3" in err
    code, err = run_pretrain([*args, "--resume", "--model.lstm_dim", "8"], capsys)
    assert code == 1 and "model.lstm_dim" in err


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_the_same_run_on_two_threads_writes_the_same_weights(tmp_path, capsys, scheme):
    """A word's gradient is summed over its occurrences in one order at any thread count: with
    advanced indexing's backward (the token layer's rows, the sampled softmax's), two runs of one
    command on two threads wrote other weights. PTB's text and the sampled softmax: rows enough
    for torch to split the sums between threads."""
    with gzip.open(data_path("ptb_lm", "ptb.train.txt.gz"), "rt", encoding="utf-8") as f:
        train = write_corpus(tmp_path / "train.txt", [next(f).strip() for _ in range(400)])
    args = override_args(
        train,
        model__char_dim=8,
        model__filters=[[1, 16], [2, 16], [3, 32]],
        model__projection_dim=32,
        model__lstm_dim=64,
        softmax__type="sampled",
        softmax__n_samples=64,
        training__batch_tokens=1280,
        training__window=20,
        training__max_steps=8,
        training__scheme=scheme,
    )
    hashes = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert run_pretrain([out, "--no-progress", "--threads", "2", *args], capsys)[0] == 0
        hashes.append(json.loads((out / "model" / "training.json").read_text())["weights_sha256"])
    assert hashes[0] == hashes[1]


def test_resume_takes_the_corpus_by_any_spelling_of_its_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "train.txt", toy_sentences(100))
    steps = ("--training.max_steps", "3")

    def run(spelling, *more):
        return run_pretrain(
            ["out", "--no-progress", *override_args(spelling, spelling), *steps, *more], capsys
        )

    assert run("train.txt")[0] == 0
    for spelling, resumed_at in (("./train.txt", 3), (str(tmp_path / "train.txt"), 4)):
        steps = ("--training.max_steps", str(resumed_at + 1))
        code, err = run(spelling, "--resume")
        assert code == 0 and f"resumed at step {resumed_at}" in err, err
    write_corpus(tmp_path / "other.txt", toy_sentences(100, seed=3))
    code, err = run("other.txt", "--resume")
    assert code == 1 and "corpus.train" in err and "Traceback" not in err


def test_several_training_files_after_train(tmp_path, capsys):
    a = write_corpus(tmp_path / "a.txt", toy_sentences(60))
    b = write_corpus(tmp_path / "b.txt", toy_sentences(60, seed=2))
    args = [
        arg
        for arg in override_args(a, None, training__max_steps=2)
        if "paths.train" not in arg and arg != str(a)
    ]
    code, err = run_pretrain([tmp_path / "out", "--train", a, b, "--no-progress", *args], capsys)
    assert code == 0, err
    assert sorted(json.loads((tmp_path / "out" / "corpus.json").read_text())) == [str(a), str(b)]


def test_default_vocab_size_shrinks_to_a_small_corpus(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = override_args(train_path, None, training__max_steps=2)
    i = args.index("--vocab.size")
    del args[i : i + 2]  # the built-in vocab.size (40000) stays
    code, err = run_pretrain([tmp_path / "out", "--no-progress", *args], capsys)
    assert code == 0, err
    n_words = len((tmp_path / "out" / "vocab.txt").read_text().splitlines()) - 3
    assert 0 < n_words < 100
    assert f"warning: vocab.size = 40000 is larger than the {n_words} distinct words" in err


def test_progress_shows_the_time_budget_and_the_dev_evaluation(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    config = tiny_config(
        train_path, train_path, training__max_steps=None, training__max_minutes=0.02
    )
    train(config, tmp_path / "out", progress_bar=True, log=lambda m: None)
    err = capsys.readouterr().err
    assert re.search(r"00:0\d / 00:01 of the time budget", err), err[-2000:]
    assert "dev perplexity" in err


# ---------------------------------------------------------------------- runs that go wrong (issue
# 34, item 3)
def test_a_diverging_run_stops_with_one_error_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    args = [
        out,
        "--no-progress",
        *override_args(
            train_path,
            train_path,
            training__max_steps=6,
            training__checkpoint_every=1,
            training__learning_rate=1e30,
        ),
    ]
    code, err = run_pretrain(args, capsys)
    assert code == 1, err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(
        "error: pretrain diverged at step "
    ), err
    assert "training.learning_rate" in err and "1e+30" in err
    assert not (out / "model").exists()  # no model of NaN weights is saved
    manifest = json.loads((out / "checkpoint" / "checkpoint.json").read_text())
    state = torch.load(out / "checkpoint" / manifest["directory"] / "model.pt", weights_only=True)[
        "model"
    ]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert f"the last checkpoint (step {manifest['step']}) is kept" in err


def test_a_checkpoint_of_non_finite_weights_is_refused_at_resume(tmp_path, capsys):
    from spacy_elmo.pretrain import checkpoint

    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    args = [out, "--no-progress", *override_args(train_path, None, training__max_steps=2)]
    assert run_pretrain(args, capsys)[0] == 0
    root = out / "checkpoint"
    step = json.loads((root / "checkpoint.json").read_text())["step"]
    part = checkpoint.step_dir(root, step) / checkpoint.MODEL_PART
    shared = torch.load(part, weights_only=True)
    name = next(k for k, v in shared["model"].items() if v.is_floating_point())
    shared["model"][name].fill_(float("nan"))
    checkpoint.save_part(shared, part)
    checkpoint.publish(root, step, 1)
    code, err = run_pretrain([*args, "--resume", "--training.max_steps", "4"], capsys)
    assert code == 1 and "Traceback" not in err
    assert err.startswith("error:") and "non-finite" in err and name in err, err


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("training.seed", "-1", "from 0 to"),
        ("training.seed", "99999999999", "from 0 to"),
        ("training.batch_tokens", "1000000000000", "at most"),
        ("training.window", "100000000", "at most"),
        ("training.eval_batch_size", "100000000", "at most"),
        ("softmax.adaptive_cutoffs", "5", "increasing positive integers"),
        ("softmax.adaptive_cutoffs", "[8, 4]", "increasing positive integers"),
        ("softmax.adaptive_cutoffs", "[]", "increasing positive integers"),
        ("corpus.lowercase", '"yes"', "true or false, got 'yes'"),
        ("training.export_hdf5", '"x"', "true or false, got 'x'"),
        (
            "corpus.unk_token",
            "[1]",
            "a string other than <S> and </S> (the sentence boundaries) or null, got [1]",
        ),
    ],
)
def test_settings_out_of_range_are_one_error(tmp_path, capsys, key, value, expect):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    code, err = run_pretrain(
        [tmp_path / "out", *override_args(train_path, None), f"--{key}", value], capsys
    )
    assert code == 1 and "Traceback" not in err
    assert err.startswith(f"error: config '{key}' must be") and expect in err, err


def test_a_config_file_that_is_no_config_is_one_error_line(tmp_path, capsys):
    """confection's message spans lines: it is one line of the error."""
    (tmp_path / "bad.cfg").write_text("[training\nmax_steps = 3\n", encoding="utf-8")
    code, err = run_pretrain([tmp_path / "out", "--config", tmp_path / "bad.cfg"], capsys)
    line = one_error_line(err)
    assert code == 1 and "bad.cfg: cannot read the config" in line and "section headers" in line


def test_adaptive_cutoffs_beyond_the_vocabulary_are_named_not_dropped_silently(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = [tmp_path / "out", "--no-progress", *override_args(train_path, None)]
    args += ["--training.max_steps", "2", "--softmax.type", "adaptive", "--vocab.size", "null"]
    code, err = run_pretrain([*args, "--softmax.adaptive_cutoffs", "[10, 100000]"], capsys)
    assert code == 0, err
    n_words = len((tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert (
        f"warning: softmax.adaptive_cutoffs 100000 are not below the {n_words} words of the "
        "output vocabulary: the softmax's clusters start at [10]"
    ) in err, err
    head = torch.load(tmp_path / "out" / "model" / "lm_head.pt", weights_only=True)
    assert sum(k.startswith("softmax.tail.") and k.endswith(".0.weight") for k in head) == 1
    args[0] = tmp_path / "out2"
    code, err = run_pretrain([*args, "--softmax.adaptive_cutoffs", "[100000]"], capsys)
    assert code == 1 and "Traceback" not in err, err
    assert "softmax.adaptive_cutoffs" in err and f"({n_words})" in err, err


def test_an_output_dir_that_is_a_file_is_one_error(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    code, err = run_pretrain([tmp_path / "taken", *override_args(train_path, None)], capsys)
    assert code == 1 and "Traceback" not in err
    assert (
        err == f"error: {tmp_path / 'taken'} exists and is not a directory: pretrain writes one\n"
    )
    assert (tmp_path / "taken").read_text(encoding="utf-8") == "a file"


def test_a_torn_last_metrics_line_is_dropped_at_resume(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    out = tmp_path / "out"
    args = [
        out,
        "--no-progress",
        *override_args(train_path, train_path, training__max_steps=2, training__eval_every=1),
    ]
    assert run_pretrain(args, capsys)[0] == 0
    metrics = out / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + '{"step": 3, "epoch": 0, "tok')  # a kill in the middle of a line
    code, err = run_pretrain([*args, "--resume", "--training.max_steps", "3"], capsys)
    assert code == 0, err
    assert "dropped a torn last line" in err
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 3


@pytest.mark.parametrize(
    "key,value",
    [("paths.train", "5"), ("paths.dev", "5"), ("paths.train", '{"a":1}'), ("paths.train", "[]")],
)
def test_corpus_paths_of_another_type_are_one_error(tmp_path, capsys, key, value):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    args = override_args(train_path, None)
    i = args.index(f"--{key}")
    args[i + 1] = value
    code, err = run_pretrain([tmp_path / "out", *args], capsys)
    setting = key.replace("paths.", "corpus.")
    assert code == 1 and one_error_line(err).startswith(
        f"error: config '{setting}' must be a path or a non-empty list of paths"
    ), err


def test_lang_and_whitespace_together_are_one_error(tmp_path, capsys):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    code, err = run_pretrain(
        [tmp_path / "out", "--lang", "en", "--whitespace", "--train", train_path], capsys
    )
    assert code == 1 and "--lang and --whitespace" in one_error_line(err)
    assert not (tmp_path / "out").exists()


def test_init_from_names_a_directory_and_warns_of_a_vocab_size_it_ignores(
    tmp_path, capsys, fixture_dir
):
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train_path, None, training__max_steps=2)]
    code, err = run_pretrain([tmp_path / "base", *args], capsys)
    assert code == 0, err
    n_words = len((tmp_path / "base" / "vocab.txt").read_text().splitlines()) - 3
    code, err = run_pretrain(
        [tmp_path / "tuned", *args, "--init-from", tmp_path / "base", "--vocab.size", "7"], capsys
    )
    assert code == 0, err
    assert "warning: vocab.size = 7 is not used: training goes on with the vocabulary" in err
    assert f"({n_words} words)" in err
    weights = fixture_dir / "lm_weights.hdf5"
    code, err = run_pretrain([tmp_path / "hdf5", *args, "--init-from", weights], capsys)
    assert code == 1 and one_error_line(err).startswith(
        f"error: --init-from {weights}: not a directory; pass the directory that holds the biLM"
    )
    code, out = run_pretrain(["--help"], capsys, "out")
    assert "bilm-tf / AllenNLP options and hdf5 weights" in " ".join(out.replace("│", " ").split())


@pytest.mark.parametrize(
    "settings, policy",
    [
        (["--training.scheme", "sentences"], "zero"),
        (["--training.state_policy", "carry"], "carry"),
    ],
)
def test_export_hdf5_of_a_model_not_read_warm_is_refused_before_training(
    tmp_path, capsys, settings, policy
):
    """`--export-hdf5` with the sentences scheme (state policy zero) trained, then wrote a
    model-hdf5 that loads warm (the layout records no policy): vectors up to 1.2 from model/'s. Now
    refused before training starts, nothing written; `--resume --export-hdf5` too."""
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train_path, None, training__max_steps=2), *settings]
    code, err = run_pretrain([tmp_path / "out", *args, "--export-hdf5"], capsys)
    scheme = "sentences" if "sentences" in settings else "stream"
    setting = "auto" if policy == "zero" else policy
    assert code == 1 and one_error_line(err) == (
        f"error: config 'training.export_hdf5': this run's model reads with the state policy "
        f"'{policy}' (training.scheme '{scheme}', training.state_policy '{setting}'), which the "
        "bilm-tf hdf5 layout cannot record (it loads as 'warm': other outputs); keep the model in "
        "this project's format (OUTPUT_DIR/model): drop --export-hdf5"
    )
    assert not (tmp_path / "out").exists()
    code, err = run_pretrain([tmp_path / "out", *args], capsys)
    assert code == 0, err
    saved = (tmp_path / "out" / "model" / "weights.pt").read_bytes()
    more = ["--resume", "--training.max_steps", "3", "--export-hdf5"]
    code, err = run_pretrain([tmp_path / "out", *args, *more], capsys)
    assert code == 1 and "'training.export_hdf5'" in one_error_line(err)
    assert (tmp_path / "out" / "model" / "weights.pt").read_bytes() == saved
    assert not (tmp_path / "out" / "model-hdf5").exists()


def test_init_from_a_model_of_another_token_width_is_one_error(tmp_path, capsys, fixture_dir):
    """pretrain makes bilm-tf's 50 ids per token: a model that reads another number would train on
    ids it never reads at inference."""
    model = tmp_path / "narrow"
    model.mkdir()
    options = json.loads((fixture_dir / "options.json").read_text(encoding="utf-8"))
    options["char_cnn"]["max_characters_per_token"] = 30
    (model / "options.json").write_text(json.dumps(options), encoding="utf-8")
    shutil.copy(fixture_dir / "lm_weights.hdf5", model / "weights.hdf5")
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(train_path, None, training__max_steps=2)]
    code, err = run_pretrain([tmp_path / "tuned", *args, "--init-from", model], capsys)
    assert code == 1 and "reads 30 characters per token" in one_error_line(err), err
    assert not (tmp_path / "tuned").exists()


def test_init_from_keeps_the_models_sizes_and_records_where_it_started(tmp_path, capsys):
    """Under --init-from the biLM keeps MODEL's sizes: a `--model.*` setting that differs is one
    error naming it (the built-in default's value too, where given); OUTPUT_DIR/config.cfg and
    training.json record the sizes trained and where the run started; --resume continues it."""
    from thinc.api import Config

    from spacy_elmo import load_bilm

    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(100))
    base, tuned = tmp_path / "base", tmp_path / "tuned"
    args = ["--no-progress", *override_args(train_path, None, training__max_steps=2)]
    assert run_pretrain([base, *args], capsys)[0] == 0
    args = [
        "--no-progress",
        "--init-from",
        base / "model",
        *override_args(train_path, None, model=False, training__checkpoint_every=1),
    ]
    for key, value, model in (("lstm_dim", 128, 32), ("lstm_dim", 512, 32), ("n_layers", 3, 2)):
        code, err = run_pretrain([tuned, *args, f"--model.{key}", value], capsys)
        assert code == 1 and one_error_line(err) == (
            f"error: --init-from {base / 'model'}: model.{key} = {value} is not the model's "
            f"({model}); its sizes are kept: leave model.{key} out or set it to {model}"
        )
    assert not tuned.exists()
    code, err = run_pretrain(
        [tuned, *args, "--model.lstm_dim", "32", "--training.max_steps", "2"], capsys
    )
    assert code == 0, err
    sizes = Config().from_disk(base / "config.cfg")["model"]
    assert Config().from_disk(tuned / "config.cfg")["model"] == sizes
    summary = json.loads((tuned / "model" / "training.json").read_text(encoding="utf-8"))
    assert Config().from_str(summary["config"])["model"] == sizes
    fingerprint = json.loads((base / "model" / "training.json").read_text())["fingerprint"]
    assert fingerprint == load_bilm(base / "model").fingerprint()
    assert summary["init_from"] == {
        "init_from": str(base / "model"),
        "directory": str(base / "model"),
        "fingerprint": fingerprint,
    }
    # --resume, with --init-from or without it; a size given that differs is refused there too
    resume = [tuned, *args[3:], "--resume"]
    code, err = run_pretrain([*resume, "--model.n_layers", "3"], capsys)
    assert code == 1 and one_error_line(err) == (
        f"error: --resume (a run from --init-from {base / 'model'}): model.n_layers = 3 is not "
        "the model's (2); its sizes are kept: leave model.n_layers out or set it to 2"
    )
    for more, steps in (([], 3), (args[1:3], 4)):
        code, err = run_pretrain([*resume, *more, "--training.max_steps", steps], capsys)
        assert code == 0 and f"resumed at step {steps - 1}" in err, err
        summary = json.loads((tuned / "model" / "training.json").read_text(encoding="utf-8"))
        assert summary["steps"] == steps and summary["init_from"]["fingerprint"] == fingerprint
        assert Config().from_str(summary["config"])["model"] == sizes


def test_a_softmax_of_another_vocabulary_size_is_named_so(tmp_path, capsys):
    """`--resume` of a run from --init-from A, given --init-from B whose softmax predicts another
    number of words: the error says that the vocabulary sizes differ (it blamed softmax.type)."""
    a = write_corpus(tmp_path / "a.txt", toy_sentences(100))
    b = write_corpus(
        tmp_path / "b.txt", [f"{line} extra words here" for line in toy_sentences(100)]
    )
    for corpus in (a, b):
        args = ["--no-progress", *override_args(corpus, None, training__max_steps=1)]
        assert run_pretrain([tmp_path / corpus.stem, *args], capsys)[0] == 0
    entries = [len((tmp_path / x / "vocab.txt").read_text().splitlines()) for x in ("a", "b")]
    assert entries[0] != entries[1]
    args = [tmp_path / "tuned", "--no-progress", *override_args(a, None, training__max_steps=1)]
    assert run_pretrain([*args, "--init-from", tmp_path / "a"], capsys)[0] == 0
    code, err = run_pretrain(
        [*args, "--resume", "--training.max_steps", "2", "--init-from", tmp_path / "b"], capsys
    )
    head = tmp_path / "b" / "model" / "lm_head.pt"
    assert code == 1 and one_error_line(err) == (
        f"error: {head}: the saved softmax predicts {entries[1]} entries of an output vocabulary, "
        f"this run's vocabulary has {entries[0]}: continue from the softmax of this vocabulary"
        + RESUMED
    )


RESUMED = "; a resumed run continues from its checkpoint: --resume without --init-from continues it"


def test_a_run_resumed_with_a_start_since_removed_is_told_to_resume_without_it(tmp_path, capsys):
    """The model a run started from, removed since: `--resume` with the same `--init-from` said only
    that it was not found, though the checkpoint holds what the run goes on from."""
    corpus = write_corpus(tmp_path / "a.txt", toy_sentences(100))
    args = ["--no-progress", *override_args(corpus, None, training__max_steps=1)]
    assert run_pretrain([tmp_path / "start", *args], capsys)[0] == 0
    tuned = [tmp_path / "tuned", *args]
    assert run_pretrain([*tuned, "--init-from", tmp_path / "start"], capsys)[0] == 0
    shutil.rmtree(tmp_path / "start")
    more = [*tuned, "--resume", "--training.max_steps", "2"]
    code, err = run_pretrain([*more, "--init-from", tmp_path / "start"], capsys)
    assert code == 1 and one_error_line(err).endswith(RESUMED), err
    assert run_pretrain(more, capsys)[0] == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"training.seed": 2**31 - 1},
        {"training.batch_tokens": 1 << 20},
        {"training.scheme": "stream", "training.batch_tokens": 20, "training.window": 20},
        {"softmax.adaptive_cutoffs": [4, 5]},
        {"training.dropout": 0.99},
        {"training.max_steps": None, "training.max_epochs": None, "training.max_minutes": 0.5},
    ],
)
def test_settings_at_their_bounds_are_kept(overrides):
    config = load_config(None, overrides)
    for key, value in overrides.items():
        section, name = key.split(".")
        assert config[section][name] == value


@pytest.mark.parametrize(
    "overrides,expect",
    [
        ({"training.seed": 2**31}, "'training.seed' must be an integer from 0 to"),
        ({"paths.train": ""}, "'corpus.train' must be a path or a non-empty list of paths"),
        ({"paths.dev": ["dev.txt", ""]}, "'corpus.dev' must be a path or a non-empty list"),
        ({"training.batch_tokens": (1 << 20) + 1}, "'training.batch_tokens' must be a positive"),
        (
            {"training.batch_tokens": 80, "training.window": 81},
            "training.batch_tokens (80) must be at least training.window (81)",
        ),
        ({"softmax.adaptive_cutoffs": [4, 4]}, "'softmax.adaptive_cutoffs' must be a list of"),
        ({"training.dropout": 1}, "'training.dropout' must be in [0, 1), got 1"),
        ({"training.max_steps": True}, "'training.max_steps' must be a positive integer or null"),
        ({"training.max_epochs": None}, "set at least one of"),
    ],
)
def test_settings_just_past_their_bounds_are_one_error(overrides, expect):
    with pytest.raises(ElmoConfigError) as err:
        load_config(None, overrides)
    assert expect in str(err.value), err.value
