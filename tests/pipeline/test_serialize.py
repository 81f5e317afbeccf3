"""Round trips: nlp.to_disk / spacy.load, to_bytes / from_bytes, Doc.to_bytes, DocBin, pickle,
n_process=2 under fork and spawn."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Doc, DocBin

from spacy_elmo import load_bilm, save_bilm, workers

from ..helpers import FLOAT32_ATOL

TEXTS = [
    "The quick brown fox jumped over the lazy dog .",
    "Colorless green ideas sleep furiously !",
    "Two sentences here . And the second one .",
    "",
]


@pytest.fixture()
def nlp(fixture_dir, tmp_path):
    """A pipeline whose weights come from a copy that the tests can delete."""
    weights = tmp_path / "weights"
    shutil.copytree(fixture_dir, weights)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(weights), "store": "float16"})
    nlp.initialize()
    return nlp


def layers_of(nlp, texts=TEXTS):
    return [d._.elmo_layers for d in nlp.pipe(texts)]


def test_to_disk_and_load_never_read_the_weights_path(nlp, tmp_path):
    expected = layers_of(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(tmp_path / "weights")  # spacy.load must not need it
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.config["components"]["elmo"]["weights"] == str(tmp_path / "weights")
    for a, b in zip(expected, layers_of(loaded)):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)
    # the biLM only: the settings are in config.cfg; a settings file an earlier version wrote is
    # left unread
    assert [p.name for p in (tmp_path / "pipeline" / "elmo").iterdir()] == ["model"]
    (tmp_path / "pipeline" / "elmo" / "cfg").write_text('{"keep_layers": false}')
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").keep_layers


# loads the pipeline at argv[1] and saves it there again, dying (SIGKILL) as the biLM is serialized
KILLED_IN_TO_DISK = """
import os, signal, sys
import spacy, torch
nlp = spacy.load(sys.argv[1])
torch.save = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
nlp.to_disk(sys.argv[1])
"""


@pytest.mark.timeout(300)
def test_to_disk_killed_over_a_saved_pipeline_leaves_its_bilm_whole(nlp, tmp_path):
    expected = layers_of(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    saved = (tmp_path / "pipeline" / "elmo" / "model").read_bytes()
    run = subprocess.run(
        [sys.executable, "-c", KILLED_IN_TO_DISK, str(tmp_path / "pipeline")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    assert (tmp_path / "pipeline" / "elmo" / "model").read_bytes() == saved
    for a, b in zip(expected, layers_of(spacy.load(tmp_path / "pipeline"))):
        np.testing.assert_array_equal(a, b)


def test_initialize_keeps_the_biLM_a_pipeline_was_loaded_with(nlp, tmp_path):
    expected = layers_of(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(tmp_path / "weights")  # the training run's weights path, gone
    loaded = spacy.load(tmp_path / "pipeline")
    loaded.initialize()  # e.g. before training a new component on top
    for a, b in zip(expected, layers_of(loaded)):
        np.testing.assert_array_equal(a, b)


def test_to_bytes_from_bytes(nlp):
    expected = layers_of(nlp)
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"store": "float16"})
    other.from_bytes(nlp.to_bytes())
    for a, b in zip(expected, layers_of(other)):
        np.testing.assert_array_equal(a, b)


def test_from_config_then_from_bytes_never_reads_the_weights_path(nlp, tmp_path):
    """spaCy's byte round trip (`from_config(nlp.config)`, then `from_bytes`) takes the biLM from
    the bytes: the config's weights path (the training run's) may be gone."""
    expected = layers_of(nlp)
    config, data = nlp.config, nlp.to_bytes()
    shutil.rmtree(tmp_path / "weights")
    restored = spacy.util.get_lang_class("en").from_config(config).from_bytes(data)
    for a, b in zip(expected, layers_of(restored)):
        np.testing.assert_array_equal(a, b)
    unloaded = spacy.util.get_lang_class("en").from_config(config)
    with pytest.raises(ValueError, match=r"\[components.elmo\] weights: ELMo weights not found"):
        unloaded("The biLM is nowhere .")


@pytest.mark.parametrize("configured, used", [(None, "zero"), ("carry", "carry")])
def test_the_state_policy_is_the_weights_own_unless_configured(
    fixture_dir, tmp_path, configured, used
):
    """`state` null (the default): a model saved with the zero policy is read with it, through
    spacy.load too."""
    save_bilm(load_bilm(fixture_dir, state="zero"), tmp_path / "zero")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "zero"), "model": {"state": configured}})
    assert nlp.get_pipe("elmo").bilm.state_policy == used
    nlp.to_disk(tmp_path / "pipeline")
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").bilm.state_policy == used


def test_saved_sizes_must_match_the_config(nlp):
    from spacy_elmo import BiLMOptions

    opts = BiLMOptions.from_dict(
        {
            "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4]], "n_highway": 0},
            "lstm": {"projection_dim": 8, "dim": 16, "n_layers": 1},
        }
    )
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"model": {"options": opts.to_dict()}})
    with pytest.raises(ValueError, match="disagree with the weights from the serialized pipeline"):
        other.from_bytes(nlp.to_bytes())


def test_serialized_weights_load_without_unpickling_code(nlp):
    """The state dict inside the serialized model loads with torch's weights_only reader."""
    import io

    import srsly

    elmo = nlp.get_pipe("elmo")
    shim_msg = srsly.msgpack_loads(elmo.model.shims[0].to_bytes())
    inner = srsly.msgpack_loads(shim_msg["state"])
    state = torch.load(io.BytesIO(inner["state_dict"]), weights_only=True)
    assert "warm_h" in state and all(isinstance(v, torch.Tensor) for v in state.values())


def test_doc_to_bytes_and_docbin_carry_values(nlp):
    """Stored Docs keep the mix by default (`doc._.elmo`, in the stored dtype), every layer with
    `save_layers`."""
    docs = list(nlp.pipe(TEXTS))
    restored = list(
        DocBin().from_bytes(DocBin(store_user_data=True, docs=docs).to_bytes()).get_docs(nlp.vocab)
    )
    for a, b in zip(docs, restored):
        np.testing.assert_array_equal(a._.elmo, b._.elmo)
        assert b._.elmo.dtype == np.float16 and b._.elmo_layers is None
    doc = Doc(nlp.vocab).from_bytes(docs[0].to_bytes())
    np.testing.assert_array_equal(doc[2]._.elmo, docs[0][2]._.elmo)
    nlp.get_pipe("elmo").save_layers = True
    docs = list(nlp.pipe(TEXTS))
    restored = list(
        DocBin().from_bytes(DocBin(store_user_data=True, docs=docs).to_bytes()).get_docs(nlp.vocab)
    )
    for a, b in zip(docs, restored):
        np.testing.assert_array_equal(a._.elmo_layers, b._.elmo_layers)
        np.testing.assert_array_equal(a._.elmo, b._.elmo)
        assert b._.elmo_data.layers.dtype == np.float16


@pytest.mark.parametrize(
    "store,save_layers", [("float32", False), ("float16", False), ("float16", True)]
)
def test_stored_docs_take_the_bytes_the_readme_gives(fixture_dir, store, save_layers):
    """A stored Doc takes width x 2 (float16) or 4 (float32) bytes per token, (n_layers + 1) times
    that with `save_layers`, and 16 for the token's character span and text hash: the README's sizes
    (every layer in float32 was the default, ~470x the text)."""
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo", config={"weights": str(fixture_dir), "store": store, "save_layers": save_layers}
    )
    docs = list(nlp.pipe(TEXTS))
    tokens = sum(len(d) for d in docs)
    plain = sum(len(nlp.make_doc(t).to_bytes()) for t in TEXTS)
    stored = sum(len(d.to_bytes()) for d in docs)  # before compression (a DocBin zips this)
    width, itemsize = docs[0]._.elmo.shape[1], np.dtype(store).itemsize
    expected = (width * itemsize * (3 if save_layers else 1) + 16) * tokens
    # + each Doc's keys and array headers
    assert expected <= stored - plain <= 1.05 * expected + 300 * len(docs)


@pytest.mark.timeout(300)
def test_n_process_2(nlp, monkeypatch):
    texts = TEXTS * 3
    single = [d._.elmo for d in nlp.pipe(texts)]
    # a worker that took the end-of-work sentinel ends at once: it waits for no more texts (forked
    # workers inherit the long wait, so a worker that waits again takes it, far past the bound)
    monkeypatch.setattr(workers, "DRAIN_SECONDS", 90.0)
    started = time.monotonic()
    multi = [d._.elmo for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    assert time.monotonic() - started < 45
    assert len(multi) == len(texts)
    for a, b in zip(single, multi):
        np.testing.assert_array_equal(a, b)


HOOKS = """
import sys
import numpy as np, spacy, spacy_elmo, torch

torch.set_num_threads(1)
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"weights": sys.argv[1], "vector_hooks": True})
docs = list(nlp.pipe(["The cat sat .", "A dog ran ."] * 3, n_process=2, batch_size=2))
assert not docs[0].has_vector
for doc in docs:
    spacy_elmo.set_vector_hooks(doc)
np.testing.assert_array_equal(docs[0][1].vector, docs[0][1]._.elmo)
assert docs[0].similarity(docs[1]) > 0
print("ok")
"""


@pytest.mark.timeout(300)
def test_n_process_2_says_the_vector_hooks_stay_in_the_workers(fixture_dir, tmp_path):
    """spaCy sends Docs back from its workers without hooks: each worker says so once (in a user's
    process: pytest records a forked child's warnings), and `set_vector_hooks` puts them back."""
    said_once_per_worker(HOOKS, fixture_dir, tmp_path, "ok", "vector_hooks stay in this worker")


def said_once_per_worker(script: str, fixture_dir, tmp_path, printed: str, warning: str) -> None:
    """`script` run with the fixture's path ends well, printing `printed`, and each of its 2 workers
    gives `warning` at most once (one of them at least)."""
    path = tmp_path / "script.py"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(path), str(fixture_dir)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0 and done.stdout.strip() == printed, done.stderr
    assert 1 <= done.stderr.count(warning) <= 2, done.stderr


CARRY = """
import sys
import spacy, torch

torch.set_num_threads(1)
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"weights": sys.argv[1]})
nlp.get_pipe("elmo").bilm.state_policy = "carry"
list(nlp.pipe(["The cat sat ."] * 4))
print("one process done", flush=True)
list(nlp.pipe(["The cat sat .", "A dog ran ."] * 3, n_process=2, batch_size=2))
"""


@pytest.mark.timeout(300)
def test_n_process_2_under_carry_says_each_worker_carries_its_own_state(fixture_dir, tmp_path):
    """DESIGN: carry turns multiprocessing off; spaCy's workers cannot be refused, so each says
    once that its vectors depend on how the texts are shared out (it said nothing before)."""
    said_once_per_worker(
        CARRY, fixture_dir, tmp_path, "one process done", "each worker carries its own state"
    )


def test_pickle_round_trip_gives_the_same_vectors(nlp, fixture_dir):
    """The component, its biLM and its caches pickle (locks and caches made anew; the weights
    carried once), as `nlp.pipe(n_process=N)` under spawn, joblib and Dask need."""
    expected = layers_of(nlp)
    data = pickle.dumps(nlp)
    weights = (fixture_dir / "lm_weights.hdf5").stat().st_size
    assert len(data) < 1.5 * weights + 200_000  # the weights once, not once per copy
    restored = pickle.loads(data)
    for a, b in zip(expected, layers_of(restored)):
        np.testing.assert_array_equal(a, b)
    elmo = restored.get_pipe("elmo")
    assert len(elmo.cache) == 0 or elmo.cache.nbytes > 0
    for obj in (elmo.bilm, elmo.bilm.token_cache, elmo.cache):
        pickle.loads(pickle.dumps(obj))


SPAWN = """
import json, multiprocessing, sys
import numpy as np, spacy, torch

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    torch.set_num_threads(1)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": sys.argv[1]})
    texts = json.loads(sys.argv[2])
    single = [d._.elmo for d in nlp.pipe(texts)]
    multi = [d._.elmo for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    assert len(multi) == len(texts), (len(multi), len(texts))
    for a, b in zip(single, multi):  # batches differ: float32 rounding may
        close = np.allclose(a, b, rtol=0, atol=float(sys.argv[3]))
        assert a.shape == b.shape and close, (a.shape, b.shape)
    print("ok", len(multi))
"""


@pytest.mark.timeout(300)
def test_n_process_2_under_spawn(fixture_dir, tmp_path):
    """The start method of macOS and Windows: each child gets the pipeline by pickle."""
    import json

    script = tmp_path / "spawn_pipe.py"
    script.write_text(SPAWN, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(fixture_dir), json.dumps(TEXTS * 3), str(FLOAT32_ATOL)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.split() == ["ok", str(len(TEXTS) * 3)], done.stderr[
        -3000:
    ]


READ_STORED = """
import sys
import spacy
from spacy.tokens import DocBin
import spacy_elmo  # registers the extensions: nothing else needed to read ELMo data back

docs = list(DocBin().from_disk(sys.argv[1]).get_docs(spacy.blank("en").vocab))
print(sum(d._.elmo.shape[0] for d in docs), docs[0]._.elmo.dtype, docs[0][0:2]._.elmo.shape)
"""
# spacy_elmo imported after the Docs were read with a bare Vocab: they hold msgpack's plain dict
READ_BEFORE_IMPORT = """
import sys
from spacy.tokens import DocBin
from spacy.vocab import Vocab

docs = list(DocBin().from_disk(sys.argv[1]).get_docs(Vocab()))
import spacy_elmo

print(sum(d._.elmo.shape[0] for d in docs), docs[0][0]._.elmo.dtype, docs[0][0:2]._.elmo.shape)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", [READ_STORED, READ_BEFORE_IMPORT], ids=["after", "before"])
def test_a_docbin_reads_back_in_a_new_process(nlp, tmp_path, script):
    """A DocBin written with ELMo data reads in a fresh process with `import spacy_elmo` alone (it
    raised spaCy's E046 unless the undocumented `install_extensions()` was called), also where the
    Docs were read before the import (an AttributeError from inside the package)."""
    docs = list(nlp.pipe(TEXTS))
    DocBin(docs=docs, store_user_data=True).to_disk(tmp_path / "docs.spacy")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "docs.spacy")],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    width = docs[0]._.elmo.shape[1]  # the mix, as stored
    assert done.stdout.split() == [str(sum(len(d) for d in docs)), "float16", f"({width},)"]


BROKEN_INPUT = """
import multiprocessing, sys, time
import spacy

def texts(n_tokens):
    for i in range(60):
        if i == 20:
            raise RuntimeError("the input broke at text 20")
        yield " ".join(f"w{i}x{j}" for j in range(n_tokens))

if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[2])
    nlp = spacy.blank("en")
    threads = None if sys.argv[3] == "None" else int(sys.argv[3])
    nlp.add_pipe("elmo", config={"weights": sys.argv[1], "threads": threads})
    start = time.perf_counter()
    try:
        # 400 KB of ELMo data a Doc, 100 KB of text a batch
        for doc in nlp.pipe(texts(3000), n_process=2, batch_size=4):
            pass
    except RuntimeError as err:
        print("caller got:", err)
"""


def run_or_fail_on_hang(args, timeout: float, hung: str):
    """`python ARGS` in its own process group -> (returncode, stdout, stderr); past `timeout`
    seconds the group (the workers too) is killed and the test fails with `hung`."""
    run = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        pytest.fail(hung)
    return run.returncode, out, err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method,threads", [("fork", None), ("spawn", None), ("fork", 1)])
def test_n_process_2_passes_on_an_error_of_the_input(fixture_dir, tmp_path, method, threads):
    """An input generator that raises reaches the caller, and the process ends: spaCy's workers
    blocked on sending Docs larger than a pipe's buffer (ELMo's data) while the parent waited for
    them, forever. With `threads` set (README: 1 on a shared machine) the guard was never applied,
    and a forked run hung so."""
    script = tmp_path / "broken_input.py"
    script.write_text(BROKEN_INPUT, encoding="utf-8")
    returncode, out, err = run_or_fail_on_hang(
        [str(script), str(fixture_dir), method, str(threads)],
        90,
        f"nlp.pipe(n_process=2) hung after its input raised ({method})",
    )
    assert returncode == 0, err[-3000:]
    assert "caller got: the input broke at text 20" in out


WORKER_CLOSES_ITS_QUEUE = """
import multiprocessing, sys, threading, time
import spacy
from spacy.language import _WORK_DONE_SENTINEL, _apply_pipes
from spacy.tokens.underscore import Underscore
from spacy_elmo.workers import guard_spacy_worker

def elmo_like(docs):
    guard_spacy_worker()  # what the `elmo` component does on its first batch
    yield from docs

if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    nlp = spacy.blank("en")
    texts = multiprocessing.Queue()
    receive, send = multiprocessing.Pipe(False)
    worker = multiprocessing.Process(
        target=_apply_pipes,
        args=(nlp.make_doc, [elmo_like], texts, send, Underscore.get_state()),
    )
    worker.start()
    receive.close()  # the caller's input raised: spaCy stops reading
    if sys.argv[2] == "late":  # the worker meets the closed pipe before the texts left are written
        texts.put([("a few words", None)])
        worker_at_exit = time.monotonic() + 3
        while time.monotonic() < worker_at_exit:
            time.sleep(0.1)
    for i in range(10):  # 80 KB a batch: more than a pipe holds
        texts.put([(" ".join(["word"] * 4000), None)] * 4)
    texts.put(_WORK_DONE_SENTINEL)
    texts.close()
    feeder = threading.Thread(target=texts.join_thread, daemon=True)
    feeder.start()
    feeder.join(60)
    worker.join(60)
    print("hung" if feeder.is_alive() else "ok", worker.exitcode)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("written", ["before", "late"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_that_closes_its_queue_still_takes_the_texts_left_for_it(
    tmp_path, method, written
):
    """spaCy's worker closes its queue of texts when it meets the parent's closed pipe: what the
    parent still sends it is read at the worker's exit all the same, so the parent's feeder thread
    (which its exit joins) ends; also when the feeder writes those texts only after the worker
    reached its exit (`late`: the worker waits for the parent's end-of-work sentinel)."""
    script = tmp_path / "worker_closes_its_queue.py"
    script.write_text(WORKER_CLOSES_ITS_QUEUE, encoding="utf-8")
    _, out, err = run_or_fail_on_hang(
        [str(script), method, written], 180, f"the parent hung at exit ({method})"
    )
    assert out.split() == ["ok", "0"], (out, err[-2000:])


THREADS_IN_WORKERS = """
import multiprocessing, os, sys
os.environ["OMP_NUM_THREADS"] = "2"  # torch's default count in a spawned worker, on any machine
import spacy, torch
from spacy_elmo.pipeline import Elmo

_predict = Elmo._predict


def recording(self, docs):  # runs in the workers too: each imports this script
    for doc in docs:
        doc.user_data["torch_threads"] = torch.get_num_threads()
    return _predict(self, docs)


Elmo._predict = recording

if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[2])
    torch.set_num_threads(2)
    nlp = spacy.blank("en")
    threads = None if sys.argv[3] == "None" else int(sys.argv[3])
    nlp.add_pipe("elmo", config={"weights": sys.argv[1], "threads": threads})
    nlp("The cat sat .")  # the parent has run torch on 2 threads
    docs = list(nlp.pipe(["The cat sat .", "A dog ran ."] * 4, n_process=2, batch_size=2))
    print(sorted({doc.user_data["torch_threads"] for doc in docs}), torch.get_num_threads())
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method,threads", [("fork", None), ("spawn", None), ("fork", 2)])
def test_n_process_workers_run_the_bilm_on_one_thread(fixture_dir, tmp_path, method, threads):
    """`threads` null: each worker of `nlp.pipe(n_process=N)` runs the biLM on one torch thread
    (N workers share the cores), under spawn as under fork; the parent keeps its count. A forked
    worker stays at 1 whatever `threads` (the parent's OpenMP pool cannot be used there)."""
    script = tmp_path / "threads_in_workers.py"
    script.write_text(THREADS_IN_WORKERS, encoding="utf-8")
    returncode, out, err = run_or_fail_on_hang(
        [str(script), str(fixture_dir), method, str(threads)],
        120,
        f"nlp.pipe(n_process=2) hung ({method})",
    )
    assert returncode == 0, err[-3000:]
    assert out.split() == ["[1]", "2"], (out, err[-2000:])
