"""An input changed while `embed` reads it (rewritten in place, or replaced by a rename as editors
save) is one error; nothing built from the changed input is published, and a second run embeds the
input as it is then. A dangling symlink named as the shard directory is one error naming it."""

from __future__ import annotations

import os

import pytest

from spacy_elmo import ElmoFileError

from ..helpers import generated


def reversed_lines(path):
    """`path`'s lines in reverse order: the same size, other content."""
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return "".join(line + "\n" for line in reversed(lines))


def change(path, how):
    new = reversed_lines(path)
    if how == "in place":
        path.write_text(new, encoding="utf-8")
    else:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["in place", "replaced"])
@pytest.mark.parametrize("shards", [None, 2])
def test_an_input_changed_during_the_run_is_one_error(fixture_dir, tmp_path, how, shards):
    from spacy_elmo.embed import EmbedOptions, open_embeddings, run

    corpus = generated(tmp_path / "in.txt", 40, seed=5)
    out = tmp_path / ("out" if shards else "out.hdf5")
    settings = {"whitespace": True, "flush_every": 10, "threads": 1, "shards": shards}
    fired = []

    def progress(done, total):
        if done >= 12 and not fired:  # inside the second part, the first shard
            fired.append(done)
            change(corpus, how)

    with pytest.raises(ElmoFileError) as err:
        run(EmbedOptions(corpus, out, str(fixture_dir), **settings), progress=progress)
    message = str(err.value)
    assert fired and str(corpus) in message and "changed while it was embedded" in message
    assert "run again" in message and "\n" not in message
    if shards:
        assert not list(out.glob("shard-*.hdf5"))
        assert f"run again after removing {out}" in message
        (out / "manifest.json").unlink()
        (out / "lock").unlink(missing_ok=True)
        out.rmdir()
    else:
        assert not out.exists() and not out.with_name("out.hdf5.partial").exists()
    # run again: the input as it is now, the same as a run that never saw the old one
    run(EmbedOptions(corpus, out, str(fixture_dir), **settings))
    clean = tmp_path / "clean.txt"
    clean.write_bytes(corpus.read_bytes())
    want = tmp_path / ("want" if shards else "want.hdf5")
    run(EmbedOptions(clean, want, str(fixture_dir), **settings))
    with open_embeddings(out) as got, open_embeddings(want) as expected:
        assert len(got) == len(expected) == 40
        assert all((a == b).all() for a, b in zip(got, expected))


def test_a_dangling_symlink_as_the_shard_directory_is_named(fixture_dir, tmp_path):
    from spacy_elmo.embed import EmbedOptions, run

    corpus = generated(tmp_path / "in.txt", 4, seed=5)
    out = tmp_path / "out"
    out.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ElmoFileError) as err:
        run(EmbedOptions(corpus, out, str(fixture_dir), whitespace=True, shards=2, flush_every=2))
    assert str(err.value) == (
        f"{out} is a dangling symbolic link (to {tmp_path / 'nowhere'}): remove it, or name "
        "another output"
    )
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()
