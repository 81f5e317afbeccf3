"""`embed --engine ray`: the shards of an embed output written by Ray Data actors, on this machine
or across a Ray cluster (`ray_session` joins or starts Ray).

The driver plans the shards and keeps the manifest as `embed --shards N` does
(`job.start_sharded`, `record_complete`). Ray Data maps the shards still missing through a
pool of actors (`map_batches` with a callable class and `ActorPoolStrategy`); each actor loads the
biLM once and writes whole shards with `job.write_shard`, the function the single-process
path calls, so the files and the manifest are the same, bit for bit. A shard is written under a
temporary name and renamed when complete; an actor that dies (killed, out of memory) is restarted
and its shard redone from the start, up to `RETRIES` times (Ray Data's default is without limit:
a shard that kills its actor each time would be retried for ever, silently). The dataset's rows
are shards (line ranges), not lines: each actor reads its lines from the input with the reader
every engine uses (`read_sentences`), and the corpus does not travel through Ray's object store.
On a cluster the input, the output and the weights must be at the same path on every node (shared
storage), and spacy_elmo installed on each. With device "cuda" each actor reserves
`gpus_per_worker` GPUs and runs its biLM on the one Ray gives it.
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
import ray
import ray.data
import ray.exceptions
import torch

from ..errors import ElmoConfigError, ElmoError, ElmoFileError, ElmoResourceError
from ..tokenizer import blank
from ..weights import load_bilm
from .compute import bound_kernel_cache
from .job import Job, record_complete, start_sharded, write_shard
from .outdir import WorkDir
from .ray_session import check_address, ray_session, ray_stderr

RETRIES = 3  # restarts of an actor that died, and tries of the shard it was writing


class ShardWriter:
    """A Ray Data actor: loads the biLM once, then writes each shard of its batches whole. Expected
    failures (a file it cannot write, other weights on its node) come back as the row's `error`:
    the other shards go on, and the driver reports the first in one line."""

    def __init__(
        self,
        job: Job,
        weights: str,
        lang: Optional[str],
        ranges: list[tuple[int, int]],
        threads: int,
    ):
        bound_kernel_cache()
        torch.set_num_threads(threads)
        self.ranges, self.tokens, self.error = ranges, 0, ""
        self.job = replace(job, nlp=None, on_line=self._count)
        self.work = WorkDir(job.output, job.output, "shard")
        try:
            # "cuda": the GPU Ray gave this actor
            self.bilm = load_bilm(
                weights,
                state=job.settings["state"],
                precision=job.settings["precision"],
                device=job.settings["device"],
            )
            # the fingerprint covers the unknown word the model records, which the tokenizer keeps
            if self.bilm.fingerprint() != job.settings["weights_fingerprint"]:
                raise ElmoFileError(
                    f"{weights}: other weights on {socket.gethostname()} than where the run "
                    "started: every node must see the same weights"
                )
            if lang:
                self.job.nlp = blank(lang, self.bilm.options.unk_token)
        except (ElmoError, OSError) as err:
            self.error = str(err)

    def _count(self, n_tokens: int) -> None:
        self.tokens += n_tokens

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows: dict[str, list] = {"shard": [], "lines": [], "tokens": [], "error": []}
        for i in map(int, batch["shard"]):
            self.tokens, before, error = 0, self.job.lines_run, self.error
            if not error:
                try:
                    write_shard(self.bilm, self.job, self.work, i, self.ranges[i])
                except (ElmoError, OSError) as err:
                    error = str(err)
            for key, value in zip(rows, (i, self.job.lines_run - before, self.tokens, error)):
                rows[key].append(value)
        return {
            key: np.array(values, dtype=object if key == "error" else np.int64)
            for key, values in rows.items()
        }


def pool_size(
    shards: int, workers: Optional[int], threads_per_worker: int, gpus_per_worker: float
) -> int:
    """The actors of the pool: `workers`, else as many as the cluster's CPUs and GPUs hold, at most
    one per shard. ElmoResourceError where the cluster has fewer than `threads_per_worker` CPUs or
    `gpus_per_worker` GPUs (Ray would wait for them)."""
    resources = ray.cluster_resources()
    cpus, gpus = int(resources.get("CPU", 1)), resources.get("GPU", 0.0)
    if threads_per_worker > cpus:
        raise ElmoResourceError(
            f"--threads-per-worker {threads_per_worker}: the Ray cluster has {cpus} CPU(s)"
        )
    if gpus_per_worker > gpus:
        raise ElmoResourceError(
            f"--gpus-per-worker {gpus_per_worker:g}: the Ray cluster has {gpus:g} GPU(s)"
        )
    fit = (
        cpus // threads_per_worker
        if not gpus_per_worker
        else min(cpus // threads_per_worker, int(gpus / gpus_per_worker))
    )
    return min(shards, workers or max(1, fit))


def map_shards(
    job: Job,
    weights: str,
    todo: list[int],
    ranges: list[tuple[int, int]],
    size: int,
    threads_per_worker: int,
    gpus_per_worker: float,
    runtime_env: Optional[dict[str, Any]],
) -> ray.data.Dataset:
    """The shards `todo` mapped through a pool of `size` `ShardWriter` actors: a dataset of one row
    per shard written (`shard`, `lines`, `tokens`, `error`), computed as it is read."""
    lang = job.nlp.lang if job.nlp is not None else None
    weights = str(Path(weights).resolve()) if Path(weights).exists() else weights  # or a name
    shards = ray.data.from_items([{"shard": i} for i in todo], override_num_blocks=len(todo))
    # Ray Data deprecates its remote arguments but names no other way to bound an actor's
    # restarts (setup.cfg keeps Ray below the release that removes them)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated", Warning)
        return shards.map_batches(
            ShardWriter,
            batch_size=1,
            batch_format="numpy",
            fn_constructor_kwargs={
                # a node's working directory is not ours
                "job": replace(
                    job,
                    options=replace(
                        job.options,
                        input_path=job.input_path.resolve(),
                        output=job.output.resolve(),
                    ),
                    nlp=None,
                    on_line=None,
                ),
                "weights": weights,
                "lang": lang,
                "ranges": ranges,
                "threads": threads_per_worker,
            },
            compute=ray.data.ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=1),
            max_restarts=RETRIES,
            max_task_retries=RETRIES,
            num_cpus=threads_per_worker,
            num_gpus=gpus_per_worker or None,
            runtime_env=runtime_env,
        )


def embed_job(
    job: Job,
    weights: str,
    *,
    address: Optional[str] = None,
    workers: Optional[int] = None,
    threads_per_worker: int = 1,
    gpus_per_worker: float = 0.0,
    runtime_env: Optional[dict[str, Any]] = None,
    on_shard: Optional[Callable[[int, int], None]] = None,
) -> bool:
    """Write the missing shards of `job` (`new_job` with `shards` N) with a pool of
    `workers` Ray actors of `threads_per_worker` torch threads and `gpus_per_worker` GPUs each
    (default: as many as the cluster's CPUs and GPUs hold, at most one per shard); a job on
    device "cuda" needs `gpus_per_worker` > 0, and a cluster without those GPUs is an
    ElmoResourceError (Ray would wait for them). `on_shard(lines, tokens)` follows each shard
    written. `runtime_env` is the actors' (Ray's runtime environments). Returns False where every
    shard was complete already. Make `job` on `threads_per_worker` torch threads: the biLM's warm
    state, part of the weights' fingerprint, is computed at load and its rounding depends on the
    thread count, so an actor checks that it loaded the weights the settings name."""
    if not job.shards:
        raise ElmoConfigError("--engine ray writes shards: give --shards N")
    if (job.settings["device"] == "cuda") != (gpus_per_worker > 0):
        raise ElmoConfigError(
            "a job on device cuda needs GPUs per worker, and only such a job takes them"
        )
    check_address(address)  # before the output is made
    work, ranges, todo = start_sharded(job, threads_flag="--threads-per-worker")
    if not todo:
        record_complete(work)  # a driver killed before recording its last shard
        return False
    failures: list[str] = []
    with ray_stderr(), ray_session(address):  # quiet: see `connect`, `ray_stderr`
        size = pool_size(len(todo), workers, threads_per_worker, gpus_per_worker)
        written = map_shards(
            job, weights, todo, ranges, size, threads_per_worker, gpus_per_worker, runtime_env
        )
        try:
            for row in written.iter_rows():
                if row["error"]:
                    failures.append(row["error"])
                    continue
                job.lines_run += int(row["lines"])
                record_complete(work)
                if on_shard is not None:
                    on_shard(int(row["lines"]), int(row["tokens"]))
        except ray.exceptions.RayError as err:  # an actor died RETRIES + 1 times on one shard
            raise ElmoResourceError(
                f"{job.output}: a Ray actor died {RETRIES + 1} times writing one shard (out of "
                f"memory, or killed: Ray's logs under /tmp/ray/session_latest/logs say; "
                f"{type(err).__name__}); the complete shards are kept: run the same command again, "
                "with fewer --workers where memory ran out"
            ) from None
    if failures:
        more = f" (and {len(failures) - 1} more shard(s) failed)" if len(failures) > 1 else ""
        raise ElmoFileError(
            f"{failures[0]}{more}; the complete shards are kept: run the same command again"
        )
    return True
