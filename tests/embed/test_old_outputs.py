"""`embed --resume` of an output begun by an earlier spacy_elmo, whose record lacks settings this
version records (7094a2e wrote no `precision` nor `device`; fb37870 neither these nor the input's
sha256, line count, threads, torch, dtype, ...) or names its tokenizer otherwise: one error saying
so, never a changed input or settings that no option can give."""

from __future__ import annotations

import json

import h5py
import pytest

from spacy_elmo import ElmoResumeError, open_embeddings

from ..helpers import LINES, interrupt_embed_at_line, write_lines

SETTINGS = "spacy_elmo.settings"
LACKED_BY_7094 = ("precision", "device")
LACKED_BY_FB37 = (
    *LACKED_BY_7094,
    *("input_sha256", "lines", "threads", "torch", "spacy_elmo", "weights_fingerprint"),
    *("dtype", "compression", "shards"),
)


def aged(settings: dict, lacked) -> dict:
    """`settings` as an earlier version recorded them: without `lacked` (fb37870's, with the
    weights' sha256 under `weights`)."""
    old = {k: v for k, v in settings.items() if k not in lacked}
    return {**old, "weights": "98f9d87f"} if "lines" in lacked else old


def age_file(path, lacked) -> None:
    with h5py.File(path, "r+") as f:
        f.attrs[SETTINGS] = json.dumps(aged(json.loads(f.attrs[SETTINGS]), lacked))


def age_manifest(directory, lacked, records=True) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["settings"] = aged(manifest["settings"], lacked)
    if not records:  # 7094a2e recorded which shards are complete, not their size and sha256
        del manifest["shards"]
    (directory / "manifest.json").write_text(json.dumps(manifest))


def refusal(options) -> str:
    from spacy_elmo.embed import run

    with pytest.raises(ElmoResumeError) as err:
        run(options)
    message = str(err.value)
    assert "None then" not in message and "changed since" not in message, message
    assert "continue it with the same ones" not in message, message
    return message


@pytest.mark.parametrize("lacked", [LACKED_BY_7094, LACKED_BY_FB37], ids=["7094a2e", "fb37870"])
def test_a_complete_output_of_an_earlier_version_is_refused_as_such(fixture_dir, tmp_path, lacked):
    """A complete output: refused naming the output and the missing keys, kept as it is (readable),
    where the input was said changed and device None asked for (a loop with 'pass --resume')."""
    from spacy_elmo.embed import EmbedOptions, run

    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5"
    options = EmbedOptions(text, out, str(fixture_dir), whitespace=True, flush_every=2)
    run(options)
    age_file(out, lacked)
    before = out.read_bytes()
    message = refusal(EmbedOptions(**{**vars(options), "resume": True}))
    assert message.startswith(f"{out} was begun by an earlier spacy_elmo"), message
    assert ", ".join(sorted(lacked)) in message and "cannot be resumed by this version" in message
    assert "open_embeddings" in message and "remove it to start again" in message, message
    assert out.read_bytes() == before
    with open_embeddings(out) as embeddings:
        assert len(embeddings) == len(LINES)


def test_an_interrupted_run_of_an_earlier_version_is_refused_as_such(
    fixture_dir, tmp_path, monkeypatch
):
    from spacy_elmo.embed import EmbedOptions, run

    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5"
    options = EmbedOptions(text, out, str(fixture_dir), whitespace=True, flush_every=2)
    interrupt_embed_at_line(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        run(options)
    monkeypatch.undo()
    partial = tmp_path / "out.hdf5.partial"
    age_manifest(partial, LACKED_BY_7094)
    message = refusal(EmbedOptions(**{**vars(options), "resume": True}))
    assert message.startswith(f"{out} was begun by an earlier spacy_elmo"), message
    assert f"{partial / 'manifest.json'} records no device, precision" in message, message
    assert f"remove {partial} to start again" in message and "open_embeddings" not in message


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "7094a2e"])
def test_a_sharded_output_of_an_earlier_version_is_refused_as_such(fixture_dir, tmp_path, records):
    """Readable as it is where its manifest records each shard (open_embeddings checks them)."""
    from spacy_elmo.embed import EmbedOptions, run

    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out"
    options = EmbedOptions(text, out, str(fixture_dir), whitespace=True, flush_every=2, shards=2)
    run(options)
    age_manifest(out, LACKED_BY_7094, records)
    message = refusal(options)
    assert message.startswith(f"{out} was begun by an earlier spacy_elmo"), message
    assert "remove it to start again" in message
    assert ("open_embeddings" in message) == records, message


def test_a_tokenizer_this_version_names_otherwise_is_no_setting_to_give_again(
    fixture_dir, tmp_path
):
    """555c362 recorded `spacy:en` for what this version records as `spacy:en keeping <S> ...`:
    no option gives it; a tokenizer an option gives is named with it."""
    from spacy_elmo.embed import EmbedOptions, run

    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5"
    options = EmbedOptions(text, out, str(fixture_dir), flush_every=2, resume=True)
    run(options)
    with h5py.File(out, "r+") as f:
        settings = json.loads(f.attrs[SETTINGS])
        f.attrs[SETTINGS] = json.dumps({**settings, "tokenizer": "spacy:en"})
    message = refusal(options)
    assert message.startswith(f"{out} was started with other settings (tokenizer: 'spacy:en'")
    assert "tokenizer 'spacy:en' is named otherwise by this version" in message, message
    assert "remove it to start again" in message, message
    with h5py.File(out, "r+") as f:
        f.attrs[SETTINGS] = json.dumps({**settings, "tokenizer": "whitespace"})
    with pytest.raises(ElmoResumeError, match="continue it with the same ones \\(--whitespace\\)"):
        run(options)


def test_a_tokenizer_keeping_the_models_own_unknown_word_is_given_again(fixture_dir, tmp_path):
    """A model that records its unknown word (`<UNK>`, not `<unk>`) has its own name of the
    tokenizer, which this version records: resumed with another --lang, the refusal named it an
    earlier version's, which no option continues; it names --lang, which does."""
    import shutil

    from spacy_elmo.embed import EmbedOptions, run

    model = tmp_path / "model"
    shutil.copytree(fixture_dir, model, ignore=shutil.ignore_patterns("lm_embeddings_*"))
    options_json = json.loads((model / "options.json").read_text())
    (model / "options.json").write_text(json.dumps({**options_json, "unk_token": "<UNK>"}))
    text, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5"
    run(EmbedOptions(text, out, str(model), flush_every=2))
    with pytest.raises(ElmoResumeError) as err:
        run(EmbedOptions(text, out, str(model), flush_every=2, resume=True, lang="de"))
    message = str(err.value)
    assert "named otherwise" not in message, message
    assert "continue it with the same ones (--lang en)" in message, message
