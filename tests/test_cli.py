"""`python -m spacy_elmo embed | convert | info | download | pretrain`, on the fixture and on random
tiny weights; downloads from a local HTTP server only (never the network)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
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
from spacy.tokens import DocBin

from spacy_elmo import load_bilm, save_bilm
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


# ----------------------------------------------------------------------------------------------- embed
@pytest.mark.parametrize("layer", ["all", "top", "average", "1"])
def test_embed_equals_the_api(weights, tmp_path, layer):
    text = write_lines(tmp_path / "in.txt", LINES)
    assert run_cli("embed", text, tmp_path / "out.hdf5", "--weights", weights, "--whitespace",
                   "--layer", layer, "--batch-size", 2, "--no-progress") == 0
    arrays, index, _ = read_output(tmp_path / "out.hdf5")
    expected = load_bilm(weights).embed([line.split() for line in LINES])
    assert sorted(arrays, key=int) == [str(i) for i in range(len(LINES))]
    for i, full in enumerate(expected):
        want = {"all": full, "top": full[-1], "average": full.mean(axis=0), "1": full[1]}[layer]
        assert arrays[str(i)].dtype == np.float32
        np.testing.assert_array_equal(arrays[str(i)], want)
    assert arrays["1"].shape == ((3, 0, full.shape[-1]) if layer == "all" else (0, full.shape[-1]))
    assert index == {"The cat sat on the mat .": "3", "": "1", "Hello world": "2", "a b c d e f g h i j k l": "4"}


def test_embed_index_of_non_ascii_and_repeated_lines(fixture_dir, tmp_path):
    """sentence_to_index is ASCII JSON (non-ASCII escaped), written without a copy as one fixed-length
    string; a repeated line maps to its last index, as AllenNLP's did. The file is in HDF5 1.8's format."""
    lines = ["Straße 是 😀 café", "a \\ \" quote", "Straße 是 😀 café", "x"]
    text = write_lines(tmp_path / "in.txt", lines)
    assert run_cli("embed", text, tmp_path / "out.hdf5", "--weights", fixture_dir, "--whitespace", "--no-progress") == 0
    _, index, _ = read_output(tmp_path / "out.hdf5")
    assert index == {"Straße 是 😀 café": "2", 'a \\ " quote': "1", "x": "3"}
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert f["sentence_to_index"].shape == (1,) and f["sentence_to_index"].asstr()[0].isascii()
        # superblock version 2: the HDF5 1.8 format, whose groups index their links (flat memory)
        assert f.id.get_create_plist().get_version()[0] == 2


def test_embed_bounds_the_kernel_cache(fixture_dir, tmp_path, monkeypatch):
    """embed keeps oneDNN's kernel cache small (flat memory over long files), unless the user set it."""
    text = write_lines(tmp_path / "in.txt", LINES)
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert run_cli("embed", text, tmp_path / "a.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress") == 0
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    assert run_cli("embed", text, tmp_path / "b.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress") == 0
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"


def test_embed_spacy_tokenizer_and_docbin(fixture_dir, fixture_bilm, tmp_path):
    lines = ["Hello, world!", "It's  fine."]
    nlp = spacy.blank("en")
    tokens = [[t.text for t in nlp(line) if not t.is_space] for line in lines]
    expected = fixture_bilm.embed(tokens)
    write_lines(tmp_path / "in.txt", lines)
    DocBin(docs=[nlp(line) for line in lines]).to_disk(tmp_path / "in.spacy")
    for source in ("in.txt", "in.spacy"):
        out = tmp_path / f"{source}.hdf5"
        assert run_cli("embed", tmp_path / source, out, "-w", fixture_dir, "--lang", "en", "--no-progress") == 0
        arrays, index, _ = read_output(out)
        assert index == {"Hello, world!": "0", "It's  fine.": "1"}
        for i, arr in enumerate(expected):
            np.testing.assert_array_equal(arrays[str(i)], arr)


def test_embed_bad_input(fixture_dir, tmp_path, capsys):
    text = write_lines(tmp_path / "in.txt", LINES)
    cases = [
        (["embed", tmp_path / "nope.txt", tmp_path / "o.hdf5", "-w", fixture_dir], "input not found"),
        (["embed", text, tmp_path / "o.hdf5", "-w", tmp_path / "nowhere"], "not found"),
        (["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--layer", "3"], "--layer"),
        (["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--lang", "zz"], "zz"),
        (["embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--state", "carry", "--resume"], "deterministic"),
    ]
    for args, expect in cases:
        assert run_cli(*args, "--no-progress") == 1
        err = capsys.readouterr().err
        assert err.startswith("error:") and expect in err and "Traceback" not in err, err
    assert run_cli("embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress") == 0
    capsys.readouterr()
    assert run_cli("embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--whitespace", "--no-progress") == 1
    assert "--resume" in capsys.readouterr().err  # an existing output is never overwritten
    assert run_cli("embed", text, tmp_path / "o.hdf5", "-w", fixture_dir, "--layer", "top", "--whitespace",
                   "--resume", "--no-progress") == 1
    err = capsys.readouterr().err
    assert "other settings" in err and "layer: 'all' then, 'top' now" in err


def many_lines(n):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "."]
    return [" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(n)]


def test_embed_resume_after_an_interruption(weights, tmp_path, monkeypatch, capsys):
    """Interrupted while making dataset 32 (flushes every 5 lines): lines up to 30 are trusted,
    datasets 30 and 31 were written after the last flush and are made again."""
    from spacy_elmo import embed_file

    text = write_lines(tmp_path / "in.txt", many_lines(57))
    args = ["--weights", weights, "--whitespace", "--batch-size", 2, "--flush-every", 5, "--no-progress"]
    assert run_cli("embed", text, tmp_path / "full.hdf5", *args) == 0
    real, calls = embed_file.select_layer, []

    def interrupted(layers, layer):
        calls.append(1)
        if len(calls) == 33:
            raise KeyboardInterrupt
        return real(layers, layer)

    monkeypatch.setattr(embed_file, "select_layer", interrupted)
    assert run_cli("embed", text, tmp_path / "part.hdf5", *args) == 130
    assert "--resume (from line 30)" in capsys.readouterr().err
    with h5py.File(tmp_path / "part.hdf5", "r") as f:
        assert f.attrs["spacy_elmo.completed"] == 30 and "31" in f and "32" not in f
    monkeypatch.setattr(embed_file, "select_layer", real)
    assert run_cli("embed", text, tmp_path / "part.hdf5", *args, "--resume") == 0
    assert "27 in this run" in capsys.readouterr().err
    full, part = read_output(tmp_path / "full.hdf5"), read_output(tmp_path / "part.hdf5")
    assert full[1] == part[1] and sorted(full[0]) == sorted(part[0])
    for key, arr in full[0].items():
        np.testing.assert_array_equal(part[0][key], arr)


def test_embed_resume_after_a_kill(fixture_dir, tmp_path):
    """A process killed (SIGKILL, no cleanup) in the middle of the file resumes to the same output."""
    text = write_lines(tmp_path / "in.txt", many_lines(90))
    args = ["--weights", str(fixture_dir), "--whitespace", "--batch-size", "2", "--flush-every", "7", "--no-progress"]
    script = (
        "import os, signal, sys\n"
        "import spacy_elmo.embed_file as ef\n"
        "real = ef.read_sentences\n"
        "def dying(*a, **k):\n"
        "    for i, item in enumerate(real(*a, **k)):\n"
        "        if i == 70:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        yield item\n"
        "ef.read_sentences = dying\n"
        "from spacy_elmo.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", script, "embed", str(text), str(tmp_path / "part.hdf5"), *args],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert run_cli("embed", text, tmp_path / "part.hdf5", *args, "--resume") == 0
    assert run_cli("embed", text, tmp_path / "full.hdf5", *args) == 0
    full, part = read_output(tmp_path / "full.hdf5"), read_output(tmp_path / "part.hdf5")
    assert full[1] == part[1] and sorted(full[0]) == sorted(part[0])
    for key, arr in full[0].items():
        np.testing.assert_array_equal(part[0][key], arr)


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
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "original"})
    with pytest.raises(FileNotFoundError, match="spacy_elmo download original"):
        nlp.initialize()


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
