"""`python -m spacy_elmo embed | convert | info | download | pretrain`, on the fixture and on random
tiny weights; downloads from a local HTTP server only (never the network)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import h5py
import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoFileError, load_bilm, save_bilm
from spacy_elmo.bilm import hub
from spacy_elmo.cli import main

from .conftest import REPO
from .reference_bilm import TINY_OPTIONS, write_random_weights

LINES = ["The cat sat on the mat .", "", "Hello world", "The cat sat on the mat .", "a b c d e f g h i j k l"]


def run_cli(*args) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    return exit_info.value.code


@pytest.fixture(params=["fixture", "random"])
def weights(request, fixture_dir, tmp_path_factory):
    if request.param == "fixture":
        return fixture_dir
    return write_random_weights(tmp_path_factory.mktemp("random"), TINY_OPTIONS, seed=11)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_output(path):
    with h5py.File(path, "r") as f:
        arrays = {k: f[k][...] for k in f if k != "sentence_to_index"}
        return arrays, json.loads(f["sentence_to_index"][0]), dict(f.attrs)


# ------------------------------------------------------------------------------------------------ info
def test_info_json(weights, capsys):
    assert run_cli("info", weights, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    bilm = load_bilm(weights)
    assert info["parameters"] == sum(p.numel() for p in bilm.parameters()) == sum(info["parameters_by_part"].values())
    n_layers = bilm.options.n_layers
    assert info["output_layers"] == n_layers + 1 and info["output_dim"] == bilm.output_dim
    assert [k for k in info["parameters_by_part"] if k.startswith("LSTM")] == [
        f"LSTM layer {i} {d}" for i in range(n_layers) for d in ("forward", "backward")]
    assert info["parameters_by_part"]["LSTM layer 0 forward"] == info["parameters_by_part"]["LSTM layer 0 backward"]
    assert info["widths"]["ELMo layers"] == bilm.output_dim and info["softmax_parameters"] is None
    for entry in info["files"]:
        with open(entry["path"], "rb") as f:
            assert entry["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert len(info["files"]) == 2


def test_info_table_and_softmax(fixture_dir, tmp_path, capsys):
    save_bilm(load_bilm(fixture_dir), tmp_path)
    torch.save({"weight": torch.zeros(10, 16), "bias": torch.zeros(10)}, tmp_path / "lm_head.pt")
    assert run_cli("info", tmp_path) == 0
    out = capsys.readouterr().out
    assert "LSTM layer 1 backward" in out and "highway 1" in out and "softmax (lm_head.pt)" in out and "170" in out
    assert hub.sha256_file(tmp_path / "weights.pt") in out


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    assert run_cli("info", tmp_path / "absent") == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "not found" in err and "Traceback" not in err


def test_module_entry_point_and_help(fixture_dir, capsys):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "spacy_elmo", "info", str(fixture_dir), "--json"],
                         capture_output=True, text=True, check=True, env=env, cwd=REPO)
    assert json.loads(out.stdout)["output_dim"] == 32
    for command in ("embed", "convert", "info", "download"):
        assert run_cli(command, "--help") == 0
        assert "Usage" in capsys.readouterr().out
    assert run_cli("pretrain", "--help") == 0  # argparse's own help, with the dotted overrides
    assert "--section.key" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------- convert
SENTS = [["The", "cat", "sat", "."], ["Hello"], ["a", "b", "c", "d", "e", "f"]]


def test_convert_round_trips_exactly(weights, tmp_path, capsys):
    assert run_cli("convert", weights, tmp_path / "own") == 0  # hdf5 -> own, detected
    assert (tmp_path / "own" / "bilm.json").is_file()
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5", "--stem", "tiny") == 0  # own -> hdf5, detected
    assert (tmp_path / "h5" / "elmo_tiny_weights.hdf5").is_file()
    original = load_bilm(weights).embed(SENTS)
    for converted in (tmp_path / "own", tmp_path / "h5"):
        for a, b in zip(original, load_bilm(converted).embed(SENTS)):
            np.testing.assert_array_equal(a, b)
    with h5py.File(next(weights.glob("*.hdf5"))) as a, h5py.File(tmp_path / "h5" / "elmo_tiny_weights.hdf5") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(a[name][...], b[name][...])
    assert run_cli("convert", weights, tmp_path / "h5") == 1  # never into a non-empty directory
    assert "not an empty directory" in capsys.readouterr().err


def test_convert_carries_the_softmax_and_vocabulary_of_a_pretrained_model(fixture_dir, tmp_path, capsys):
    """lm_head.pt and vocab.txt (written by `pretrain`) travel both ways, so `--init-from` keeps them."""
    save_bilm(load_bilm(fixture_dir), tmp_path / "own")
    torch.save({"weight": torch.randn(4, 16), "bias": torch.randn(4)}, tmp_path / "own" / "lm_head.pt")
    (tmp_path / "own" / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5") == 0
    assert run_cli("convert", tmp_path / "h5", tmp_path / "back") == 0
    assert "lm_head.pt" in capsys.readouterr().out
    for name in ("lm_head.pt", "vocab.txt"):
        for converted in ("h5", "back"):
            assert (tmp_path / converted / name).read_bytes() == (tmp_path / "own" / name).read_bytes()
    assert run_cli("info", tmp_path / "h5") == 0
    assert "softmax (lm_head.pt)" in capsys.readouterr().out


def test_convert_notes_a_policy_the_hdf5_layout_cannot_hold(fixture_dir, tmp_path, capsys):
    save_bilm(load_bilm(fixture_dir, state="zero"), tmp_path / "own")
    assert run_cli("convert", tmp_path / "own", tmp_path / "h5", "--to", "hdf5") == 0
    assert "state='zero'" in capsys.readouterr().err
    for a, b in zip(load_bilm(tmp_path / "own").embed(SENTS), load_bilm(tmp_path / "h5", state="zero").embed(SENTS)):
        np.testing.assert_array_equal(a, b)


# -------------------------------------------------------------------------------------------- download
class Handler(BaseHTTPRequestHandler):
    """Serves `server.files` ({url path: bytes}) with Range support; a path in `server.truncate_once`
    is cut off halfway (after announcing its full length) the first time it is asked for."""

    def do_GET(self):
        data = self.server.files.get(self.path)
        self.server.log.append((self.path, self.headers.get("Range")))
        if data is None:
            self.send_error(404)
            return
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        if start >= len(data):
            self.send_error(416)
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path in self.server.truncate_once:
            self.server.truncate_once.discard(self.path)
            body = body[: len(body) // 2]
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(fixture_dir, tmp_path, monkeypatch):
    """A local server holding the fixture under the published names of 'small'; the cache in tmp_path."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.log, httpd.truncate_once = [], set()
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", f"http://127.0.0.1:{httpd.server_port}/elmo")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    (_, options_url), (_, weights_url) = hub.published_files("small")
    httpd.files = {urlparse(options_url).path: (fixture_dir / "options.json").read_bytes(),
                   urlparse(weights_url).path: (fixture_dir / "lm_weights.hdf5").read_bytes()}
    httpd.weights_path = urlparse(weights_url).path
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_download_then_use_by_name(server, fixture_dir, fixture_bilm, tmp_path, capsys):
    assert run_cli("download", "small", "--no-progress") == 0
    directory = tmp_path / "cache" / "small"
    manifest = json.loads((directory / "manifest.json").read_text())["files"]
    weights_file = directory / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    assert manifest[weights_file.name]["sha256"] == hub.sha256_file(fixture_dir / "lm_weights.hdf5")
    for a, b in zip(load_bilm("small").embed(SENTS), fixture_bilm.embed(SENTS)):
        np.testing.assert_array_equal(a, b)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "small"})
    nlp.initialize()
    assert nlp("The cat sat .")._.elmo.shape == (4, 32)
    n_requests = len(server.log)
    assert run_cli("download", "small", "--no-progress") == 0 and len(server.log) == n_requests  # cached
    assert run_cli("info", "small", "--json") == 0
    assert str(weights_file) in capsys.readouterr().out


def test_download_resumes_a_part_file(server, fixture_dir, tmp_path):
    data = (fixture_dir / "lm_weights.hdf5").read_bytes()
    directory = tmp_path / "cache" / "small"
    directory.mkdir(parents=True)
    (directory / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5.part").write_bytes(data[:100_000])
    assert run_cli("download", "small", "--no-progress") == 0
    assert (server.weights_path, "bytes=100000-") in server.log
    assert (directory / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5").read_bytes() == data
    assert not list(directory.glob("*.part"))


def test_truncated_download_is_retried_from_where_it_stopped(server, fixture_dir, tmp_path):
    server.truncate_once.add(server.weights_path)
    assert run_cli("download", "small", "--no-progress") == 0
    size = (fixture_dir / "lm_weights.hdf5").stat().st_size
    assert [r for p, r in server.log if p == server.weights_path] == [None, f"bytes={size // 2}-"]
    assert load_bilm("small").embed(SENTS)[0].shape == (3, 4, 32)


def test_corrupt_download_is_rejected(server, tmp_path, capsys):
    server.files[server.weights_path] = b"\x89HDF\r\n" + os.urandom(5000)
    assert run_cli("download", "small", "--no-progress") == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "corrupt" in err and "weights.hdf5" in err
    directory = tmp_path / "cache" / "small"
    assert not (directory / "manifest.json").exists() and not list(directory.glob("*.hdf5"))


def test_a_changed_cached_file_is_an_error_naming_it(server, tmp_path, capsys):
    assert run_cli("download", "small", "--no-progress") == 0
    weights_file = tmp_path / "cache" / "small" / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    data = bytearray(weights_file.read_bytes())
    data[-1] ^= 1
    weights_file.write_bytes(bytes(data))
    with pytest.raises(hub.ChecksumError, match=str(weights_file)):
        load_bilm("small")
    capsys.readouterr()
    assert run_cli("info", "small") == 1
    assert f"error: {weights_file}: sha256 differs" in capsys.readouterr().err


def test_no_network_and_unknown_names(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")  # the discard port: refused
    assert run_cli("download", "medium", "--no-progress") == 1
    err = capsys.readouterr().err
    assert "could not reach" in err and f"place them in {tmp_path / 'medium'}" in err
    assert run_cli("download", "huge") == 1
    assert "unknown model name 'huge'" in capsys.readouterr().err


def test_missing_cached_model_never_downloads(tmp_path, monkeypatch, fixture_dir):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")
    with pytest.raises(hub.ModelNotCachedError, match="python -m spacy_elmo download original") as err:
        load_bilm("original")
    assert str(tmp_path / "original") in str(err.value) and "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5" in str(err.value)
    with pytest.raises(ElmoFileError, match="spacy_elmo download original"):  # at add_pipe, before any use
        spacy.blank("en").add_pipe("elmo", config={"weights": "original"})


def test_files_placed_by_hand_are_recorded_on_first_use(tmp_path, monkeypatch, fixture_dir):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    directory = tmp_path / "small"
    directory.mkdir()
    (options_name, _), (weights_name, _) = hub.published_files("small")
    shutil.copy(fixture_dir / "options.json", directory / options_name)
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / weights_name)
    assert load_bilm("small").output_dim == 32
    manifest = json.loads((directory / "manifest.json").read_text())["files"]
    assert manifest[weights_name]["source"] == "placed by hand"
    (directory / options_name).write_text((directory / options_name).read_text() + " ")
    with pytest.raises(hub.ChecksumError, match=options_name):
        load_bilm("small")
