"""`embed --engine ray` (spacy_elmo.embed.ray_engine) on a local Ray: actor pools of 1 and 2 give
the arrays of `bilm.embed`, bit for bit, and the files of the single-process `--shards` path;
float16 is float32 rounded; a worker killed mid-shard is redone; a rerun redoes only missing shards;
changed input or weights and bad input are one error line."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import ray
import torch

import spacy_elmo.embed.h5writer
import spacy_elmo.embed.job
from spacy_elmo import ElmoFileError, ElmoResourceError, load_bilm, open_embeddings
from spacy_elmo.bilm.threads import torch_threads
from spacy_elmo.embed import EmbedOptions, run
from spacy_elmo.embed.ray_engine import embed_job, pool_size
from spacy_elmo.embed.runner import embed_with_ray

from ..helpers import (
    ENV,
    REPO,
    generated,
    one_error_line,
    pretrained_with_unk,
    run_cli,
    tmpfs,
)
from ..reference_bilm import TINY_OPTIONS, write_random_weights

SHARDS, FLUSH, BATCH = 4, 25, 8  # 300 lines: 12 blocks, 3 per shard
SETTINGS = {"whitespace": True, "flush_every": FLUSH, "batch_size": BATCH}
DIE_AT = "SPACY_ELMO_TEST_DIE_AT"  # set for the actors of one test only (runtime_env)
DIE_ALWAYS = "SPACY_ELMO_TEST_DIE_ALWAYS"  # with it, every try at shard 1 is killed


def embed_with_ray_run(text, out, weights, **settings):
    """`spacy_elmo.embed.run` with `--shards SHARDS --engine ray`."""
    return run(EmbedOptions(text, out, weights, shards=SHARDS, engine="ray", **settings))


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (starting one takes seconds). Its workers run
    `die_on_first_try_at_shard_1`, which does nothing unless a test sets `$DIE_AT` for its actors
    (sent by value: the workers cannot import the tests)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"worker_process_setup_hook": die_on_first_try_at_shard_1},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(fixture_dir, tmp_path_factory):
    """300 lines (blank and 150-token ones among them), the arrays `bilm.embed` gives them (block
    by block from an empty token cache, as embed computes them, on the actors' one thread) and
    the output of the single-process `--shards` path."""
    tmp = tmp_path_factory.mktemp("ray")
    text = generated(tmp / "in.txt", 292, seed=11)
    lines = text.read_text(encoding="utf-8").splitlines()
    for at in (3, 77, 150, 151, 298):
        lines.insert(at, "")
    for at in (10, 160, 250):
        lines.insert(at, " ".join(["long"] * 100 + ["line", "of", "words"] * 50 + ["."] * 50))
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tokens = [line.split() for line in lines]
    assert len(tokens) == 300 and sum(not t for t in tokens) >= 5 and max(map(len, tokens)) == 300
    with torch_threads(1):
        bilm = load_bilm(fixture_dir)
        expected = []
        for start in range(0, len(tokens), FLUSH):
            bilm.token_cache.clear()
            expected += bilm.embed(tokens[start : start + FLUSH], batch_size=BATCH)
    local = tmp / "local"
    assert (
        run_cli(
            "embed",
            text,
            local,
            "-w",
            fixture_dir,
            "--whitespace",
            "--flush-every",
            FLUSH,
            "--batch-size",
            BATCH,
            "--shards",
            SHARDS,
            "--threads",
            1,
            "--no-progress",
        )
        == 0
    )
    return text, expected, local


def assert_arrays(out, expected, dtype="float32"):
    with open_embeddings(out) as got:
        assert len(got) == len(expected)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a.dtype == dtype, i
            np.testing.assert_array_equal(a, b.astype(dtype), err_msg=f"line {i}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
def test_pools_give_the_arrays_of_bilm_embed_and_the_files_of_shards(
    local_ray, corpus, fixture_dir, tmp_path, workers
):
    text, expected, local = corpus
    out = tmp_path / "ray"
    job = embed_with_ray_run(text, out, str(fixture_dir), workers=workers, **SETTINGS)
    assert (job.lines_done, job.lines_run) == (0, 300)
    assert_arrays(out, expected)
    assert sorted(p.name for p in out.glob("*.hdf5")) == sorted(
        p.name for p in local.glob("*.hdf5")
    )
    for shard in local.glob("*.hdf5"):
        assert (out / shard.name).read_bytes() == shard.read_bytes(), shard.name
    assert (out / "manifest.json").read_text() == (local / "manifest.json").read_text()
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        *(f"shard-{i:05d}.hdf5" for i in range(SHARDS)),
    ]


@pytest.mark.timeout(300)
def test_actors_tokenize_as_pretrain_and_the_single_process_path_do(
    local_ray, fixture_dir, tmp_path
):
    """Each actor made a plain spacy.blank(lang), which splits `<unk>` and `<S>` in three; now the
    tokenizer `pretrain` and the single-process path use (spacy_elmo.tokenizer)."""
    text = tmp_path / "in.txt"
    text.write_text("the <unk> sat on <S> the mat .\n" * 8, encoding="utf-8")
    embed_with_ray_run(text, tmp_path / "ray", str(fixture_dir), workers=1, lang="en")
    with open_embeddings(tmp_path / "ray") as got:
        assert [a.shape[1] for a in got] == [8] * 8


@pytest.mark.timeout(300)
def test_actors_keep_the_unknown_word_the_model_was_pretrained_with(local_ray, tmp_path):
    """A biLM pretrained with corpus.unk_token "<UNK>": each actor keeps it whole, as the
    single-process path does (the arrays of the line split by hand)."""
    model = pretrained_with_unk(tmp_path, "<UNK>")
    text = tmp_path / "in.txt"
    text.write_text("the cat (<UNK>) sat .\n" * 8, encoding="utf-8")
    split = tmp_path / "split.txt"
    split.write_text("the cat ( <UNK> ) sat .\n" * 8, encoding="utf-8")
    blocks = {"flush_every": 2, "batch_size": BATCH}
    embed_with_ray_run(text, tmp_path / "ray", str(model), workers=1, lang="en", **blocks)
    run(
        EmbedOptions(
            split, tmp_path / "split", str(model), shards=SHARDS, whitespace=True, **blocks
        )
    )
    with open_embeddings(tmp_path / "ray") as got, open_embeddings(tmp_path / "split") as want:
        assert [a.shape[1] for a in got] == [7] * 8
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


def die_on_first_try_at_shard_1():
    """An actor's setup hook: the first attempt at shard 1 is killed (SIGKILL) halfway through
    its lines, its temporary file open; the marker file `$DIE_AT` says it happened (with
    `$DIE_ALWAYS`: every attempt, each adding a line to the marker)."""
    if DIE_AT not in os.environ:
        return
    real = spacy_elmo.embed.h5writer.write_piece
    marker, always = Path(os.environ[DIE_AT]), DIE_ALWAYS in os.environ

    def write_piece(path, first, count, lines, *args, **kwargs):
        if path.name == "shard-00001.hdf5" and (always or not marker.exists()):

            def halfway(source):
                for n, line in enumerate(source):
                    if n == count // 2:
                        size = path.with_name(path.name + ".tmp").stat().st_size
                        with open(marker, "a") as f:
                            f.write(f"{size}\n")
                        os.kill(os.getpid(), signal.SIGKILL)
                    yield line

            lines = halfway(lines)
        return real(path, first, count, lines, *args, **kwargs)

    spacy_elmo.embed.h5writer.write_piece = write_piece


@pytest.mark.timeout(300)
def test_a_shard_that_kills_its_actor_each_time_is_one_error_not_a_hang(
    local_ray, corpus, fixture_dir, tmp_path
):
    """Ray Data restarts actors and retries their shards without limit by default: a shard that
    kills its actor on every try (out of memory, say) ran for ever, silently. Now a few tries, then
    one error; the shard is left incomplete for a rerun."""
    text, _, _ = corpus
    out, marker = tmp_path / "loop", tmp_path / "died"
    with pytest.raises(ElmoResourceError) as err:
        embed_with_ray_run(
            text,
            out,
            str(fixture_dir),
            workers=2,
            runtime_env={"env_vars": {DIE_AT: str(marker), DIE_ALWAYS: "1"}},
            **SETTINGS,
        )
    assert "\n" not in str(err.value) and "died 4 times writing one shard" in str(err.value)
    assert "run the same command again" in str(err.value)
    assert 2 <= len(marker.read_text().split()) <= 8  # tried more than once, and a bounded number
    assert json.loads((out / "manifest.json").read_text())["complete"][1] is False


@pytest.mark.timeout(300)
def test_a_killed_worker_is_redone_and_a_rerun_keeps_complete_shards(
    local_ray, corpus, fixture_dir, tmp_path, capsys
):
    """float16 output, with the actor writing shard 1 killed halfway on its first try: Ray
    restarts it and shard 1 is written whole, and its `(raylet)` message is not printed; float16
    equals float32 rounded. Then a rerun after a lost shard (and a temporary file left behind)
    writes that shard only."""
    text, expected, _ = corpus
    out, marker = tmp_path / "ray16", tmp_path / "died"
    job = embed_with_ray_run(
        text,
        out,
        str(fixture_dir),
        workers=2,
        dtype="float16",
        runtime_env={"env_vars": {DIE_AT: str(marker)}},
        **SETTINGS,
    )
    assert int(marker.read_text()) > 0, "the actor was not killed mid-write"
    assert "(raylet)" not in capsys.readouterr().out
    assert (
        job.lines_run == 300
        and json.loads((out / "manifest.json").read_text())["complete"] == [True] * SHARDS
    )
    assert not list(out.glob("*.tmp"))
    assert_arrays(out, expected, "float16")

    (out / "shard-00002.hdf5").unlink()
    (out / "shard-00002.hdf5.tmp").write_bytes(b"half a shard")
    kept = {p.name: p.stat().st_ino for p in out.glob("*.hdf5")}
    job = embed_with_ray_run(text, out, str(fixture_dir), workers=2, dtype="float16", **SETTINGS)
    assert (job.lines_done, job.lines_run) == (225, 75)
    assert {p.name: p.stat().st_ino for p in out.glob("*.hdf5") if p.name in kept} == kept
    assert not list(out.glob("*.tmp"))
    assert_arrays(out, expected, "float16")
    with pytest.deprecated_call():  # the name before `spacy_elmo.embed.run`
        job = embed_with_ray(
            text, out, str(fixture_dir), shards=SHARDS, workers=2, dtype="float16", **SETTINGS
        )
    assert (job.lines_done, job.lines_run) == (300, 0)  # complete: nothing to do


def test_the_pool_is_what_the_cluster_holds_at_most_one_actor_per_shard(monkeypatch, tmp_path):
    """--workers' default (its help): as many actors as the cluster's CPUs / --threads-per-worker
    and its GPUs / --gpus-per-worker hold, at most one per shard; --gpus-per-worker is 1 where
    --device cuda does not give it (the README's device table)."""
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 2.0})
    for (shards, workers, threads, gpus), size in [
        ((10, None, 1, 0.0), 8),
        ((10, None, 3, 0.0), 2),
        ((3, None, 1, 0.0), 3),
        ((10, None, 1, 0.5), 4),
        ((10, None, 1, 1.0), 2),
        ((10, None, 4, 0.25), 2),
        ((10, 5, 1, 0.0), 5),
        ((3, 5, 1, 0.0), 3),
    ]:
        assert pool_size(shards, workers, threads, gpus) == size, (shards, workers, threads, gpus)
    options = EmbedOptions("in.txt", tmp_path / "o", "w", shards=2, engine="ray", device="cuda")
    assert options.check().gpus_per_worker == 1.0


@pytest.mark.timeout(300)
def test_a_gpu_job_on_a_cluster_without_gpus_is_one_error_not_a_wait(
    local_ray, corpus, fixture_dir, tmp_path
):
    """Ray would wait forever for GPUs the cluster lacks: the engine looks first. (The job is made
    on the CPU, then marked as a cuda one, as a driver with a GPU would make it.)"""
    text, _, _ = corpus
    options = EmbedOptions(
        text, tmp_path / "o", str(fixture_dir), shards=SHARDS, engine="ray", **SETTINGS
    )
    with torch_threads(1):
        _, job = spacy_elmo.embed.job.new_job(options.check())
    gpu_job = replace(job, settings={**job.settings, "device": "cuda"})
    with pytest.raises(
        ElmoResourceError, match=r"--gpus-per-worker 1: the Ray cluster has 0 GPU\(s\)"
    ):
        embed_job(gpu_job, str(fixture_dir), gpus_per_worker=1.0)
    assert not list((tmp_path / "o").glob("*.hdf5"))


@pytest.mark.timeout(300)
def test_more_threads_per_worker_than_the_cluster_has_cpus_is_one_error_not_a_wait(
    local_ray, corpus, fixture_dir, tmp_path
):
    text, _, _ = corpus
    with pytest.raises(
        ElmoResourceError, match=r"--threads-per-worker 3: the Ray cluster has 2 CPU\(s\)"
    ):
        embed_with_ray_run(text, tmp_path / "o", str(fixture_dir), threads_per_worker=3, **SETTINGS)


def test_changed_input_weights_or_settings_are_refused(corpus, fixture_dir, tmp_path):
    """Checked by the driver against the manifest, before Ray is asked for anything."""
    text, _, local = corpus
    out = tmp_path / "out"
    out.mkdir()
    for name in ("manifest.json", "shard-00000.hdf5"):
        (out / name).write_bytes((local / name).read_bytes())
    manifest = json.loads((out / "manifest.json").read_text())
    mine = Path(manifest["settings"]["input"])
    assert mine == text.resolve()
    other = tmp_path / "weights"
    write_random_weights(other, TINY_OPTIONS, seed=3)
    with pytest.raises(ElmoFileError, match="other settings .*weights"):
        embed_with_ray_run(text, out, str(other), **SETTINGS)
    with pytest.raises(
        ElmoFileError, match="other settings .*dtype: 'float32' then, 'float16' now"
    ):
        embed_with_ray_run(text, out, str(fixture_dir), **{**SETTINGS, "dtype": "float16"})
    # begun (by a local run) on 2 threads: Ray's actors take them from --threads-per-worker
    (out / "manifest.json").write_text(
        json.dumps({**manifest, "settings": {**manifest["settings"], "threads": 2}})
    )
    with pytest.raises(ElmoFileError, match=r"same ones \(--threads-per-worker 2\)"):
        embed_with_ray_run(text, out, str(fixture_dir), **SETTINGS)
    changed = tmp_path / "in.txt"
    changed.write_text(text.read_text(encoding="utf-8").replace("cat", "dog"), encoding="utf-8")
    manifest["settings"]["input"] = str(changed.resolve())
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ElmoFileError, match="started on other content of"):
        embed_with_ray_run(changed, out, str(fixture_dir), **SETTINGS)


def cli(text, out, fixture_dir, *extra):
    return [
        "embed",
        str(text),
        str(out),
        "-w",
        str(fixture_dir),
        "--whitespace",
        "--flush-every",
        str(FLUSH),
        "--no-progress",
        "--shards",
        str(SHARDS),
        "--engine",
        "ray",
        *map(str, extra),
    ]


def test_bad_input_is_one_line(corpus, fixture_dir, tmp_path, capsys):
    text, _, local = corpus
    (tmp_path / "file").write_text("mine")
    cases = [
        (cli(tmp_path / "missing.txt", tmp_path / "o", fixture_dir), "input not found"),
        (cli(text, tmp_path / "file", fixture_dir), "is not a sharded output"),
        (
            cli(text, tmp_path / "o", fixture_dir, "--shard", "0/4"),
            "give --shards N (and not --shard I/N)",
        ),
        (
            cli(text, tmp_path / "o", fixture_dir, "--state", "carry"),
            "needs a deterministic state policy",
        ),
        (cli(text, tmp_path / "o", fixture_dir)[:-4] + ["--workers", "2"], "go with --engine ray"),
        (
            cli(text, tmp_path / "o", fixture_dir)[:-4] + ["--gpus-per-worker", "1"],
            "go with --engine ray",
        ),
        (cli(text, tmp_path / "o", fixture_dir, "--gpus-per-worker", "1"), "needs --device cuda"),
        (
            cli(text, tmp_path / "o", fixture_dir, "--device", "cuda", "--gpus-per-worker", "0"),
            "a number above 0",
        ),
        (cli(text, tmp_path / "o", fixture_dir, "--device", "cuda:1"), "--device is cpu or cuda"),
        (cli(text, tmp_path / "o", fixture_dir, "--threads", "2"), "with --threads-per-worker"),
    ]
    if not torch.cuda.is_available():
        cases.append(
            (cli(text, tmp_path / "o", fixture_dir, "--device", "cuda"), "sees no CUDA device")
        )
    for args, words in cases:
        assert run_cli(*args) == 1, args
        assert words in one_error_line(capsys.readouterr().err)
    with tmpfs(tmp_path / "disk", "1m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        assert run_cli(*cli(text, disk / "out", fixture_dir)) == 1
        assert "read-only" in one_error_line(capsys.readouterr().err)


def not_ray() -> socket.socket:
    """A port that takes connections but is not Ray: on ::1 where this host has IPv6."""
    try:
        return socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        return socket.create_server(("127.0.0.1", 0))


# In one fresh interpreter: `python -m spacy_elmo ARGS` for each ARGS of the JSON list argv[1],
# `$RAY_ADDRESS` as each case sets it; after each, a line `#case# CODE` on stderr.
CASES = """
import json, os, sys
from spacy_elmo.cli import main

for args, env in json.loads(sys.argv[1]):
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.update(env)
    code = 0
    try:
        main(args)
    except SystemExit as stop:
        code = stop.code
    print(f"#case# {code}", file=sys.stderr, flush=True)
"""


def stderr_of_each_case(cases, code=CASES):
    """The exit code and stderr of each `(args, env)` of `cases`, run one after another in one
    fresh interpreter (each start imports the package: seconds)."""
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cases)],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    parts = re.split(r"^#case# (-?\d+)\n", done.stderr, flags=re.M)
    # nothing after the last case either (as the interpreter ends)
    assert done.returncode == 0 and len(parts) == 2 * len(cases) + 1, done.stderr
    assert not parts[-1].strip(), done.stderr
    return [(int(parts[2 * i + 1]), parts[2 * i]) for i in range(len(cases))]


@pytest.mark.timeout(300)
def test_without_ray_or_with_no_cluster_one_line(corpus, fixture_dir, tmp_path):
    """In fresh processes: the package imports without Ray, and `--engine ray` says what to install;
    an address where no cluster listens (`--address`, or `$RAY_ADDRESS` as `ray job submit` sets
    it) is one line, at once (Ray itself would retry for minutes), and no output is made; so is a
    port that answers but not as Ray, in the 10 s given to join (last in its process: the join it
    gave up runs on there)."""
    text, _, _ = corpus
    no_ray = "import sys\nsys.modules['ray'] = None\n" + CASES
    with not_ray() as server:
        host, port = server.getsockname()[:2]
        other = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        # (code, [(args, env, error, no output made)]): one process each
        groups = [
            (no_ray, [([], {}, 'error: --engine ray needs Ray: pip install "spacy_elmo[ray]"', 1)]),
            (
                CASES,
                [
                    (["--address", "127.0.0.1:1"], {}, "error: no Ray cluster at 127.0.0.1:1", 1),
                    (
                        [],
                        {"RAY_ADDRESS": "127.0.0.1:1"},
                        "error: no Ray cluster at 127.0.0.1:1 (RAY_ADDRESS",
                        1,
                    ),
                    (["--address", other], {}, f"error: {other} (--address) does not answer", 0),
                ],
            ),
            (CASES, [(["--address", "127.0.0.1:²"], {}, "error: ", 0)]),  # a digit, not ASCII
        ]
        for g, (code, cases) in enumerate(groups):
            outs = [tmp_path / f"o{g}-{n}" for n in range(len(cases))]
            runs = [
                (cli(text, out, fixture_dir, *extra), env)
                for out, (extra, env, _, _) in zip(outs, cases)
            ]
            results = stderr_of_each_case(runs, code)
            for out, (_, _, words, no_output), (exit_code, err) in zip(outs, cases, results):
                assert exit_code == 1, err
                assert one_error_line(err).startswith(words), err
                assert not (no_output and out.exists())


@pytest.mark.timeout(300)
def test_a_normal_run_prints_only_its_own_lines_and_the_help_says_when_ray_pays_off(
    corpus, fixture_dir, tmp_path
):
    """A fresh process starting its own Ray (issue 34 item 7): no auth-token warning, no
    `core_worker.cc` line, no actor output; the Ray engine's lock files gone. `--engine`'s help says
    when Ray pays off (it starts in seconds)."""
    import typer.main

    from spacy_elmo.cli import app

    text, _, _ = corpus
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            *cli(text, tmp_path / "o", fixture_dir, "--workers", 2),
        ],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"wrote {tmp_path / 'o'}: 300 lines"), lines
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "manifest.json",
        *(f"shard-{i:05d}.hdf5" for i in range(SHARDS)),
    ]
    engine = next(
        p for p in typer.main.get_command(app).commands["embed"].params if p.name == "engine"
    )
    assert "pays off" in engine.help, engine.help
