"""Hostile, corrupt and mismatched ELMoForManyLangs directories (and this format's character table):
each is refused with one ElmoFileError naming the file and the problem, before anything large is
allocated."""

from __future__ import annotations

import io
import json
import pickle
import struct
from pathlib import Path
from unittest import mock

import pytest
import spacy
import torch

from spacy_elmo import ElmoFileError, load_bilm, save_bilm

from ..efml_models import write_efml_model
from ..helpers import one_error_line, refused, run_cli
from ..model_files import edit_pipeline_bilm, load_in_3gb, refused_with_peak


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


def edit_tensors(path: Path, edit, legacy: bool = False) -> None:
    tensors = torch.load(path, weights_only=True)
    edit(tensors)
    torch.save(tensors, path, _use_new_zipfile_serialization=not legacy)


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "name",
    ["config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl", "cnn_tiny.json"],
)
def test_a_missing_file_is_named(copy, name):
    (copy / name).unlink()
    if name == "cnn_tiny.json":
        refused(copy, "config.json", "'cnn_tiny.json', was found neither in")
    else:
        refused(copy, str(copy / name), "not found")


def _set(section, key, value):
    return lambda arch: arch[section].update({key: value})


@pytest.mark.parametrize(
    "edit, fragments",
    [
        (_set("token_embedder", "name", "lstm"), ["'lstm'", "not supported"]),
        (_set("encoder", "name", "lstm"), ["encoder 'lstm'", "not supported"]),
        (_set("token_embedder", "char_dim", 0), ["char_dim", "without characters"]),
        (_set("token_embedder", "char_dim", True), ["char_dim", "without characters", "True"]),
        (_set("encoder", "dim", 10**9), ["'encoder.dim' = 1000000000 is out of range"]),
        (
            _set("token_embedder", "n_highway", 3),
            ["token_embedder.pkl", "missing", "highways._layers.2.weight"],
        ),
        (
            _set("token_embedder", "word_dim", 0),
            ["token_embedder.pkl", "unexpected", "word_emb_layer"],
        ),
        (
            _set("encoder", "projection_dim", 9),
            ["token_embedder.pkl", "projection.weight", "(8, 22)", "(9, 22)"],
        ),
    ],
)
def test_architecture_that_does_not_fit(copy, edit, fragments):
    edit_json(copy / "cnn_tiny.json", edit)
    refused(copy, "cnn_tiny.json", *fragments)


@pytest.mark.parametrize(
    "section, key, value, fragment",
    [
        ("encoder", "dim", "12", "'encoder.dim' must be an integer, got '12'"),
        ("encoder", "n_layers", 0, "'encoder.n_layers' = 0 is out of range"),
        ("encoder", "projection_dim", -4, "'encoder.projection_dim' = -4 is out of range"),
        ("encoder", "cell_clip", -3, "'encoder.cell_clip' must be a number from"),
        ("encoder", "proj_clip", "3", "'encoder.proj_clip' must be a number from"),
        ("token_embedder", "n_highway", True, "'token_embedder.n_highway' must be an integer"),
        ("token_embedder", "filters", [[1, 4], [2, "8"]], "'token_embedder.filters count'"),
        ("token_embedder", "filters", "4", "'token_embedder.filters' must be a list"),
        ("token_embedder", "activation", "gelu", "unsupported 'token_embedder.activation'"),
        ("token_embedder", "word_dim", -1, "'token_embedder.word_dim' = -1 is out of range"),
        ("token_embedder", "max_characters_per_token", 2, "'token_embedder.max_characters_per"),
        (
            "token_embedder",
            "filters",
            [[1, 2**16]],
            "more than the 1,073,741,824 this package loads (check 'encoder.dim', "
            "'encoder.projection_dim', 'token_embedder.filters' and 'token_embedder.n_highway')",
        ),
    ],
)
def test_architecture_errors_name_the_files_own_keys(copy, section, key, value, fragment):
    """An error in an EFML architecture named the bilm-tf key it is translated to ('lstm.dim' for
    encoder.dim), which the file does not have."""
    edit_json(copy / "cnn_tiny.json", _set(section, key, value))
    message = refused(copy, "cnn_tiny.json: ", fragment)
    assert "lstm" not in message and "char_cnn" not in message, message


@pytest.mark.parametrize(
    "file, edit, fragments",
    [
        ("encoder.pkl", lambda t: t.pop("backward_layer_1.state_projection.weight"), ["missing"]),
        ("encoder.pkl", lambda t: t.update({"extra": torch.zeros(1)}), ["unexpected", "extra"]),
        (
            "token_embedder.pkl",
            lambda t: t.update({"projection.bias": torch.zeros(9)}),
            ["projection.bias", "(9,)"],
        ),
        ("token_embedder.pkl", lambda t: t["convolutions.0.bias"].fill_(float("nan")), ["NaN"]),
        (
            "encoder.pkl",
            lambda t: t.update(
                {"forward_layer_0.state_linearity.bias": torch.zeros(48, dtype=torch.int64)}
            ),
            ["torch.int64", "must be float"],
        ),
        (
            "token_embedder.pkl",
            lambda t: t.pop("char_emb_layer.embedding.weight"),
            ["no 2-d tensor", "char"],
        ),
        (
            "token_embedder.pkl",
            lambda t: t.update({"char_emb_layer.embedding.weight": torch.tensor(1.0)}),
            ["no 2-d tensor", "char"],
        ),
        (
            "token_embedder.pkl",
            lambda t: t.update({"word_emb_layer.embedding.weight": torch.zeros(3, 2, 2)}),
            ["no 2-d tensor", "word"],
        ),
    ],
)
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
    # declares 4 TB per storage
    with mock.patch.object(torch.storage.TypedStorage, "_size", lambda self: 2**40):
        torch.save(tensors, copy / "encoder.pkl", _use_new_zipfile_serialization=False)
    seconds, message = load_in_3gb("bilm", copy)
    assert (
        seconds < 5
        and "encoder.pkl" in message
        and "declares 1,099,511,627,776 elements" in message
    )


def test_truncated_legacy_file(copy):
    edit_tensors(copy / "encoder.pkl", lambda t: None, legacy=True)
    data = (copy / "encoder.pkl").read_bytes()
    (copy / "encoder.pkl").write_bytes(data[: len(data) - 100])
    refused(copy, "encoder.pkl", "more than the file holds")


def legacy_pickles(object_pickle: bytes) -> bytes:
    """A legacy `torch.save` file's pickles around `object_pickle` (the object's), no storages."""
    data = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {}):
        pickle.dump(header, data, protocol=2)
    data.write(object_pickle)
    pickle.dump([], data, protocol=2)
    return data.getvalue()


@pytest.mark.timeout(120)
def test_a_huge_memo_index_allocates_nothing(copy):
    """A memo put of index 2**25 in a 50-byte file: C's unpickler zeroes 16 bytes per index."""
    (copy / "encoder.pkl").write_bytes(
        legacy_pickles(b"\x80\x02}r" + struct.pack("<I", 1 << 25) + b".")
    )
    message, grown_mib = refused_with_peak(copy)
    assert "encoder.pkl" in message and grown_mib < 64, (message, grown_mib)


@pytest.mark.timeout(120)
def test_a_huge_declared_pickle_length_is_refused_unread(copy):
    (copy / "encoder.pkl").write_bytes(legacy_pickles(b"\x80\x02X" + struct.pack("<I", 0xF0000000)))
    seconds, message = load_in_3gb("bilm", copy)
    assert "encoder.pkl" in message and "more than a torch state dict's structure needs" in message


@pytest.mark.parametrize(
    "file, text, fragments",
    [
        ("char.dic", "<bos>\t10**12\n", ["is not 'token<TAB>id'", "10**12"]),
        ("char.dic", "a\tb\tc\n", ["is not 'token<TAB>id'", "b\\tc"]),
        ("char.dic", "\n", ["is not 'token<TAB>id': ''"]),
        (
            "word.dic",
            "Hund\t1000000000000\n",
            ["word.dic", "'Hund' has id 1,000,000,000,000", "outside"],
        ),
        ("char.dic", "D\t-1\n", ["char.dic", "id -1", "outside"]),
    ],
)
def test_dictionary_lines(copy, file, text, fragments):
    with open(copy / file, "a", encoding="utf-8") as f:
        f.write(text)
    refused(copy, *fragments)


def test_dictionary_that_does_not_belong_to_the_weights(copy):
    lines = (copy / "char.dic").read_text(encoding="utf-8").splitlines()
    (copy / "char.dic").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    refused(
        copy,
        "char.dic",
        f"{len(lines) - 1} characters for the {len(lines)} rows",
        "do not belong together",
    )
    (copy / "char.dic").write_text(
        "\n".join(line for line in lines if not line.startswith("<eow>")) + "\n"
    )
    refused(copy, "char.dic", "lacks <eow>")


def test_dictionary_not_utf8_or_too_large(copy):
    (copy / "word.dic").write_bytes(b"\xff\xfe\t1\n")
    refused(copy, "word.dic", "not UTF-8")
    with open(copy / "word.dic", "wb") as f:
        f.truncate(65 << 20)  # sparse: nothing is written
    refused(copy, "word.dic", "too large")


@pytest.mark.parametrize(
    "config", ["[1]", '{"model": "x"}', '{"config_path": 3}', "not json", "9" * 5000]
)
def test_config_json(copy, config):
    (copy / "config.json").write_text(config)
    refused(copy, "config.json")


def test_a_config_path_too_long_is_named(copy):
    edit_json(copy / "config.json", lambda c: c.update(config_path="a" * 300))
    refused(copy, "a" * 300, "File name too long")


def test_a_nul_character_in_config_path_is_named(copy):
    """A config_path holding a NUL character raised ValueError (embedded null byte) from os.stat."""
    edit_json(copy / "config.json", lambda c: c.update(config_path="cnn\x00.json"))
    message = refused(
        copy,
        "cnn\\x00.json': a NUL character in the path of the ELMoForManyLangs architecture",
        f"('config_path' of {copy / 'config.json'})",
    )
    assert "\x00" not in message


def test_own_format_character_table(model_dir, tmp_path, capsys):
    save_bilm(load_bilm(model_dir), tmp_path / "own")
    table = tmp_path / "own" / "char_table.json"
    edit_json(table, lambda t: t["chars"].update({"<pad>": 10**9}))
    refused(tmp_path / "own", "char_table.json", "'<pad>' has id 1,000,000,000")
    edit_json(table, lambda t: t.update({"words": None}))
    refused(tmp_path / "own", "char_table.json", "a word table is missing")
    table.write_text('{"chars": {"a": ' + "9" * 5000 + "}}")
    refused(tmp_path / "own", "char_table.json", "Exceeds the limit (4300 digits)")
    table.unlink()
    refused(tmp_path / "own", "char_table.json", "not found")
    assert run_cli("info", tmp_path / "own") == 1
    assert "char_table.json" in one_error_line(capsys.readouterr().err)


def test_own_format_character_table_symlinked_outside_is_refused(model_dir, tmp_path):
    """char_table.json of a model in this project's format is read from its directory only."""
    save_bilm(load_bilm(model_dir), tmp_path / "own")
    table = tmp_path / "own" / "char_table.json"
    table.rename(tmp_path / "elsewhere.json")
    table.symlink_to(tmp_path / "elsewhere.json")
    refused(tmp_path / "own", f"{table}: refused", "outside the model directory")


def test_pipeline_without_its_character_table(model_dir, tmp_path):
    nlp = spacy.blank("de")
    nlp.add_pipe("elmo", config={"weights": str(model_dir)})
    nlp.to_disk(tmp_path / "p")
    edit_pipeline_bilm(tmp_path / "p" / "elmo" / "model", lambda msg: msg.pop("char_table"))
    with pytest.raises(
        ElmoFileError, match="elmo/model: the serialized model lacks its character table"
    ):
        spacy.load(tmp_path / "p")


# ------------------------------------------------------------------ a model directory is read from
# itself only
SECRET = "root:x:0:0:secret-first-line:/root:/bin/bash"


@pytest.fixture()
def outside(tmp_path) -> Path:
    """A file outside the model directory whose first line must never appear in a message."""
    path = tmp_path / "elsewhere" / "target"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


@pytest.mark.parametrize(
    "name",
    ["char.dic", "word.dic", "config.json", "cnn_tiny.json", "encoder.pkl", "token_embedder.pkl"],
)
def test_a_file_symlinked_outside_the_directory_is_refused(copy, outside, name):
    (copy / name).unlink()
    (copy / name).symlink_to(outside)
    message = refused(copy, str(copy / name), "outside the model directory")
    assert "secret-first-line" not in message


@pytest.mark.parametrize("name", ["char.dic", "word.dic"])
def test_a_dictionary_symlinked_to_etc_passwd_is_refused_unread(copy, name):
    first = Path("/etc/passwd").read_text().splitlines()[0]
    (copy / name).unlink()
    (copy / name).symlink_to("/etc/passwd")
    message = refused(copy, str(copy / name), "outside the model directory")
    assert first not in message and first[:8] not in message


def test_a_symlink_inside_the_directory_is_read(copy):
    (copy / "tables").mkdir()
    (copy / "char.dic").rename(copy / "tables" / "char.dic")
    (copy / "char.dic").symlink_to(Path("tables") / "char.dic")
    assert load_bilm(copy).embed([["Hund"]])[0].shape[1] == 1


@pytest.mark.parametrize("config_path", ["OUTSIDE", "../cnn_tiny.json", "../../cnn_tiny.json"])
def test_config_path_is_a_file_name_looked_up_inside(copy, outside, config_path):
    """The architecture outside (same name, wrong sizes) never wins over the one inside, nor is it
    read."""
    arch = json.loads((copy / "cnn_tiny.json").read_text())
    arch["encoder"]["dim"] = 13
    for where in (outside.parent / "cnn_tiny.json", copy.parent / "cnn_tiny.json"):
        where.write_text(json.dumps(arch))
    named = str(outside.parent / "cnn_tiny.json") if config_path == "OUTSIDE" else config_path
    edit_json(copy / "config.json", lambda c: c.update({"config_path": named}))
    assert load_bilm(copy).options.lstm_dim == 12
    (copy / "cnn_tiny.json").unlink()
    message = refused(copy, "config.json", "was found neither in")
    assert '"encoder"' not in message


def test_messages_quote_a_short_escaped_excerpt_only(copy):
    with open(copy / "char.dic", "a", encoding="utf-8") as f:
        f.write("x" * 10_000 + "\u202e\n")
    message = refused(copy, "char.dic", "line")
    assert "x" * 41 not in message and len(message) < len(str(copy)) + 200


# ------------------------------------------------------------------ sizes checked before anything
# large is allocated
def test_an_expanded_tensor_is_refused_before_it_is_materialised(copy):
    """A view of one row (stride 0) stores a few bytes and declares any number of rows: 11 KB
    declaring 256M parameters. Refused on what it stores, before a dense copy is made."""
    rows = 200_000
    edit_tensors(
        copy / "token_embedder.pkl",
        lambda t: t.update({"word_emb_layer.embedding.weight": torch.zeros(1, 6).expand(rows, 6)}),
    )
    assert (copy / "token_embedder.pkl").stat().st_size < 20_000
    with open(copy / "word.dic", "a", encoding="utf-8") as f:
        f.write("".join(f"w{i}\t{i}\n" for i in range(27, rows)))
    refused(
        copy,
        "token_embedder.pkl",
        "'word_emb_layer.embedding.weight'",
        "(200000, 6)",
        "stores 6 of its 1,200,000 values",
    )


def test_efml_memory_is_estimated_before_converting(copy, monkeypatch):
    """float16 files hold half of what the float32 network needs: the need is checked before
    converting."""
    from spacy_elmo import ElmoResourceError
    from spacy_elmo.weights import memory

    for name in ("token_embedder.pkl", "encoder.pkl"):
        edit_tensors(copy / name, lambda t: t.update({k: v.half() for k, v in t.items()}))
    n_parameters = sum(p.numel() for p in load_bilm(copy).parameters())
    available = (
        2 * max((copy / name).stat().st_size for name in ("token_embedder.pkl", "encoder.pkl")) + 1
    )
    assert available < 8 * n_parameters  # the files pass their own check
    monkeypatch.setattr(memory, "available_memory", lambda: available)
    with pytest.raises(ElmoResourceError) as err:
        load_bilm(copy)
    assert "token_embedder.pkl" in str(err.value) and "GiB of memory" in str(err.value)
