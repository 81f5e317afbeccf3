"""The fixture biLM written as each kind of model a test can then damage (options.json and
weights.hdf5, this project's own format, a saved pipeline), and a load in a child process whose
address space is bounded or whose peak memory is measured."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import spacy
import srsly

from spacy_elmo import load_bilm, save_bilm

B_PROJ = "CNN_proj/b_proj"
W_0 = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"


def fixture_options(fixture_dir) -> dict:
    return json.loads((fixture_dir / "options.json").read_text())


def hdf5_model(fixture_dir, directory, options=None):
    """A copy of the fixture as options.json + weights.hdf5 in `directory` (options replaced if
    given)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "options.json").write_text(json.dumps(options or fixture_options(fixture_dir)))
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / "weights.hdf5")
    return directory


def own_model(fixture_dir, directory):
    """The fixture saved in this project's format (bilm.json + weights.pt) in `directory`, its
    bilm.json without the digests of its files (as saved before it kept them), so that a file
    replaced by hand is read as what it holds, not refused as one of another save."""
    save_bilm(load_bilm(fixture_dir, state="zero"), directory)
    return unrecorded(directory)


def unrecorded(directory):
    """`directory`'s bilm.json without the digests of the files saved with it."""
    config = json.loads((directory / "bilm.json").read_text())
    for key in ("sha256", "archive_crc32"):
        config.pop(key, None)
    (directory / "bilm.json").write_text(json.dumps(config))
    return directory


def pipeline(fixture_dir, directory):
    """A blank English pipeline with the fixture's `elmo`, saved in `directory` -> elmo/model."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    nlp.initialize()
    nlp.to_disk(directory)
    return directory / "elmo" / "model"


def edit_pipeline_bilm(path, edit):
    """Rewrite the biLM message inside a saved pipeline's elmo/model: `edit(message_dict)`."""
    outer = srsly.msgpack_loads(path.read_bytes())
    shim = srsly.msgpack_loads(outer["shims"][0][0])
    inner = srsly.msgpack_loads(shim["state"])
    edit(inner)
    shim["state"] = srsly.msgpack_dumps(inner)
    outer["shims"][0][0] = srsly.msgpack_dumps(shim)
    path.write_bytes(srsly.msgpack_dumps(outer))


def _around_bin(message: dict, key: str, size: int):
    """`message` packed with `message[key] = <a bin of size bytes>` -> (the bytes before that bin's
    payload, the bytes after it)."""
    packed = srsly.msgpack_dumps({**message, key: b""})
    marker = srsly.msgpack_dumps(key) + b"\xc4\x00"  # the key, then an empty bin8
    at = packed.index(marker) + len(marker) - 2
    return packed[:at] + b"\xc6" + size.to_bytes(4, "big"), packed[at + 2 :]


def declare_weights(path, size: int) -> None:
    """Rewrite a saved pipeline's elmo/model so that its biLM message holds a state dict of `size`
    bytes of zeros, left as a hole in a sparse file (its framing consistent throughout)."""
    outer = srsly.msgpack_loads(path.read_bytes())
    shim = srsly.msgpack_loads(outer["shims"][0][0])
    inner = srsly.msgpack_loads(shim["state"])
    inner_head, inner_tail = _around_bin(inner, "state_dict", size)
    shim_head, shim_tail = _around_bin(shim, "state", len(inner_head) + size + len(inner_tail))
    shim_size = len(shim_head) + len(inner_head) + size + len(inner_tail) + len(shim_tail)
    packed = srsly.msgpack_dumps({**outer, "shims": [[b""]]})
    marker = srsly.msgpack_dumps("shims") + b"\x91\x91\xc4\x00"
    at = packed.index(marker) + len(marker) - 2
    with open(path, "wb") as f:
        f.write(packed[:at] + b"\xc6" + shim_size.to_bytes(4, "big") + shim_head + inner_head)
        f.seek(size, 1)
        f.write(inner_tail + shim_tail + packed[at + 2 :])


BOUNDED_LOADS = textwrap.dedent("""
    import json, resource, sys, time, traceback
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import spacy, spacy_elmo
    for kind, path in zip(sys.argv[1::2], sys.argv[2::2]):
        start = time.perf_counter()
        try:
            spacy.load(path) if kind == "pipeline" else spacy_elmo.load_bilm(path)
        except spacy_elmo.ElmoFileError as err:
            print(json.dumps({"seconds": time.perf_counter() - start, "error": str(err)}))
        except BaseException:
            print(json.dumps({"failed": traceback.format_exc()}))
        else:
            print(json.dumps({"failed": "loaded without an ElmoFileError"}))
        sys.stdout.flush()
""")


def loads_in_3gb(loads):
    """Each `(kind, path)` of `loads` ("pipeline": `spacy.load`, else `load_bilm`) loaded in turn in
    one subprocess limited to 3 GB of address space (one start for all) -> a result per load, in
    their order, for `refused_in_3gb`."""
    args = [str(part) for load in loads for part in load]
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED_LOADS, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(loads), proc.stdout[-2000:]
    return results


def refused_in_3gb(result):
    """A result of `loads_in_3gb` that must be one ElmoFileError -> (seconds, error message)."""
    assert "failed" not in result, result["failed"][-2000:]
    return result["seconds"], result["error"]


PEAK_LOAD = textwrap.dedent("""
    import resource, sys, spacy, spacy_elmo
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        spacy.load(sys.argv[1]) if sys.argv[2] == "pipeline" else spacy_elmo.load_bilm(sys.argv[1])
    except spacy_elmo.ElmoFileError as err:
        print(err)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
""")


def refused_with_peak(path, kind="bilm"):
    """`load_bilm(path)` (kind "pipeline": `spacy.load(path)`) in a subprocess, which must raise one
    ElmoFileError -> (its message, MiB its peak resident memory grew by while loading)."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_LOAD, str(path), kind],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    *message, grown = proc.stdout.splitlines()
    assert len(message) == 1, proc.stdout[-2000:]
    return message[0], int(grown)


def load_in_3gb(kind, path):
    """Load in a subprocess limited to 3 GB of address space: -> (seconds, error message)."""
    return refused_in_3gb(loads_in_3gb([(kind, path)])[0])


def lowercasing_model(fixture_dir, directory, state="warm"):
    """The fixture in this project's format, its options saying that it reads lowercased tokens
    (`char_cnn.lowercase`, as `pretrain` saves a model trained with `corpus.lowercase`)."""
    save_bilm(load_bilm(fixture_dir, state=state), directory)
    config = json.loads((directory / "bilm.json").read_text())
    config["options"]["char_cnn"]["lowercase"] = True
    (directory / "bilm.json").write_text(json.dumps(config))
    bilm = load_bilm(directory)
    bilm.network.compute_warm_state()  # of the warm-up text as such a model reads it
    save_bilm(bilm, directory)
    return directory
