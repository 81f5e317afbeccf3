"""One model, many callers: Python threads sharing a biLM or a pipeline, and spaCy's `n_process`
(forked children) after the parent has run torch. Results must equal sequential ones exactly."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo.bilm.int8 import int8_kernel

from ..helpers import FLOAT32_ATOL, data_path, read_conllu

THREADS, TRIALS = 4, 5


def random_sentences(seed: int, n: int) -> list:
    """`n` sentences of made-up words, many distinct ones. Each seed has its own vocabulary (its
    words start with its own letter pair): a word's token layer carries the rounding of the batch
    it was first computed in, so only with disjoint vocabularies are threaded results bound to
    equal sequential ones to the bit."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    tag = "".join(letters[[seed // 26 % 26, seed % 26]])
    return [
        [
            tag + "".join(rng.choice(letters, rng.integers(1, 10)))
            for _ in range(rng.integers(1, 25))
        ]
        for _ in range(n)
    ]


def run_threads(work, jobs):
    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(work, jobs))


def max_difference(expected, got) -> float:
    return max(
        float(np.abs(a - b).max(initial=0.0))
        for want, have in zip(expected, got)
        for a, b in zip(want, have)
    )


@pytest.fixture(scope="module")
def ewt_sentences():
    """400 real sentences: shared words, so threads hit, miss and evict the same cache rows."""
    return [
        s.words for s in read_conllu(data_path("ud_english_ewt", "en_ewt-ud-dev.conllu.gz"), 400)
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cache_size", [50_000, 300])
def test_threads_sharing_words_get_their_own_vectors(fixture_dir, ewt_sentences, cache_size):
    """Threads embedding sentences with shared words through one token cache (small: rows are
    evicted while others read them). A word's vector may carry the rounding of another thread's
    batch (float32 rounding, < FLOAT32_ATOL); a wrong or unwritten row differs by whole units."""
    from spacy_elmo import load_bilm

    bilm = load_bilm(fixture_dir, state="warm", cache_size=cache_size)
    jobs = [ewt_sentences[k::THREADS] for k in range(THREADS)]
    expected = [bilm.embed(sents, batch_size=4) for sents in jobs]
    for _ in range(TRIALS):
        bilm.token_cache.clear()
        got = run_threads(lambda sents: bilm.embed(sents, batch_size=4), jobs)
        assert max_difference(expected, got) < FLOAT32_ATOL


@pytest.mark.timeout(120)
@pytest.mark.parametrize("torch_threads", [1, 2])
def test_threads_equal_sequential_calls_exactly(fixture_dir, torch_threads):
    from spacy_elmo import load_bilm

    bilm = load_bilm(fixture_dir, state="warm", cache_size=5000)
    jobs = [random_sentences(seed, 60) for seed in range(THREADS)]
    before = torch.get_num_threads()
    torch.set_num_threads(torch_threads)  # the rounding of a product may depend on the thread count
    try:
        expected = [bilm.embed(sents, batch_size=4) for sents in jobs]
        for _ in range(TRIALS):
            bilm.token_cache.clear()
            got = run_threads(lambda sents: bilm.embed(sents, batch_size=4), jobs)
            assert max_difference(expected, got) == 0.0
    finally:
        torch.set_num_threads(before)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared_words", [False, True])
def test_one_pipeline_from_many_threads(fixture_dir, ewt_sentences, shared_words):
    """`nlp.pipe` from several threads on one `nlp` (a web server's thread pool): both caches
    shared."""
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo",
        config={
            "weights": str(fixture_dir),
            "cache_mb": 0.2,
            "cache_at_inference": True,
            "model": {"token_cache_size": 2000},
        },
    )
    if shared_words:
        jobs = [[" ".join(words) for words in ewt_sentences[k::THREADS]] for k in range(THREADS)]
    else:
        jobs = [
            [" ".join(words) for words in random_sentences(100 + k, 40)] for k in range(THREADS)
        ]

    def layers(texts):
        return [doc._.elmo_layers.copy() for doc in nlp.pipe(texts, batch_size=8)]

    expected = [layers(texts) for texts in jobs]
    for _ in range(TRIALS):
        nlp.get_pipe("elmo").bilm.token_cache.clear()
        nlp.get_pipe("elmo").cache.clear()
        difference = max_difference(expected, run_threads(layers, jobs))
        assert difference < FLOAT32_ATOL if shared_words else difference == 0.0


FORK_SCRIPT = """
import numpy as np, spacy, torch

nlp = {make}
texts = [f"Sentence number {{i}} is here ." for i in range(200)]
{warm_up}
multi = [doc._.elmo.copy() for doc in nlp.pipe(texts, n_process=2)]
# as in the children: the rounding of a product may depend on the thread count
torch.set_num_threads(1)
single = [doc._.elmo.copy() for doc in nlp.pipe(texts)]
assert len(multi) == len(single)
same = all(np.array_equal(a, b) for a, b in zip(single, multi))
assert same, "n_process=2 differs from n_process=1"
print("ok")
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("warm_up", ['nlp("warm up .")', "nlp.initialize()"])
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_n_process_after_the_parent_used_torch(fixture_dir, warm_up, precision):
    """A forked child must not wait forever on the parent's OpenMP pool (nor oneDNN's, which int8
    runs on where the CPU has VNNI). Run in a fresh process: the test process uses one torch
    thread, which hides the hang."""
    if precision == "int8" and int8_kernel() is None:
        pytest.skip("no int8 kernel in this torch")
    config = {"weights": str(fixture_dir), "model": {"precision": precision}}
    make = f'spacy.blank("en")\nnlp.add_pipe("elmo", config={config!r})'
    script = FORK_SCRIPT.format(make=make, warm_up=warm_up)
    try:
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=90
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"nlp.pipe(n_process=2) after {warm_up} hung (no result in 90 s)")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.timeout(60)
def test_feature_cache_stays_consistent_under_threads():
    """Gets, puts and evictions from several threads: no lost entry, the byte count stays exact."""
    import sys

    from spacy_elmo.feature_cache import FeatureCache

    cache = FeatureCache(max_bytes=40 * 800)
    arrays = [np.full(100, k, dtype=np.float64) for k in range(200)]  # 800 bytes each

    def work(seed):
        rng = np.random.default_rng(seed)
        for k in rng.integers(0, len(arrays), 3000):
            value = cache.get(int(k))
            if value is None:
                cache.put(int(k), arrays[k])
            else:
                assert value[0] == k

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        run_threads(work, list(range(THREADS)))
    finally:
        sys.setswitchinterval(interval)
    assert cache.nbytes == sum(v.nbytes for v in cache.entries.values()) <= cache.max_bytes


def test_threads_setting_of_the_component(fixture_dir, monkeypatch):
    """`threads` is the torch thread count while the component runs, restored after; bad values are
    refused when the component is made."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "threads": 2})
    bilm = elmo.bilm
    seen = []
    embed = bilm.embed
    monkeypatch.setattr(
        bilm,
        "embed",
        lambda *args, **kwargs: seen.append(torch.get_num_threads()) or embed(*args, **kwargs),
    )
    before = torch.get_num_threads()
    nlp("A short text .")
    assert seen == [2] and torch.get_num_threads() == before
    # null: the count as it is (1 only in a worker of nlp.pipe(n_process=N))
    unset = spacy.blank("en")
    free = unset.add_pipe("elmo", config={"weights": str(fixture_dir)}).bilm
    embed_free = free.embed
    monkeypatch.setattr(
        free,
        "embed",
        lambda *args, **kwargs: seen.append(torch.get_num_threads()) or embed_free(*args, **kwargs),
    )
    torch.set_num_threads(3)
    try:
        unset("A short text .")
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 3]
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="threads"):
            spacy.blank("en").add_pipe("elmo", config={"weights": str(fixture_dir), "threads": bad})


def count_in_a_new_thread() -> int:
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.timeout(120)
def test_threads_setting_restores_the_process_count(fixture_dir, monkeypatch):
    """After a pipeline with `threads` ran, the process is at the count it had: the caller and
    threads started later see it. Also when two threads ran it at once (a web server's threads), the
    second one started while the first was inside (so it first used torch at the pipeline's count)
    and finishing last."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "threads": 1})
    nlp.initialize()
    embed, events = (
        elmo.bilm.embed,
        {name: threading.Event() for name in ("a_inside", "b_inside", "a_done")},
    )

    def overlapping(*args, **kwargs):
        first = threading.current_thread().name == "A"
        events["a_inside" if first else "b_inside"].set()
        assert events["b_inside" if first else "a_done"].wait(30)
        return embed(*args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        list(nlp.pipe(["A short text .", "Another one ."]))
        assert torch.get_num_threads() == 2 and count_in_a_new_thread() == 2
        monkeypatch.setattr(elmo.bilm, "embed", overlapping)
        a = threading.Thread(
            target=lambda: nlp("The text of A .") and events["a_done"].set(), name="A"
        )
        b = threading.Thread(target=lambda: nlp("The text of B ."), name="B")
        a.start()
        assert events["a_inside"].wait(30)
        b.start()
        a.join()
        b.join()
        assert events["a_done"].is_set() and not b.is_alive()
        assert torch.get_num_threads() == 2 and count_in_a_new_thread() == 2
    finally:
        torch.set_num_threads(before)


def test_threads_option_of_embed(fixture_dir, tmp_path):
    """`embed --threads N` runs torch on N threads (3: not the default on any machine this runs on),
    as its output records, and the caller's count is back afterwards."""
    (tmp_path / "in.txt").write_text("one line .\n")
    command = [
        "embed",
        str(tmp_path / "in.txt"),
        str(tmp_path / "out.hdf5"),
        "-w",
        str(fixture_dir),
        "--threads",
        "3",
        "--no-progress",
    ]
    script = (
        f"import torch\nfrom spacy_elmo.cli import app\ntorch.set_num_threads(1)\ntry:\n    "
        f"app({command!r})\n"
        f"except SystemExit as e:\n    assert not e.code, e.code\nprint(torch.get_num_threads())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "1"
    from spacy_elmo import open_embeddings

    with open_embeddings(tmp_path / "out.hdf5") as out:
        assert out.settings["threads"] == 3


JOBLIB = """
import sys
import spacy
from joblib import Parallel, delayed

nlp = spacy.load(sys.argv[1])  # at module level, as scripts do


def tag(text):
    doc = nlp(text)
    return [t.tag_ for t in doc], doc._.elmo


if __name__ == "__main__":
    texts = ["The cat sat .", "A dog ran far .", "The old man saw a red car .", "Birds sing ."] * 3
    expected = [tag(t) for t in texts]
    got = Parallel(n_jobs=2, backend="loky", max_nbytes=None)(delayed(tag)(t) for t in texts)
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert all(abs(g[1] - e[1]).max() <= float(sys.argv[2]) for g, e in zip(got, expected))
    print("ok", len(got))
"""


@pytest.mark.timeout(300)
def test_a_trained_pipeline_runs_in_joblib_processes_with_the_readme_recipe(fixture_dir, tmp_path):
    """joblib's loky pool, with `max_nbytes=None` (README: its memory-mapped arrays are read-only,
    which spaCy's hash embedding cannot take, with or without ELMo)."""
    from ..helpers import fixture_config, tagged_examples

    nlp = spacy.util.load_model_from_config(
        fixture_config("tagger_elmo.cfg", fixture_dir), auto_fill=True
    )
    sentences = [
        (["The", "cat", "sat", "."], ["DT", "NN", "VBD", "."]),
        (["Birds", "sing", "."], ["NNS", "VBP", "."]),
    ]
    nlp.initialize(lambda: tagged_examples(nlp, sentences))
    nlp.to_disk(tmp_path / "pipeline")
    script = tmp_path / "joblib_pipe.py"
    script.write_text(JOBLIB, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "pipeline"), str(FLOAT32_ATOL)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.split() == ["ok", "12"], done.stderr[-3000:]
