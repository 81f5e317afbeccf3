"""`embed --engine ray`: the shards of an embed output written by Ray Data actors, on this machine
or across a Ray cluster.

The driver plans the shards and keeps the manifest as `embed --shards N` does
(`job.start_sharded`, `record_complete`). Ray Data maps the shards still missing through a
pool of actors (`map_batches` with a callable class and `ActorPoolStrategy`); each actor loads the
biLM once and writes whole shards with `job.write_shard`, the function the single-process
path calls, so the files and the manifest are the same, bit for bit. A shard is written under a
temporary name and renamed when complete; an actor that dies is restarted by Ray Data and its
shard redone from the start (Ray Data's defaults: actors restarted and their tasks retried without
limit). The dataset's rows are shards (line ranges), not lines: each actor reads
its lines from the input with the reader every engine uses (`read_sentences`), and the corpus does
not travel through Ray's object store. On a cluster the input, the output and the weights must be
at the same path on every node (shared storage), and spacy_elmo installed on each. With device
"cuda" each actor reserves `gpus_per_worker` GPUs and runs its biLM on the one Ray gives it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
import ray
import ray._private.worker as ray_worker
import ray.data
import torch

from ..errors import ElmoConfigError, ElmoError, ElmoFileError, ElmoResourceError
from ..weights import load_bilm
from .compute import bound_kernel_cache
from .job import Job, record_complete, start_sharded, write_shard
from .outdir import WorkDir

CONNECT_TIMEOUT = 10.0  # seconds to reach a cluster's address, and for Ray to join it


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
        import spacy

        bound_kernel_cache()
        torch.set_num_threads(threads)
        self.ranges, self.tokens, self.error = ranges, 0, ""
        self.job = replace(job, nlp=spacy.blank(lang) if lang else None, on_line=self._count)
        self.work = WorkDir(job.output, job.output, "shard")
        try:
            # "cuda": the GPU Ray gave this actor
            self.bilm = load_bilm(
                weights,
                state=job.settings["state"],
                precision=job.settings["precision"],
                device=job.settings["device"],
            )
            if self.bilm.fingerprint() != job.settings["weights_fingerprint"]:
                raise ElmoFileError(
                    f"{weights}: other weights on {socket.gethostname()} than where the run "
                    "started: every node must see the same weights"
                )
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


# Ray's C++ core writes its log lines to this process's stderr: an ERROR line for every actor whose
# constructor arguments are in the object store, as Ray Data's are (`ray_stderr` leaves those out).
RAY_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ ([DIWEF]) \d+ \d+\] [\w.]+:\d+: ")
EXPECTED = ("has constructor arguments in the object store",)


@contextmanager
def ray_stderr() -> Iterator[None]:
    """While the block runs, what Ray's C++ core writes to stderr (fd 2) goes to a temporary file,
    Python's `sys.stderr` (a progress bar, messages) to the terminal as before; after it, the lines
    other than Ray's debug, info and warning lines and its `EXPECTED` notices are written out (fd 2
    stays off where a join given up runs on: `init_within`). The `(raylet) ...` messages Ray prints
    to `sys.stdout` (a worker that died and is redone) are off. Ray's log files keep them all
    (/tmp/ray/session_latest/logs)."""
    try:
        ours = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        ours = False
    sys.stderr.flush()
    saved, capture, before = os.dup(2), tempfile.TemporaryFile(), sys.stderr
    os.dup2(capture.fileno(), 2)
    if ours:  # a copy of the terminal's descriptor, closed with the last object that writes to it
        sys.stderr = os.fdopen(
            os.dup(saved), "w", buffering=1, encoding=before.encoding, errors=before.errors
        )
    printing, ray_worker._worker_logs_enabled = ray_worker._worker_logs_enabled, False
    try:
        yield
    finally:
        ray_worker._worker_logs_enabled = printing
        sys.stderr.flush()
        abandoned = joining()
        if abandoned:  # a join given up retries on, writing to fd 2: that goes nowhere now
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.close(null)
        else:
            os.dup2(saved, 2)
        os.close(saved)
        if not (ours and abandoned):
            sys.stderr = before
        capture.seek(0)
        for line in capture.read().decode("utf-8", "replace").splitlines():
            found = RAY_LINE.match(line)
            if not (
                found and (found.group(1) in "DIW" or any(notice in line for notice in EXPECTED))
            ):
                print(line, file=sys.stderr)
        capture.close()


def cluster(address: Optional[str]) -> tuple[Optional[str], str]:
    """The cluster to join: `address`, else `$RAY_ADDRESS` (as in `ray job submit`), else None (Ray
    starts on this machine); and where the address came from, for errors."""
    if address:
        return address, "--address"
    return os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS"


def host_port(address: str) -> Optional[tuple[str, int]]:
    """HOST and PORT of an address (`ray://` and an IPv6 address's brackets taken off); None for
    one of another form ("auto")."""
    host, _, port = address.split("://")[-1].rpartition(":")
    if not (host and port.isascii() and port.isdigit()):
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def check_address(address: Optional[str]) -> None:
    """ElmoResourceError where nothing listens at the cluster's address (`cluster`): Ray itself
    retries an unreachable address for minutes. Nothing where Ray runs in this process already."""
    address, source = cluster(address)
    found = host_port(address) if address and not ray.is_initialized() else None
    if found:
        try:
            socket.create_connection(found, timeout=CONNECT_TIMEOUT).close()
        except OSError as err:
            raise ElmoResourceError(
                f"no Ray cluster at {address} ({source}; {err.strerror or err}): start one there "
                f"with `ray start --head`, or {unset(source)} to run on this machine"
            ) from None


def unset(source: str) -> str:
    return "leave --address out" if source == "--address" else "unset RAY_ADDRESS"


INIT_THREAD = "spacy_elmo_ray_init"


def joining() -> bool:
    """Whether a `ray.init` that `init_within` gave up runs on."""
    return any(t.name == INIT_THREAD and t.is_alive() for t in threading.enumerate())


def init_within(seconds: float, **settings: Any) -> None:
    """`ray.init(**settings)`, in a daemon thread given up after `seconds` (TimeoutError): Ray waits
    for minutes on an address that answers but not as Ray."""
    outcome: list[Optional[BaseException]] = []

    def init() -> None:
        try:
            ray.init(**settings)
        except BaseException as err:  # raised in the caller's thread
            outcome.append(err)
        else:
            outcome.append(None)

    thread = threading.Thread(target=init, name=INIT_THREAD, daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise TimeoutError
    if outcome[0] is not None:
        raise outcome[0]


def connect(address: Optional[str]) -> bool:
    """Join the Ray cluster at `address` (`cluster`: else `$RAY_ADDRESS`), or start Ray on this
    machine's CPUs; nothing where Ray runs in this process already. Returns whether it started (the
    caller then shuts it down). Ray that cannot start is an ElmoResourceError in one line. Ray logs
    only errors here, and the actors' output stays in Ray's log files (`log_to_driver`)."""
    if ray.is_initialized():
        return False
    check_address(address)
    address, source = cluster(address)
    where = f"at {address} ({source})" if address else "on this machine"
    try:
        if address:
            init_within(
                CONNECT_TIMEOUT,
                address=address,
                logging_level=logging.ERROR,
                log_to_driver=False,
            )
        else:
            ray.init(
                num_cpus=os.cpu_count(),
                include_dashboard=False,
                logging_level=logging.ERROR,
                log_to_driver=False,
            )
    except TimeoutError:
        raise ElmoResourceError(
            f"{address} ({source}) does not answer as a Ray cluster within {CONNECT_TIMEOUT:g} s: "
            f"give the address `ray start --head` printed, or {unset(source)} to run on this "
            "machine"
        ) from None
    except Exception as err:  # Ray raises many kinds; each is one line here
        raise ElmoResourceError(
            f"Ray cannot start {where}: {str(err).strip().splitlines()[0]}"
        ) from None
    return True


@contextmanager
def ray_session(address: Optional[str]) -> Iterator[None]:
    """Ray for the block (`connect`; shut down after it where this call started it), with Ray Data's
    progress bars off (the caller reports progress) and its log at ERROR level."""
    started = connect(address)
    context, log = ray.data.DataContext.get_current(), logging.getLogger("ray.data")
    bars, level = context.enable_progress_bars, log.level
    context.enable_progress_bars = False
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        context.enable_progress_bars = bars
        log.setLevel(level)
        if started:
            ray.shutdown()


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
        for row in written.iter_rows():
            if row["error"]:
                failures.append(row["error"])
                continue
            job.lines_run += int(row["lines"])
            record_complete(work)
            if on_shard is not None:
                on_shard(int(row["lines"]), int(row["tokens"]))
    if failures:
        more = f" (and {len(failures) - 1} more shard(s) failed)" if len(failures) > 1 else ""
        raise ElmoFileError(
            f"{failures[0]}{more}; the complete shards are kept: run the same command again"
        )
    return True
