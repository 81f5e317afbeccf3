"""`spacy_elmo.embed.run`, the one library entry of `embed` (issue 33 item 6): single, sharded and
one-shard runs give the command line's files bit for bit, report progress and a result; the settings
are checked once; the HDF5 writer is one implementation of a small writer interface; the input and
output modules are named by what they read."""

from __future__ import annotations

import importlib.util

import pytest

from spacy_elmo import ElmoConfigError, ElmoFileError, ElmoResumeError

from ..helpers import generated, interrupt_embed_at_line, run_cli, write_lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return generated(tmp_path_factory.mktemp("run") / "in.txt", 40, seed=3)


def test_run_writes_what_the_command_line_writes(corpus, fixture_dir, tmp_path):
    from spacy_elmo.embed import EmbedOptions, EmbedResult, run

    flags = ["-w", fixture_dir, "--whitespace", "--flush-every", 10, "--no-progress"]
    assert run_cli("embed", corpus, tmp_path / "cli.hdf5", *flags) == 0
    assert run_cli("embed", corpus, tmp_path / "cli", *flags, "--shards", 2) == 0
    calls = []
    settings = {"whitespace": True, "flush_every": 10}
    options = EmbedOptions(corpus, tmp_path / "lib.hdf5", str(fixture_dir), **settings)
    result = run(options, progress=lambda done, total: calls.append((done, total)))
    assert isinstance(result, EmbedResult) and result.wrote
    assert (result.output, result.lines, result.lines_done, result.lines_run) == (
        tmp_path / "lib.hdf5",
        40,
        0,
        40,
    )
    assert result.tokens > 0 and result.seconds > 0
    assert calls[-1] == (40, 40) and [done for done, _ in calls] == sorted(
        done for done, _ in calls
    )
    assert (tmp_path / "lib.hdf5").read_bytes() == (tmp_path / "cli.hdf5").read_bytes()
    # paths as strings, as Python code gives them
    run(EmbedOptions(str(corpus), str(tmp_path / "str.hdf5"), str(fixture_dir), **settings))
    assert (tmp_path / "str.hdf5").read_bytes() == (tmp_path / "cli.hdf5").read_bytes()

    again = run(
        EmbedOptions(
            corpus,
            tmp_path / "lib.hdf5",
            str(fixture_dir),
            whitespace=True,
            flush_every=10,
            resume=True,
        )
    )
    assert not again.wrote and (again.lines_done, again.lines_run) == (40, 0)

    sharded = EmbedOptions(
        corpus, tmp_path / "lib", str(fixture_dir), whitespace=True, flush_every=10, shards=2
    )
    first = run(EmbedOptions(**{**vars(sharded), "shards": None, "shard": "1/2"}))
    assert (first.lines_done, first.lines_run) == (0, 20)
    rest = run(sharded)
    assert (rest.lines_done, rest.lines_run) == (20, 20)
    for name in ("shard-00000.hdf5", "shard-00001.hdf5", "manifest.json"):
        assert (tmp_path / "lib" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), (
            name
        )


def test_run_raises_elmo_errors_and_checks_the_settings_once(
    corpus, fixture_dir, tmp_path, monkeypatch
):
    from spacy_elmo.embed import EmbedOptions, run

    weights = str(fixture_dir)
    with pytest.raises(ElmoConfigError, match="--dtype"):
        run(EmbedOptions(corpus, tmp_path / "o.hdf5", weights, dtype="float64"))
    with pytest.raises(ElmoConfigError, match="--threads"):
        run(EmbedOptions(corpus, tmp_path / "o.hdf5", weights, threads=0))
    with pytest.raises(ElmoFileError, match="input not found"):
        run(EmbedOptions(tmp_path / "missing.txt", tmp_path / "o.hdf5", weights))
    checks = []
    real = EmbedOptions.check
    monkeypatch.setattr(EmbedOptions, "check", lambda self: checks.append(1) or real(self))
    assert (
        run_cli(
            "embed", corpus, tmp_path / "o.hdf5", "-w", weights, "--whitespace", "--no-progress"
        )
        == 0
    )
    assert len(checks) == 1
    with pytest.raises(ElmoResumeError, match="exists: pass --resume"):
        run(EmbedOptions(corpus, tmp_path / "o.hdf5", weights, whitespace=True))
    assert len(checks) == 2


def test_an_interrupted_run_says_where_to_resume(corpus, fixture_dir, tmp_path, monkeypatch):
    from spacy_elmo.embed import EmbedInterrupted, EmbedOptions, run

    interrupt_embed_at_line(monkeypatch, 25)
    with pytest.raises(EmbedInterrupted) as err:
        run(
            EmbedOptions(
                corpus, tmp_path / "o.hdf5", str(fixture_dir), whitespace=True, flush_every=10
            )
        )
    assert isinstance(err.value, KeyboardInterrupt) and err.value.resume_from == 20


def test_the_hdf5_writer_is_one_implementation_of_the_writer_interface(tmp_path):
    from spacy_elmo.embed.h5writer import HDF5Output
    from spacy_elmo.embed.writer import OutputWriter

    writer = HDF5Output(compression=None, reopen_every=10)
    assert isinstance(writer, OutputWriter)
    write_lines(tmp_path / "x.txt", ["a"])
    with pytest.raises(ElmoFileError):
        writer.read_settings(tmp_path / "x.txt")


def test_files_are_reopened_by_their_datasets_not_by_the_block(
    corpus, fixture_dir, tmp_path, monkeypatch
):
    """HDF5 files are closed and reopened every 10,000 datasets (a bound on HDF5's bookkeeping),
    whatever --flush-every is: blocks of one line do not reopen the output after each dataset."""
    import h5py

    from spacy_elmo.embed import EmbedOptions, run

    real, modes = h5py.File, []

    def counted(*args, **kwargs):
        modes.append(args[1] if len(args) > 1 else kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(h5py, "File", counted)
    run(EmbedOptions(corpus, tmp_path / "o.hdf5", str(fixture_dir), whitespace=True, flush_every=1))
    assert "w" in modes and "r+" not in modes, modes


def test_input_and_output_modules_are_named_by_what_they_read():
    from spacy_elmo.embed.embeddings import Embeddings, open_embeddings  # noqa: F401 (an output, read back)
    from spacy_elmo.embed.sentences import read_sentences, scan_input  # noqa: F401 (the input)

    for old in ("reader", "reading"):
        assert importlib.util.find_spec(f"spacy_elmo.embed.{old}") is None
