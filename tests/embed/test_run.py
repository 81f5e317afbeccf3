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


def _lines(n, then=None):
    """`n` lines of one token each (`(text, array)`), then `then` raised where given."""
    import numpy as np

    for i in range(n):
        yield f"w{i}", np.full((3, 1, 4), i, dtype=np.float32)
    if then is not None:
        raise then


@pytest.mark.parametrize("lines, error", [(2, ElmoFileError), (1, KeyboardInterrupt)])
def test_a_piece_not_written_whole_leaves_no_file(tmp_path, lines, error):
    """Lines that end before the count (the input changed) or an interruption (Ctrl-C) while a
    piece is written: the error, and neither the piece nor its temporary file on disk."""
    from spacy_elmo.embed.h5writer import write_piece

    path = tmp_path / "part-00000.hdf5"
    stop = KeyboardInterrupt() if error is KeyboardInterrupt else None
    with pytest.raises(error):
        write_piece(path, 0, 3, _lines(lines, stop), {"input": "in.txt"})
    assert list(tmp_path.iterdir()) == []


def test_a_piece_from_line_5_names_its_datasets_and_index_from_5(tmp_path):
    """A piece's `sentence_to_index` maps each text to its line number in the whole input, the
    name of its dataset, not its place in the piece."""
    import json

    import h5py

    from spacy_elmo.embed.h5writer import write_piece

    path = tmp_path / "part-00001.hdf5"
    write_piece(path, 5, 2, _lines(2), {"input": "in.txt"})
    with h5py.File(path, "r") as f:
        assert json.loads(f["sentence_to_index"][0]) == {"w0": "5", "w1": "6"}
        assert f["6"][0, 0, 0] == 1 and sorted(f) == ["5", "6", "sentence_to_index"]


def test_a_written_piece_keeps_none_of_the_space_reserved_for_it(tmp_path):
    """The disk space reserved ahead of HDF5's writes (at least BASE_BYTES) is given back before
    the file is closed: a piece of two small lines is a few KB, not its reservation."""
    import h5py

    from spacy_elmo.embed.h5writer import BASE_BYTES, write_piece

    path = tmp_path / "part-00000.hdf5"
    write_piece(path, 0, 2, _lines(2), {"input": "in.txt"})
    with h5py.File(path, "r") as f:
        assert path.stat().st_size == f.id.get_filesize() < BASE_BYTES


def test_a_long_lines_pieces_that_end_early_are_an_error_not_zeros(tmp_path):
    """A line written in pieces whose pieces hold fewer tokens than its shape: an error, not a
    dataset whose last tokens read as zeros."""
    import numpy as np

    from spacy_elmo.embed.h5writer import write_piece
    from spacy_elmo.embed.writer import Pieces

    rows = (np.ones((3, 4, 4), np.float32) for _ in range(2))
    short = Pieces((3, 10, 4), np.dtype(np.float32), 1, 4, rows)
    with pytest.raises(ValueError, match="pieces of 8 tokens, expected 10"):
        write_piece(tmp_path / "part-00000.hdf5", 0, 1, [("long", short)], {"input": "in.txt"})
    assert list(tmp_path.iterdir()) == []


def test_an_index_written_in_pieces_that_end_early_is_an_error(tmp_path):
    """`finish_in_pieces` given fewer bytes than the index's size: an error naming the file, and
    no file (never one whose index ends in zero bytes)."""
    import numpy as np

    from spacy_elmo.embed.h5writer import H5Writer

    path = tmp_path / "out.hdf5"
    writer = H5Writer(path, 10)
    writer.add("0", np.zeros((1, 4), np.float32))
    with pytest.raises(
        ElmoFileError, match="out.hdf5: 9 bytes of sentence_to_index written, expected 20"
    ):
        writer.finish_in_pieces(20, [b'{"a": ', b'"0"'], {"input": "in.txt"})
    writer.abort()
    assert list(tmp_path.iterdir()) == []


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
