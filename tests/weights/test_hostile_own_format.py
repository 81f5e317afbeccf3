"""Hostile and corrupt models in this project's own format (bilm.json, weights.pt, lm_head.pt):
each is refused with one ElmoFileError that names the file and the problem, never unpickled; the
command line says so in one error line. Every model is a damaged copy of the fixture."""

from __future__ import annotations

import io
import json

import pytest
import torch

from spacy_elmo.cli import main

from ..helpers import refused
from ..model_files import own_model


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_refused_in_own_format(fixture_dir, tmp_path, bad):
    directory = own_model(fixture_dir, tmp_path / "m")
    state = torch.load(directory / "weights.pt", weights_only=True)
    state["lstm.layers.1.w_proj"][0, 3, 2] = bad
    torch.save(state, directory / "weights.pt")
    refused(directory, "weights.pt", "lstm.layers.1.w_proj", "NaN or infinite")


@pytest.mark.parametrize("config", [[1, 2], "a string", 7])
def test_own_config_that_is_not_an_object(fixture_dir, tmp_path, config):
    directory = own_model(fixture_dir, tmp_path / "m")
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", "JSON object")


@pytest.mark.parametrize(
    "content, problem",
    [
        (lambda sd: 3, "got int"),
        (lambda sd: [torch.zeros(2)], "got list"),
        (lambda sd: {**sd, "warm_h": 4}, "not a named dense tensor"),
        (lambda sd: {**sd, "warm_h": sd["warm_h"].to_sparse()}, "not a named dense tensor"),
        (lambda sd: {**sd, "warm_h": sd["warm_h"].to(torch.int32)}, "must be float"),
        (lambda sd: {**sd, "extra": torch.zeros(1)}, "unexpected ['extra']"),
        (lambda sd: {k: v for k, v in sd.items() if k != "warm_c"}, "missing ['warm_c']"),
        (
            lambda sd: {**sd, "token_encoder.w_proj": sd["token_encoder.w_proj"].t().contiguous()},
            "'token_encoder.w_proj' has shape (16, 124) but the options imply (124, 16)",
        ),
    ],
)
def test_own_weights_that_are_not_a_state_dict(fixture_dir, tmp_path, content, problem):
    directory = own_model(fixture_dir, tmp_path / "m")
    torch.save(
        content(torch.load(directory / "weights.pt", weights_only=True)), directory / "weights.pt"
    )
    refused(directory, "weights.pt", problem)


@pytest.mark.parametrize("key, value", [("version", 2), ("version", None), ("format", "other")])
def test_own_config_of_another_format_or_version_is_refused(fixture_dir, tmp_path, key, value):
    directory = own_model(fixture_dir, tmp_path / "m")
    config = json.loads((directory / "bilm.json").read_text())
    config[key] = value
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", "expected format 'spacy_elmo.bilm' version 1", repr(value))


def test_weights_of_under_two_bytes_a_parameter_are_refused_before_the_network_is_built(
    fixture_dir, tmp_path
):
    """The fixture's weights in float16 (2 bytes for each of its 105,124 parameters) under options
    of 143,012 parameters (lstm.dim 128): more than one byte each, fewer than two."""
    directory = own_model(fixture_dir, tmp_path / "m")
    state = torch.load(directory / "weights.pt", weights_only=True)
    torch.save({k: v.half() for k, v in state.items()}, directory / "weights.pt")
    config = json.loads((directory / "bilm.json").read_text())
    config["options"]["lstm"]["dim"] = 128
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "weights.pt", "too few for the 143,012 parameters")


class Evil:
    """Unpickling this prints "pwned": an lm_head.pt must never be unpickled freely."""

    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize("command", ["convert", "info"])
def test_evil_lm_head_is_one_error_line(fixture_dir, tmp_path, capsys, command):
    directory = own_model(fixture_dir, tmp_path / "m")
    torch.save({"x": Evil()}, directory / "lm_head.pt")
    args = [command, directory] + ([tmp_path / "out"] if command == "convert" else [])
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert (
        err.startswith("error: ")
        and err.count("\n") == 1
        and "lm_head.pt" in err
        and "pwned" not in err
    )
    assert not (tmp_path / "out" / "lm_head.pt").exists()


def test_cli_errors_catch_the_file_error_type(fixture_dir, tmp_path, capsys):
    directory = own_model(fixture_dir, tmp_path / "m")
    (directory / "bilm.json").write_text("[1]")
    with pytest.raises(SystemExit) as exit_info:
        main(["info", str(directory)])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 1
        and err.startswith("error: ")
        and "bilm.json" in err
        and "Traceback" not in err
    )


def test_compressed_torch_archive_is_refused_before_reading(fixture_dir, tmp_path):
    """weights.pt whose zip entries are deflated (torch never writes them so): 1.18 MB on disk took
    5.1 GB."""
    import zipfile

    path = own_model(fixture_dir, tmp_path / "m")
    original = (path / "weights.pt").read_bytes()
    with (
        zipfile.ZipFile(io.BytesIO(original)) as src,
        zipfile.ZipFile(path / "weights.pt", "w") as dst,
    ):
        for entry in src.infolist():
            dst.writestr(entry.filename, src.read(entry), compress_type=zipfile.ZIP_DEFLATED)
    refused(path, "weights.pt", "is compressed", "torch.save stores entries as they are")
    # not a zip at all: the legacy format
    (path / "weights.pt").write_bytes(b"\x80\x02" + original[:100])
    refused(path, "weights.pt", "not a torch zip archive")


def test_a_meta_tensor_in_the_own_format_is_refused(fixture_dir, tmp_path):
    directory = own_model(fixture_dir, tmp_path / "m")
    state = torch.load(directory / "weights.pt", weights_only=True)
    state["token_encoder.b_proj"] = torch.empty(state["token_encoder.b_proj"].shape, device="meta")
    torch.save(state, directory / "weights.pt")
    refused(directory, "weights.pt", "token_encoder.b_proj", "meta")


@pytest.mark.parametrize(
    "key, value",
    [("forget_bias", 1e308), ("forget_bias", -1e39), ("cell_clip", 1e39), ("proj_clip", 1e300)],
)
def test_an_own_format_option_out_of_float32_range_is_refused(fixture_dir, tmp_path, key, value):
    directory = own_model(fixture_dir, tmp_path / "m")
    config = json.loads((directory / "bilm.json").read_text())
    config["options"]["lstm"][key] = value
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", f"lstm.{key}")


@pytest.mark.parametrize(
    "key, record",
    [
        ("sha256", {"weights.pt": "ab" * 31}),
        ("sha256", {"weights.pt": 7}),
        ("sha256", ["weights.pt"]),
        ("sha256", []),
        ("archive_crc32", "ab" * 32),
    ],
)
def test_own_config_whose_record_of_its_files_is_no_map_to_sha256s(
    fixture_dir, tmp_path, key, record
):
    """bilm.json's records of the files saved with it (`sha256`, `archive_crc32`) map file names to
    64 hex digits: any other is one error naming the key (an empty list too: not taken as no
    record)."""
    directory = own_model(fixture_dir, tmp_path / "m")
    config = json.loads((directory / "bilm.json").read_text())
    config[key] = record
    (directory / "bilm.json").write_text(json.dumps(config))
    refused(directory, "bilm.json", f"'{key}' must map file names to sha256s", repr(record))
