"""`python -m spacy_elmo download` and loading published models by name: the cache, its manifest and checksums,
resumed and retried downloads; from a local HTTP server only (never the network)."""
from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoFileError, load_bilm
from spacy_elmo.bilm import hub

from ..helpers import SENTS, run_cli


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
    with pytest.raises(ElmoFileError, match=str(weights_file)):
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
    with pytest.raises(ElmoFileError, match="python -m spacy_elmo download original") as err:
        load_bilm("original")
    assert str(tmp_path / "original") in str(err.value)
    assert "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5" in str(err.value)
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
    with pytest.raises(ElmoFileError, match=options_name):
        load_bilm("small")
