"""`python -m spacy_elmo download` and loading published models by name: the cache, its manifest and
checksums, resumed and retried downloads; from a local HTTP server only (never the network)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoConfigError, ElmoFileError, ElmoResourceError, load_bilm
from spacy_elmo.bilm.model import BiLM
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.files import sha256_file
from spacy_elmo.weights import download as download_module
from spacy_elmo.weights import hub
from spacy_elmo.weights.hub import published_options
from spacy_elmo.weights.untrained import write_untrained

from ..helpers import ENV, SENTS, one_error_line, run_cli, tmpfs


class Handler(BaseHTTPRequestHandler):
    """Serves `server.files` ({url path: bytes}) with Range support and, as S3 and nginx do, a
    validator of each file: a strong ETag (`server.validator == "etag"`, the default), only a
    Last-Modified date (`"last-modified"`), a weak ETag and a Last-Modified date (`"weak-etag"`: the
    date is the validator) or none (None), the last sent in `server.validators`; a
    Range whose `If-Range` is not the file's validator gets the whole file (200), unless
    `server.ignore_if_range`. A path in
    `server.truncate_once` is cut off halfway (after announcing its full length) the first time it
    is asked for; a path in `server.trickle` ({path: seconds}) is sent one byte at a time, that many
    seconds apart; a path in `server.extra` ({path: n}) gets n bytes more than its Content-Range
    says, counted in its Content-Length; a path in `server.rate` ({path: bytes per second}) is sent
    at that rate; a path in `server.slow_headers` gets its status line, then a header one byte every
    0.1 s (for 30 s); a path in `server.length` ({path: text}) gets that Content-Length; a Range
    of a path in `server.skip` ({path: n}) is answered from n bytes further on."""

    def do_GET(self):
        data = self.server.files.get(self.path)
        self.server.log.append((self.path, self.headers.get("Range")))
        self.server.if_range.append((self.path, self.headers.get("If-Range")))
        if self.path in self.server.slow_headers:
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(300):
                    self.wfile.write(b"a")
                    time.sleep(0.1)
            except OSError:  # the client hung up
                pass
            return
        if data is None:
            self.send_error(404)
            return
        digest = hashlib.md5(data).digest()
        date = formatdate(int.from_bytes(digest[:3], "big") * 60, usegmt=True)
        validator = {
            "etag": f'"{digest.hex()}"',
            "last-modified": date,
            "weak-etag": date,
            None: None,
        }[self.server.validator]
        self.server.validators[self.path] = validator
        start = (
            int(self.headers["Range"].split("=")[1].split("-")[0])
            if self.headers.get("Range")
            else 0
        )
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range != validator and not self.server.ignore_if_range:
            start = 0
        start += self.server.skip.get(self.path, 0) if start else 0
        if start >= len(data):
            self.send_error(416)
            return
        self.send_response(206 if start else 200)
        if validator is not None:
            header = "ETag" if self.server.validator == "etag" else "Last-Modified"
            self.send_header(header, validator)
        if self.server.validator == "weak-etag":  # never matches an If-Range (RFC 9110 13.1.5)
            self.send_header("ETag", f'W/"{digest.hex()}"')
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        body = data[start:] + b"x" * self.server.extra.get(self.path, 0)
        self.send_header("Content-Length", self.server.length.get(self.path, str(len(body))))
        self.end_headers()
        if self.path in self.server.truncate_once:
            self.server.truncate_once.discard(self.path)
            body = body[: len(body) // 2]
        delay, step = self.server.trickle.get(self.path), self.server.rate.get(self.path, 0) // 20
        try:
            for i in range(0, len(body) if step else 0, step or 1):
                self.wfile.write(body[i : i + step])
                time.sleep(0.05)
            if not delay and not step:
                self.wfile.write(body)
            for i in range(len(body) if delay else 0):
                self.wfile.write(body[i : i + 1])
                time.sleep(delay)
        except OSError:  # the client hung up (a deadline, a refused size): nothing more to send
            pass

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def small_models(tmp_path_factory):
    """Two versions of a model at the published small's sizes (random weights, seeds 0 and 1, of one
    size), as a mirror holds them: for each, its directory under the published file names."""
    directories = []
    for seed in (0, 1):
        directory = tmp_path_factory.mktemp(f"small{seed}")
        options_file, _ = write_untrained(directory, "small", seed=seed)
        # unlabelled, as the published files are
        options_file.write_text(json.dumps(published_options("small")))
        directories.append(directory)
    return directories


def serve(httpd, directory) -> None:
    """Let `httpd` serve the model in `directory` (published file names) as 'small'."""
    for name, url in hub.published_files("small"):
        httpd.files[urlparse(url).path] = (directory / name).read_bytes()


@pytest.fixture
def server(small_models, tmp_path, monkeypatch):
    """A local server holding a model of the small's sizes (`small_models[0]`) under the published
    names of 'small'; the cache in tmp_path."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.log, httpd.truncate_once, httpd.trickle, httpd.extra, httpd.rate = [], set(), {}, {}, {}
    httpd.if_range, httpd.validators, httpd.validator, httpd.ignore_if_range = [], {}, "etag", False
    httpd.slow_headers, httpd.length, httpd.skip = set(), {}, {}
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", f"http://127.0.0.1:{httpd.server_port}/elmo")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    (_, options_url), (_, weights_url) = hub.published_files("small")
    httpd.files = {}
    serve(httpd, small_models[0])
    httpd.options_path, httpd.weights_path = urlparse(options_url).path, urlparse(weights_url).path
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


WEIGHTS = "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"


def test_download_then_use_by_name(server, small_models, tmp_path, capsys):
    assert run_cli("download", "small", "--no-progress") == 0
    directory = tmp_path / "cache" / "small"
    manifest = json.loads((directory / "manifest.json").read_text())["files"]
    weights_file = directory / WEIGHTS
    assert manifest[weights_file.name]["sha256"] == sha256_file(small_models[0] / WEIGHTS)
    for a, b in zip(load_bilm("small").embed(SENTS), load_bilm(small_models[0]).embed(SENTS)):
        np.testing.assert_array_equal(a, b)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "small"})
    nlp.initialize()
    assert nlp("The cat sat .")._.elmo.shape == (4, 256)
    n_requests = len(server.log)
    # cached
    assert run_cli("download", "small", "--no-progress") == 0 and len(server.log) == n_requests
    assert run_cli("info", "small", "--json") == 0
    assert str(weights_file) in capsys.readouterr().out


def interrupt(server, path: str):
    """A download of 'small' whose one attempt is cut off halfway through the file at URL `path`
    -> the part file it leaves."""
    server.truncate_once.add(path)
    with pytest.raises(ElmoResourceError, match="incomplete after 1 attempts"):
        download_module.download("small", attempts=1)
    part = hub.model_dir("small") / (path.rsplit("/", 1)[1] + ".part")
    assert 0 < part.stat().st_size < len(server.files[path])
    return part


def assert_downloaded(directory, model) -> None:
    """`directory` holds the two files of `model` (a directory), recorded, and nothing else."""
    for name, _ in hub.published_files("small"):
        assert (directory / name).read_bytes() == (model / name).read_bytes(), name
    assert hub.verify(directory, "small")
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["manifest.json"] + [f for f, _ in hub.published_files("small")]
    )


@pytest.mark.parametrize("validator", ["etag", "last-modified", "weak-etag"])
def test_download_resumes_a_part_file(server, small_models, tmp_path, validator):
    """An interrupted download continues in the next call where it stopped: a Range request whose
    If-Range is the file's ETag (else, a weak ETag never matching, its Last-Modified date), as the
    part file's first bytes came with."""
    server.validator = validator
    have = interrupt(server, server.weights_path).stat().st_size
    assert run_cli("download", "small", "--no-progress") == 0
    assert server.log[-1] == (server.weights_path, f"bytes={have}-")
    assert server.if_range[-1] == (server.weights_path, server.validators[server.weights_path])
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


@pytest.mark.parametrize("validator", ["etag", "last-modified"])
def test_a_file_changed_since_its_part_file_is_fetched_again_whole(
    server, small_models, tmp_path, validator
):
    """The mirror's file changed since the part file was written (another version, of one size):
    the server answers the resume's If-Range with the whole new file (200), which replaces the part
    (before: no If-Range, so the old file's first bytes and the new file's rest, which loaded and
    were recorded as 'small')."""
    server.validator = validator
    have = interrupt(server, server.weights_path).stat().st_size
    serve(server, small_models[1])
    assert run_cli("download", "small", "--no-progress") == 0
    assert_downloaded(tmp_path / "cache" / "small", small_models[1])
    assert server.log[-1] == (server.weights_path, f"bytes={have}-")
    assert server.if_range[-1][1] is not None


def test_a_server_that_ignores_if_range_cannot_mix_two_files(server, small_models, tmp_path):
    """A server that continues a Range whatever its If-Range says, but names the file's new ETag:
    its 206 is not taken, and the file is fetched again from byte 0."""
    server.ignore_if_range = True
    have = interrupt(server, server.weights_path).stat().st_size
    serve(server, small_models[1])
    assert run_cli("download", "small", "--no-progress") == 0
    requests = [r for p, r in server.log if p == server.weights_path]
    assert requests == [None, f"bytes={have}-", None]
    assert_downloaded(tmp_path / "cache" / "small", small_models[1])


def half_of_another_version(tmp_path, small_models):
    """The cache directory of `small`, holding half of another version of its weights as the part
    file of an interrupted download."""
    directory = tmp_path / "cache" / "small"
    directory.mkdir(parents=True)
    old = (small_models[1] / WEIGHTS).read_bytes()
    (directory / f"{WEIGHTS}.part").write_bytes(old[: len(old) // 2])
    return directory


def test_a_part_file_of_unknown_origin_is_fetched_again(server, small_models, tmp_path):
    """A part file with no record of where it came from (here: half of another version of the
    file) is not continued: the file is fetched from byte 0, no Range asked."""
    directory = half_of_another_version(tmp_path, small_models)
    assert run_cli("download", "small", "--no-progress") == 0
    assert_downloaded(directory, small_models[0])
    assert [r for p, r in server.log if p == server.weights_path] == [None]


def test_a_part_file_from_another_mirror_is_fetched_again(
    server, small_models, tmp_path, monkeypatch
):
    """SPACY_ELMO_BASE_URL switched to another mirror after an interrupted download: the part file
    came from another URL, so the file is fetched from byte 0."""
    interrupt(server, server.weights_path)
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", f"http://127.0.0.1:{server.server_port}/other")
    serve(server, small_models[1])
    assert run_cli("download", "small", "--no-progress") == 0
    assert [r for p, r in server.log if p.startswith("/other/")] == [None]
    assert_downloaded(tmp_path / "cache" / "small", small_models[1])


def test_a_part_file_without_a_validator_is_fetched_again(server, small_models, tmp_path):
    """A server that names no ETag nor Last-Modified: nothing tells whether its file changed since
    the part file was written, so the part is not continued."""
    server.validator = None
    interrupt(server, server.weights_path)
    assert run_cli("download", "small", "--no-progress") == 0
    assert [r for p, r in server.log if p == server.weights_path] == [None, None]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


@pytest.mark.parametrize("record", ["[1, 2]", "{not json"])
def test_a_part_file_whose_record_is_no_json_object_is_fetched_again(
    server, small_models, tmp_path, record
):
    """A `.part.origin` that is not the object a download writes (a list, broken JSON): any doubt
    starts over, the file fetched from byte 0 (a list was an AttributeError traceback)."""
    part = interrupt(server, server.weights_path)
    part.with_name(part.name + ".origin").write_text(record)
    assert run_cli("download", "small", "--no-progress") == 0
    assert [r for p, r in server.log if p == server.weights_path] == [None, None]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


def test_a_part_file_as_long_as_the_file_is_fetched_again_whole(server, small_models, tmp_path):
    """A part file holding every byte of the file (a download stopped before its rename): the
    server refuses its Range past the end (416), and the file is fetched again from byte 0."""
    part = interrupt(server, server.weights_path)
    whole = server.files[server.weights_path]
    part.write_bytes(whole)
    assert run_cli("download", "small", "--no-progress") == 0
    requests = [r for p, r in server.log if p == server.weights_path]
    assert requests == [None, f"bytes={len(whole)}-", None]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


def test_a_download_stopped_as_it_starts_over_keeps_no_bytes_of_the_old_file(
    server, small_models, tmp_path
):
    """The file changed since its part file was written: the resume is answered with the whole new
    file. A download stopped there, before any of it is written, leaves none of the old bytes to be
    continued under the new file's validator (a mixed file)."""

    class Stop(Exception):
        pass

    def stop(name, total, initial):
        raise Stop

    interrupt(server, server.weights_path)
    serve(server, small_models[1])
    with pytest.raises(Stop):
        download_module.download("small", progress=stop)
    assert run_cli("download", "small", "--no-progress") == 0
    assert_downloaded(tmp_path / "cache" / "small", small_models[1])


def test_a_resumed_download_shows_its_progress_from_the_part(server, small_models, tmp_path):
    """`progress(description, total, initial)`: a resumed file's bar starts at the bytes its part
    file holds and is updated with each block received, up to the file's size."""
    have = interrupt(server, server.weights_path).stat().st_size
    bars = []

    class Bar:
        def __init__(self, name, total, initial):
            self.name, self.total, self.initial, self.received = name, total, initial, 0
            bars.append(self)

        def update(self, n):
            self.received += n

        def close(self):
            pass

    download_module.download("small", progress=Bar)
    size = len(server.files[server.weights_path])
    assert [(b.name, b.total, b.initial, b.received) for b in bars] == [
        (WEIGHTS, size, have, size - have)
    ]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


def test_a_file_removed_from_a_downloaded_model_is_fetched_again(server, small_models, tmp_path):
    """A recorded model missing one of its files is not there: `download` fetches that file alone
    (not the error of a missing file)."""
    assert run_cli("download", "small", "--no-progress") == 0
    (tmp_path / "cache" / "small" / WEIGHTS).unlink()
    n_requests = len(server.log)
    assert run_cli("download", "small", "--no-progress") == 0
    assert [p for p, _ in server.log[n_requests:]] == [server.weights_path]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


def test_a_file_mirror_copies_whole_files(small_models, tmp_path, monkeypatch):
    """A file:// mirror (no validator, no Range): a part file left from another version of the file
    gives way to a whole copy."""
    mirror = tmp_path / "mirror"
    shutil.copytree(small_models[0], mirror / hub.PUBLISHED["small"])
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", mirror.as_uri())
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    directory = half_of_another_version(tmp_path, small_models)
    assert run_cli("download", "small", "--no-progress") == 0
    assert_downloaded(directory, small_models[0])


def test_truncated_download_is_retried_from_where_it_stopped(server, small_models, tmp_path):
    server.truncate_once.add(server.weights_path)
    assert run_cli("download", "small", "--no-progress") == 0
    size = (small_models[0] / WEIGHTS).stat().st_size
    assert [r for p, r in server.log if p == server.weights_path] == [None, f"bytes={size // 2}-"]
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


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
    # the discard port: refused
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")
    assert run_cli("download", "medium", "--no-progress") == 1
    err = capsys.readouterr().err
    assert "could not reach" in err and f"place them in {tmp_path / 'medium'}" in err
    assert run_cli("download", "huge") == 1
    assert "unknown model name 'huge'" in capsys.readouterr().err
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "/srv/elmo-mirror")  # a path, not a URL
    assert run_cli("download", "medium", "--no-progress") == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "SPACY_ELMO_BASE_URL" in err and "Traceback" not in err


def test_missing_cached_model_never_downloads(tmp_path, monkeypatch, fixture_dir):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")
    with pytest.raises(ElmoFileError, match="python -m spacy_elmo download original") as err:
        load_bilm("original")
    assert str(tmp_path / "original") in str(err.value)
    assert "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5" in str(err.value)
    # half of it there (the options placed by hand): still not in the cache
    (tmp_path / "original").mkdir()
    shutil.copy(
        fixture_dir / "options.json", tmp_path / "original" / hub.published_files("original")[0][0]
    )
    with pytest.raises(ElmoFileError, match="python -m spacy_elmo download original"):
        load_bilm("original")
    # the component at its first use
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "original"})
    with pytest.raises(ElmoFileError, match="weights: .*spacy_elmo download original"):
        nlp("No download .")


def test_files_placed_by_hand_are_recorded_on_first_use(tmp_path, monkeypatch, small_models):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    directory = tmp_path / "small"
    shutil.copytree(small_models[0], directory)
    (options_name, _), (weights_name, _) = hub.published_files("small")
    assert load_bilm("small").output_dim == 256
    manifest = json.loads((directory / "manifest.json").read_text())["files"]
    assert manifest[weights_name]["source"] == "placed by hand"
    (directory / options_name).write_text((directory / options_name).read_text() + " ")
    with pytest.raises(ElmoFileError, match=options_name):
        load_bilm("small")


def test_without_spacy_elmo_cache_the_cache_is_under_home(tmp_path, monkeypatch, small_models):
    """The README: the cache is `~/.cache/spacy_elmo` unless `$SPACY_ELMO_CACHE` names one."""
    monkeypatch.delenv("SPACY_ELMO_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(small_models[0], tmp_path / ".cache" / "spacy_elmo" / "small")
    assert load_bilm("small").output_dim == 256
    assert (tmp_path / ".cache" / "spacy_elmo" / "small" / "manifest.json").is_file()


def test_a_model_of_other_sizes_is_refused(server, fixture_dir, tmp_path, capsys):
    """A mirror serving another model at small's paths (AllenNLP's 2x64 test fixture, which loads):
    one error naming the options file, what it holds and what small has; nothing recorded or kept
    (before: recorded, then loaded as 'small')."""
    server.files[server.options_path] = (fixture_dir / "options.json").read_bytes()
    server.files[server.weights_path] = (fixture_dir / "lm_weights.hdf5").read_bytes()
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    directory = tmp_path / "cache" / "small"
    options_file = directory / hub.published_files("small")[0][0]
    assert line.startswith(f"error: {options_file}: "), line
    assert "LSTM dim 64, 'small' has 1024" in line and "projection dim 16, 'small' has 128" in line
    assert "removed" in line and "not recorded" in line, line
    assert not directory.exists()  # made by the download: nothing kept
    with pytest.raises(ElmoFileError, match="LSTM dim 64"):
        download_module.download("small")
    with pytest.raises(ElmoFileError, match="python -m spacy_elmo download small"):
        load_bilm("small")


def test_files_of_other_sizes_placed_by_hand_are_refused_not_removed(
    fixture_dir, tmp_path, monkeypatch, capsys
):
    """The 2x64 fixture placed by hand under small's names: `download small` refuses to record it
    (one error naming the options file), and leaves the files, which are not its own."""
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")  # never the network
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    directory = tmp_path / "small"
    directory.mkdir()
    (options_name, _), (weights_name, _) = hub.published_files("small")
    shutil.copy(fixture_dir / "options.json", directory / options_name)
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / weights_name)
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {directory / options_name}: ") and "placed by hand" in line
    assert "LSTM dim 64, 'small' has 1024" in line, line
    assert sorted(p.name for p in directory.iterdir()) == [options_name, weights_name]


def test_each_published_architecture_is_its_own(small_models):
    """The sizes a downloaded model must have: those of its name (original-5.5b: original's); a
    small model is no medium."""
    for name in hub.PUBLISHED:
        size = "original" if name.startswith("original") else name
        options = BiLMOptions.from_dict(published_options(size), source=size)
        hub.check_architecture(name, options, "options.json")
    options = BiLMOptions.from_dict(published_options("small"), source="small")
    with pytest.raises(ElmoFileError, match=r"^options.json: .*LSTM dim 1024, 'medium' has 2048"):
        hub.check_architecture("medium", options, "options.json")


@contextmanager
def placed_by_hand_read_only(tmp_path, monkeypatch, model):
    """A read-only cache (`SPACY_ELMO_CACHE`, a tmpfs) holding the two files of `model` (a
    directory) placed by hand as the published small model's, without a manifest -> the cache
    directory."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with tmpfs(tmp_path / "cache", "64m") as cache:
        shutil.copytree(model, cache / "small")
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        yield cache


def test_files_placed_by_hand_in_a_read_only_cache_load_with_a_warning(
    tmp_path, monkeypatch, small_models
):
    with placed_by_hand_read_only(tmp_path, monkeypatch, small_models[0]) as cache:
        with pytest.warns(UserWarning, match="manifest.json: read-only file system.*not recorded"):
            assert load_bilm("small").output_dim == 256
        assert not (cache / "small" / "manifest.json").exists()


def test_download_into_a_read_only_cache_of_files_placed_by_hand_warns(
    tmp_path, monkeypatch, small_models, capsys
):
    """Nothing to fetch and no manifest to write: the files load, a warning says they are not
    recorded, exit 0."""
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")  # never the network
    (options_name, _), (weights_name, _) = hub.published_files("small")
    with placed_by_hand_read_only(tmp_path, monkeypatch, small_models[0]) as cache:
        with pytest.warns(UserWarning, match="manifest.json: read-only file system.*not recorded"):
            assert run_cli("download", "small", "--no-progress") == 0
        assert "error" not in capsys.readouterr().err
        assert sorted(p.name for p in (cache / "small").iterdir()) == [options_name, weights_name]


def test_a_read_only_cache_with_a_part_file_is_one_error_not_retried(
    server, tmp_path, monkeypatch, small_models, capsys
):
    """A `.part` file in a read-only cache: one error naming the cache's read-only file system, no
    request (before: three attempts, each failing to write, ending in "run the download again")."""
    (options_name, _), (weights_name, _) = hub.published_files("small")
    with tmpfs(tmp_path / "cache", "2m") as cache:
        (cache / "small").mkdir()
        shutil.copy(small_models[0] / options_name, cache / "small" / options_name)
        part = cache / "small" / f"{weights_name}.part"
        part.write_bytes((small_models[0] / weights_name).read_bytes()[:1000])
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        assert run_cli("download", "small", "--no-progress") == 1
        line = one_error_line(capsys.readouterr().err)
        assert str(cache / "small") in line and "read-only file system" in line, line
        assert "attempts" not in line and server.log == [], line
        assert part.stat().st_size == 1000


@pytest.mark.parametrize(
    "code, says",
    [
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
        (errno.EPERM, "permission denied"),
    ],
)
def test_a_part_file_that_cannot_be_written_is_one_error_not_retried(
    server, tmp_path, monkeypatch, capsys, code, says
):
    """EROFS / EACCES / EPERM writing the weights' part file (injected): one error naming it and
    where the cache can go instead, one request, no retry."""
    line = download_failing_to_write(server, monkeypatch, capsys, code)
    assert "weights.hdf5.part" in line and says in line and "attempts" not in line, line
    assert "set SPACY_ELMO_CACHE to a writable directory" in line, line


def test_concurrent_downloads_of_a_model_wait_for_one_another(server, small_models, tmp_path):
    """Three `download` processes of one model at once, from a throttled server: one fetches, the
    others wait for it (saying so once) and find the model complete; all succeed (before: they
    appended to one part file and renamed it from under one another)."""
    server.rate[server.weights_path] = 20_000_000
    env = {
        **ENV,
        "SPACY_ELMO_BASE_URL": os.environ["SPACY_ELMO_BASE_URL"],
        "SPACY_ELMO_CACHE": os.environ["SPACY_ELMO_CACHE"],
    }
    command = [sys.executable, "-m", "spacy_elmo", "download", "small", "--no-progress"]
    children = []
    for _ in range(3):
        children.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
        time.sleep(0.1)
    try:
        results = [(c.wait(timeout=120), c.stderr.read().decode()) for c in children]
    finally:
        for child in children:
            child.kill()
            child.stdout.close()
            child.stderr.close()
    assert all(code == 0 for code, _ in results), results
    waits = [err.count("waiting for another download of 'small'") for _, err in results]
    assert max(waits) == 1 and sum(waits) >= 1, results
    assert [p for p, _ in server.log].count(server.weights_path) == 1
    assert_downloaded(tmp_path / "cache" / "small", small_models[0])


# ---------------------------------------------------------------- bounded downloads (issue 34, item
# 5)
@pytest.mark.timeout(30)
@pytest.mark.parametrize("slow", ["body", "headers"])
def test_a_slow_server_meets_the_deadline(server, tmp_path, capsys, slow):
    """A body a byte every 0.2 s (the options file would take 83 s), or a status line then a header
    a byte every 0.1 s (each byte well within the wait for it; the deadline held only between body
    reads): the per-file deadline ends it, once, not retried, in the usual line; a body's part file
    stays for the next run to continue."""
    if slow == "body":
        server.trickle[server.options_path] = 0.2
    else:
        server.slow_headers.add(server.options_path)
    start = time.monotonic()
    assert run_cli("download", "small", "--no-progress", "--deadline", "1") == 1
    assert time.monotonic() - start < 10
    line = one_error_line(capsys.readouterr().err)
    assert "options.json" in line and "within 1 s" in line and "--deadline" in line, line
    assert [p for p, _ in server.log] == [server.options_path]
    if slow == "body":
        part = tmp_path / "cache" / "small" / "elmo_2x1024_128_2048cnn_1xhighway_options.json.part"
        assert 0 < part.stat().st_size < len(server.files[server.options_path])


@pytest.mark.parametrize("length", ["12abc", "-5", ""])
def test_a_malformed_content_length_is_one_error(server, tmp_path, capsys, length):
    """A Content-Length that is no size in bytes: one error line naming the URL and the header."""
    server.length[server.options_path] = length
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert server.options_path in line and f"Content-Length {length!r}" in line, line
    assert not (tmp_path / "cache" / "small").exists()


@pytest.mark.parametrize("deadline", [0, -1.0, float("nan")])
def test_a_deadline_that_is_no_positive_number_is_refused(tmp_path, monkeypatch, deadline):
    """One ElmoConfigError naming the setting, before anything is made or asked (the command line's
    minimum lets nan through)."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPACY_ELMO_BASE_URL", "http://127.0.0.1:9/elmo")  # never the network
    with pytest.raises(ElmoConfigError, match="deadline must be a positive number"):
        download_module.download("small", deadline=deadline)
    assert not (tmp_path / "cache").exists()


def test_the_deadline_is_derived_from_the_expected_size():
    # --help: a minute plus the file's size at 64 KiB/s
    assert download_module.file_deadline(30 * 64 * 1024) == 60 + 30
    assert (
        download_module.file_deadline(1000)
        == download_module.DEADLINE_BASE + 1000 / download_module.MIN_RATE
    )
    small_options, small_weights = hub.max_bytes("small")
    # a few KB: ~a minute
    assert download_module.file_deadline(small_options) < 2 * download_module.DEADLINE_BASE
    assert download_module.file_deadline(hub.max_bytes("original")[1]) < 4 * 3600


def test_size_bounds_match_the_published_architectures(tmp_path):
    """The registry's bounds hold the float32 parameters of each published architecture (counted
    without allocating them), and a weights file written in the published layout at the small
    size."""
    for name in hub.PUBLISHED:
        options_bound, weights_bound = hub.max_bytes(name)
        size = "original" if name.startswith("original") else name
        opts = BiLMOptions.from_dict(published_options(size), source=size)
        with torch.device("meta"):
            n = sum(p.numel() for p in BiLM(opts).parameters())
        assert 4 * n < weights_bound < 4 * n * 1.1 + (1 << 20), (name, n, weights_bound)
        # download --help: the weights' bound is their parameters in float32, 5% and 1 MiB more
        assert weights_bound == int(4 * hub.PARAMETERS[name] * 1.05) + (1 << 20)
        assert options_bound <= 64 << 10
    options_file, weights_file = write_untrained(tmp_path, "small")
    assert options_file.stat().st_size < hub.max_bytes("small")[0]
    assert 0.9 * hub.max_bytes("small")[1] < weights_file.stat().st_size < hub.max_bytes("small")[1]


def test_an_oversized_file_is_refused_before_it_is_fetched(server, tmp_path, capsys):
    """A 200 KB "options JSON": refused at its Content-Length, nothing written, not retried."""
    server.files[server.options_path] = b"{" + b" " * 200_000 + b"}"
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert "options.json" in line and "200,002 bytes" in line and "at most" in line, line
    assert [p for p, _ in server.log] == [server.options_path]
    assert not (tmp_path / "cache" / "small").exists()


def test_a_file_of_exactly_the_published_bound_is_taken(server, small_models, tmp_path):
    """The bound is the most a published file may hold: an options file of exactly that many bytes
    (padded with spaces) is fetched, loads and is recorded."""
    options = server.files[server.options_path]
    bound = hub.max_bytes("small")[0]
    server.files[server.options_path] = options + b" " * (bound - len(options))
    assert run_cli("download", "small", "--no-progress") == 0
    options_file = tmp_path / "cache" / "small" / hub.published_files("small")[0][0]
    assert options_file.stat().st_size == bound and hub.verify(options_file.parent, "small")


def test_bytes_beyond_the_announced_size_stop_the_download(server, tmp_path, capsys):
    """A server whose Content-Length (10 MB) exceeds its Content-Range (the rest of the options
    file): the download stops at the first byte too many and removes the part file."""
    part = interrupt(server, server.options_path)
    server.extra[server.options_path] = 10_000_000
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert "options.json" in line and "more than" in line, line
    assert not part.exists() and [p for p, _ in server.log] == [server.options_path] * 2
    assert not list(part.parent.glob("*.part*"))


class FullFile:
    """A file that takes `room` more bytes, then raises OSError(`code`) (a full disk, a quota)."""

    def __init__(self, file, room: int, code: int):
        self.file, self.room, self.code = file, room, code

    def write(self, data):
        if len(data) > self.room:
            raise OSError(self.code, os.strerror(self.code))
        self.room -= len(data)
        return self.file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_one_error_that_removes_the_part(
    server, tmp_path, monkeypatch, capsys, code
):
    """ENOSPC / EDQUOT writing the weights (injected): one error naming the file, the part removed,
    no retry."""
    line = download_failing_to_write(server, monkeypatch, capsys, code)
    assert "weights.hdf5" in line and os.strerror(code) in line and "removed" in line, line
    # nor its record of origin (a part removed with it left FILE.part.origin behind)
    assert not list((tmp_path / "cache" / "small").glob("*.part*"))


def download_failing_to_write(server, monkeypatch, capsys, code: int) -> str:
    """`download small` where writing the weights' part file fails with `code` after 1000 bytes:
    exit code 1 after one request -> its one error line."""
    real_open = open

    def open_failing(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullFile(f, 1000, code) if str(path).endswith("weights.hdf5.part") else f

    monkeypatch.setattr(download_module, "open", open_failing, raising=False)
    assert run_cli("download", "small", "--no-progress") == 1
    assert [p for p, _ in server.log].count(server.weights_path) == 1
    return one_error_line(capsys.readouterr().err)


def test_a_real_full_disk(server, tmp_path, monkeypatch, capsys):
    """The same on a real full disk: a 300 KB tmpfs (the weights take 54 MB)."""
    with tmpfs(tmp_path / "disk", "300k") as disk:
        monkeypatch.setenv("SPACY_ELMO_CACHE", str(disk))
        assert run_cli("download", "small", "--no-progress") == 1
        line = one_error_line(capsys.readouterr().err)
        assert "weights.hdf5" in line and "No space left on device" in line, line
        assert [p for p, _ in server.log].count(server.weights_path) == 1
        assert not list((disk / "small").glob("*.part"))


# ---------------------------------------------------------------- the cache location (issue 34,
# item 6)
CHILD = """
import contextlib, io, json, sys, traceback
from spacy_elmo import ElmoError, load_bilm
from spacy_elmo.cli import main

def run(call):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            call()
        return 0, err.getvalue()
    except SystemExit as exit_info:
        return exit_info.code, err.getvalue()
    except ElmoError as error:  # load_bilm's way to fail
        return 1, err.getvalue() + f"error: {error}"
    except BaseException:
        return "traceback", err.getvalue() + traceback.format_exc()

print(json.dumps({
    "download": run(lambda: main(["download", "small", "--no-progress"])),
    "info": run(lambda: main(["info", "small"])),
    "load_bilm": run(lambda: load_bilm("small")),
}))
"""


@pytest.mark.parametrize(
    "setting, value, says",
    [
        ("SPACY_ELMO_CACHE", "A_FILE", "not a directory"),
        ("HOME", "/dev/null", "not a directory"),
        ("HOME", "/proc", "HOME=/proc"),
        ("HOME", "", "SPACY_ELMO_CACHE"),
        ("HOME", None, "SPACY_ELMO_CACHE"),
    ],
)
def test_a_bad_cache_location_is_one_error_naming_the_setting(tmp_path, setting, value, says):
    """`download`, `info` and `load_bilm` of a published name, in a child with the setting: one
    error line naming the setting (and, for an empty or unset HOME, SPACY_ELMO_CACHE as the way to
    set the cache), never a traceback, and nothing written to `/.cache`."""
    if value == "A_FILE":
        value = str(tmp_path / "a_file")
        (tmp_path / "a_file").write_text("not a directory\n")
    env = {k: v for k, v in ENV.items() if k not in ("SPACY_ELMO_CACHE", "HOME")}
    env["SPACY_ELMO_BASE_URL"] = "http://127.0.0.1:9/elmo"  # the discard port: never the network
    if value is not None:
        env[setting] = value
    root_cache = os.path.lexists("/.cache/spacy_elmo")
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stderr
    results = json.loads(child.stdout.splitlines()[-1])
    for command, (code, err) in results.items():
        assert code == 1, (command, code, err)
        line = one_error_line(err)
        assert (f"{setting}=" in line or setting == "HOME" and not value) and says in line, (
            command,
            line,
        )
    assert os.path.lexists("/.cache/spacy_elmo") == root_cache


def test_a_range_answered_from_another_byte_is_one_error_keeping_the_part(server, capsys):
    """A 206 whose Content-Range starts past the asked byte would leave a hole in the file: refused,
    naming both offsets; the part file kept as it was."""
    part = interrupt(server, server.weights_path)
    have = part.read_bytes()
    server.skip[server.weights_path] = 100
    assert run_cli("download", "small", "--no-progress") == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"asked for bytes from {len(have)}, the server sent them from {len(have) + 100}" in line
    assert part.read_bytes() == have
