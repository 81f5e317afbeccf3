"""Files that are not regular files where a reader expects one: a FIFO (reading it blocks for ever),
a symlink to /dev/zero (it never ends), a directory. Every reader refuses each at once with one
ElmoFileError naming the file and what it is; a hang fails by the timeout marks, reading /dev/zero
whole by a MemoryError (under a bound on the address space)."""

from __future__ import annotations

import os
import resource
import shutil
from contextlib import contextmanager

import pytest
import spacy

from spacy_elmo import ElmoFileError, load_bilm, open_embeddings, save_bilm

from .helpers import one_error_line, run_cli, toy_sentences, write_corpus, write_lines
from .model_files import hdf5_model

KINDS = {
    "fifo": "a FIFO (named pipe)",
    "zero": "a symlink to /dev/zero, a character device",
    "directory": "a directory",
}


def replace_with(path, kind):
    """Put a FIFO, a symlink to /dev/zero or an empty directory where `path` is."""
    if path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    {"fifo": os.mkfifo, "zero": lambda p: os.symlink("/dev/zero", p), "directory": os.mkdir}[kind](
        path
    )
    return path


@contextmanager
def bounded_memory(extra: int = 2 << 30):
    """The address space bounded to what the process maps now plus `extra`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * resource.getpagesize()
    bound = mapped + extra if hard == resource.RLIM_INFINITY else min(mapped + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def refused_as_special(kind, path, call, what):
    """`call()` raises one ElmoFileError saying that `path`, the `what`, is not a regular file but
    the `kind` it is (under a bound on the address space)."""
    with pytest.raises(ElmoFileError) as info, bounded_memory():
        call()
    assert (
        str(info.value) == f"{path}: the {what} must be a regular file, but this is {KINDS[kind]}"
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("name", ["options.json", "weights.hdf5"])
def test_hdf5_model_files(fixture_dir, tmp_path, kind, name):
    model = hdf5_model(fixture_dir, tmp_path / "model")
    path = replace_with(model / name, kind)
    what = "ELMo options file" if name == "options.json" else "ELMo weight file"
    refused_as_special(kind, path, lambda: load_bilm(model), what)
    refused_as_special(
        kind, path, lambda: load_bilm((model / "options.json", model / "weights.hdf5")), what
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "zero", "directory"])
@pytest.mark.parametrize(
    "name, what", [("bilm.json", "model config"), ("weights.pt", "ELMo weight file")]
)
def test_own_model_files(fixture_dir, tmp_path, kind, name, what):
    model = save_bilm(load_bilm(fixture_dir), tmp_path / "own")
    path = replace_with(model / name, kind)
    refused_as_special(kind, path, lambda: load_bilm(model), what)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "zero", "directory"])
def test_model_of_a_saved_pipeline(fixture_dir, tmp_path, kind):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    path = replace_with(tmp_path / "pipeline" / "elmo" / "model", kind)
    refused_as_special(
        kind, path, lambda: spacy.load(tmp_path / "pipeline"), "ELMo model of the pipeline"
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_manifest_of_the_model_cache(fixture_dir, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "small"
    cached.mkdir(parents=True)
    shutil.copy(
        fixture_dir / "options.json", cached / "elmo_2x1024_128_2048cnn_1xhighway_options.json"
    )
    shutil.copy(
        fixture_dir / "lm_weights.hdf5", cached / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    )
    path = replace_with(cached / "manifest.json", kind)
    refused_as_special(kind, path, lambda: load_bilm("small"), "model cache manifest")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_manifest_of_embed_shards(fixture_dir, tmp_path, kind):
    text = write_lines(tmp_path / "in.txt", ["one line .", "two lines here ."])
    out = tmp_path / "out"
    assert (
        run_cli(
            "embed",
            text,
            out,
            "-w",
            fixture_dir,
            "--shards",
            "2",
            "--flush-every",
            "1",
            "--no-progress",
        )
        == 0
    )
    path = replace_with(out / "manifest.json", kind)
    refused_as_special(kind, path, lambda: open_embeddings(out), "manifest of `embed`")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "zero", "directory"])
def test_input_of_embed(fixture_dir, tmp_path, capsys, kind):
    """`embed` reads its input twice (scanned, then embedded): a pipe is refused, not read half."""
    path = replace_with(tmp_path / "in.txt", kind)
    with bounded_memory():
        assert (
            run_cli("embed", path, tmp_path / "out.hdf5", "-w", fixture_dir, "--no-progress") == 1
        )
    assert one_error_line(capsys.readouterr().err) == (
        f"error: {path}: the input must be a regular file, but this is {KINDS[kind]}"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("what", ["config file", "train corpus file"])
def test_config_and_corpus_of_pretrain(tmp_path, capsys, kind, what):
    corpus = write_corpus(tmp_path / "train.txt", toy_sentences(20))
    config = tmp_path / "config.cfg"
    assert run_cli("pretrain", "--show-config", "--train", corpus) == 0
    config.write_text(capsys.readouterr().out)
    path = replace_with(config if what == "config file" else corpus, kind)
    with bounded_memory():
        assert (
            run_cli(
                "pretrain", tmp_path / "out", "--config", config, "--train", corpus, "--no-progress"
            )
            == 1
        )
    assert one_error_line(capsys.readouterr().err) == (
        f"error: {path}: the {what} must be a regular file, but this is {KINDS[kind]}"
    )
