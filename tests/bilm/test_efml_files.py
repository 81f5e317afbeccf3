"""Hostile, corrupt and mismatched ELMoForManyLangs directories (and this format's character table): each is
refused with one ElmoFileError naming the file and the problem, before anything large is allocated."""
from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
import spacy
import torch

from spacy_elmo import ElmoFileError, load_bilm, save_bilm

from ..efml_models import write_efml_model
from ..helpers import one_error_line, run_cli
from ..test_hostile_files import edit_pipeline_bilm, load_in_3gb


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return write_efml_model(tmp_path_factory.mktemp("efml") / "m")


@pytest.fixture()
def copy(model_dir, tmp_path) -> Path:
    directory = tmp_path / "m"
    directory.mkdir()
    for f in model_dir.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    return directory


def refused(path, *fragments) -> str:
    with pytest.raises(ElmoFileError) as err:
        load_bilm(path)
    message = str(err.value)
    assert "\n" not in message and all(f in message for f in fragments), message
    return message


def edit_tensors(path: Path, edit, legacy: bool = False) -> None:
    tensors = torch.load(path, weights_only=True)
    edit(tensors)
    torch.save(tensors, path, _use_new_zipfile_serialization=not legacy)


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("name", ["config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl",
                                  "cnn_tiny.json"])
def test_a_missing_file_is_named(copy, name):
    (copy / name).unlink()
    if name == "cnn_tiny.json":
        refused(copy, "config.json", "cnn_tiny.json was found neither there nor in")
    else:
        refused(copy, str(copy / name), "not found")


def _set(section, key, value):
    return lambda arch: arch[section].update({key: value})


@pytest.mark.parametrize("edit, fragments", [
    (_set("token_embedder", "name", "lstm"), ["'lstm'", "not supported"]),
    (_set("encoder", "name", "lstm"), ["encoder 'lstm'", "not supported"]),
    (_set("token_embedder", "char_dim", 0), ["char_dim", "without characters"]),
    (_set("encoder", "dim", 10**9), ["lstm.dim", "out of range"]),
    (_set("token_embedder", "n_highway", 3), ["token_embedder.pkl", "missing", "highways._layers.2.weight"]),
    (_set("token_embedder", "word_dim", 0), ["token_embedder.pkl", "unexpected", "word_emb_layer"]),
    (_set("encoder", "projection_dim", 9), ["token_embedder.pkl", "projection.weight", "(8, 22)", "(9, 22)"]),
])
def test_architecture_that_does_not_fit(copy, edit, fragments):
    edit_json(copy / "cnn_tiny.json", edit)
    refused(copy, "cnn_tiny.json", *fragments)


@pytest.mark.parametrize("file, edit, fragments", [
    ("encoder.pkl", lambda t: t.pop("backward_layer_1.state_projection.weight"), ["missing"]),
    ("encoder.pkl", lambda t: t.update({"extra": torch.zeros(1)}), ["unexpected", "extra"]),
    ("token_embedder.pkl", lambda t: t.update({"projection.bias": torch.zeros(9)}), ["projection.bias", "(9,)"]),
    ("token_embedder.pkl", lambda t: t["convolutions.0.bias"].fill_(float("nan")), ["NaN"]),
    ("encoder.pkl", lambda t: t.update({"forward_layer_0.state_linearity.bias": torch.zeros(48, dtype=torch.int64)}),
     ["torch.int64", "must be float"]),
    ("token_embedder.pkl", lambda t: t.pop("char_emb_layer.embedding.weight"), ["no 2-d tensor", "char"]),
])
def test_tensors_that_do_not_fit(copy, file, edit, fragments):
    edit_tensors(copy / file, edit)
    refused(copy, file, *fragments)


@pytest.mark.parametrize("legacy", [False, True])
def test_a_pkl_that_holds_code_is_refused(copy, legacy):
    edit_tensors(copy / "encoder.pkl", lambda t: t.update({"hook": print}), legacy)
    refused(copy, "encoder.pkl", "refused", "never unpickles")


@pytest.mark.timeout(120)
def test_huge_declared_legacy_storage_fails_fast_without_allocating(copy):
    tensors = torch.load(copy / "encoder.pkl", weights_only=True)
    with mock.patch.object(torch.storage.TypedStorage, "_size", lambda self: 2**40):  # declares 4 TB per storage
        torch.save(tensors, copy / "encoder.pkl", _use_new_zipfile_serialization=False)
    seconds, message = load_in_3gb("bilm", copy)
    assert seconds < 5 and "encoder.pkl" in message and "declares 1,099,511,627,776 elements" in message


def test_truncated_legacy_file(copy):
    edit_tensors(copy / "encoder.pkl", lambda t: None, legacy=True)
    data = (copy / "encoder.pkl").read_bytes()
    (copy / "encoder.pkl").write_bytes(data[: len(data) - 100])
    refused(copy, "encoder.pkl", "more than the file holds")


@pytest.mark.parametrize("file, text, fragments", [
    ("char.dic", "<bos>\t10**12\n", ["is not 'token<TAB>id'", "10**12"]),
    ("char.dic", "a\tb\tc\n", ["is not 'token<TAB>id'", "b\\tc"]),
    ("char.dic", "\n", ["is not 'token<TAB>id': ''"]),
    ("word.dic", "Hund\t1000000000000\n", ["word.dic", "'Hund' has id 1,000,000,000,000", "outside"]),
    ("char.dic", "D\t-1\n", ["char.dic", "id -1", "outside"]),
])
def test_dictionary_lines(copy, file, text, fragments):
    with open(copy / file, "a", encoding="utf-8") as f:
        f.write(text)
    refused(copy, *fragments)


def test_dictionary_that_does_not_belong_to_the_weights(copy):
    lines = (copy / "char.dic").read_text(encoding="utf-8").splitlines()
    (copy / "char.dic").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    refused(copy, "char.dic", f"{len(lines) - 1} characters for the {len(lines)} rows", "do not belong together")
    (copy / "char.dic").write_text("\n".join(line for line in lines if not line.startswith("<eow>")) + "\n")
    refused(copy, "char.dic", "lacks <eow>")


def test_dictionary_not_utf8_or_too_large(copy):
    (copy / "word.dic").write_bytes(b"\xff\xfe\t1\n")
    refused(copy, "word.dic", "not UTF-8")
    with open(copy / "word.dic", "wb") as f:
        f.truncate(65 << 20)  # sparse: nothing is written
    refused(copy, "word.dic", "too large")


@pytest.mark.parametrize("config", ["[1]", '{"model": "x"}', '{"config_path": 3}', "not json"])
def test_config_json(copy, config):
    (copy / "config.json").write_text(config)
    refused(copy, "config.json")


def test_own_format_character_table(model_dir, tmp_path, capsys):
    save_bilm(load_bilm(model_dir), tmp_path / "own")
    table = tmp_path / "own" / "char_table.json"
    edit_json(table, lambda t: t["chars"].update({"<pad>": 10**9}))
    refused(tmp_path / "own", "char_table.json", "'<pad>' has id 1,000,000,000")
    edit_json(table, lambda t: t.update({"words": None}))
    refused(tmp_path / "own", "char_table.json", "a word table is missing")
    table.unlink()
    refused(tmp_path / "own", "char_table.json", "not found")
    assert run_cli("info", tmp_path / "own") == 1
    assert "char_table.json" in one_error_line(capsys.readouterr().err)


def test_pipeline_without_its_character_table(model_dir, tmp_path):
    nlp = spacy.blank("de")
    nlp.add_pipe("elmo", config={"weights": str(model_dir)})
    nlp.to_disk(tmp_path / "p")
    edit_pipeline_bilm(tmp_path / "p" / "elmo" / "model", lambda msg: msg.pop("char_table"))
    with pytest.raises(ElmoFileError, match="elmo/model: the serialized model lacks its character table"):
        spacy.load(tmp_path / "p")
