"""Ray for `embed --engine ray` (`ray_engine`): joining a cluster or starting Ray on this machine,
each failure one error line, and Ray's own output kept off the terminal.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import ray
import ray._private.worker as ray_worker
import ray.data

from ..errors import ElmoResourceError

CONNECT_TIMEOUT = 10.0  # seconds to reach a cluster's address, and for Ray to join it

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
