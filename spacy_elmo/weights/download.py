"""Fetch the published AllenNLP models into the cache (`spacy_elmo.weights.hub`), resumably, with
urllib, each file within a deadline (`http_deadline`: the whole request) and a size bound."""

from __future__ import annotations

import errno
import http.client
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Optional, Union

from ..errors import ElmoConfigError, ElmoError, ElmoFileError, ElmoResourceError
from ..files import write_errors
from ..flock import exclusive_lock
from . import http_deadline, hub, part_file
from .load import load_bilm
from .part_file import cache_write_error

# tqdm-like: progress(description, total_bytes, initial_bytes) -> an object with .update(n) and
# .close()
Progress = Callable[[str, int, int], Any]
CHUNK = 1 << 20
# A file's deadline, unless one is given: a minute, plus its largest size (`hub.max_bytes`) at the
# slowest rate worth waiting for. The options file: about a minute; the original model's weights:
# some 100 minutes.
DEADLINE_BASE = 60.0
MIN_RATE = 64 << 10  # bytes per second
FULL = (errno.ENOSPC, errno.EDQUOT)
LOCAL = (errno.EROFS, errno.EACCES, errno.EPERM)  # no retry will write
LOCK = "download.lock"


def file_deadline(max_bytes: int) -> float:
    """Seconds a file of at most `max_bytes` may take to download, by default."""
    return DEADLINE_BASE + max_bytes / MIN_RATE


def download(
    name: str,
    *,
    cache: Optional[Union[str, Path]] = None,
    base_url: Optional[str] = None,
    progress: Optional[Progress] = None,
    attempts: int = 3,
    timeout: float = 60.0,
    deadline: Optional[float] = None,
) -> Path:
    """Fetch a published model into the cache unless it is there, and return its directory.

    A file is complete when its size matches the server's Content-Length; until then its bytes stay
    in `FILE.part`, which a retry (up to `attempts` per call) or a later call continues with an
    HTTP Range request: only where the part came from the same URL with a validator (ETag, else
    Last-Modified, recorded in `FILE.part.origin`) that the server, asked with If-Range, still
    names; else the file starts over from byte 0 (always from a file:// URL). Complete files must
    load (valid options, every weight present, of the right shape and finite) and have the sizes of
    the published model `name` (else one ElmoFileError naming the options file) before their
    sha256s go into the manifest, which every later use checks. `base_url` defaults to
    `$SPACY_ELMO_BASE_URL`, else AllenNLP's public bucket.

    Bounds: `timeout` seconds for any one network wait; `deadline` seconds for each file, the whole
    of each request (a server trickling its headers too) and retries included (default:
    `file_deadline` of its largest size), after which the part file is kept for the next call; a
    file announced or arriving larger than the published one can be
    (`hub.max_bytes`) is refused. A full disk or quota (ENOSPC, EDQUOT) is one ElmoResourceError,
    not retried, and removes the part file; a read-only cache or a permission is one ElmoFileError.

    One download of a model at a time: a second call waits for the first (an flock on
    `download.lock` in the model's directory), then finds the model complete. Files appear whole,
    each renamed from its part file once complete.
    """
    if deadline is not None and not deadline > 0:  # nan too
        raise ElmoConfigError(f"deadline must be a positive number of seconds, got {deadline}")
    directory = hub.model_dir(name, cache)
    files = hub.published_files(name, base_url)
    if _present(directory, files) and hub.verify(directory, name):
        return directory
    created = not directory.exists()
    hub.make_model_dir(name, cache)
    try:
        with _locked(directory, name, files):
            # another download may have completed it meanwhile
            if not (_present(directory, files) and hub.verify(directory, name)):
                _fetch_all(directory, name, files, progress, attempts, timeout, deadline)
    except BaseException:
        if created:  # nothing to resume: the cache as it was
            try:
                directory.rmdir()
            except OSError:  # not empty
                pass
        raise
    return directory


def _present(directory: Path, files: list[tuple[str, str]]) -> bool:
    return all((directory / f).is_file() for f, _ in files)


@contextmanager
def _locked(directory: Path, name: str, files: list[tuple[str, str]]) -> Iterator[None]:
    """The block under the lock of `directory` (one download of a model at a time: another waits,
    saying so once). Where the lock cannot be written (a read-only cache) and every file is there,
    the block runs without it (nothing to fetch); else one error naming the lock."""
    path = directory / LOCK

    def waiting() -> None:
        print(f"waiting for another download of '{name}' into {directory}", file=sys.stderr)

    with ExitStack() as stack:
        try:
            stack.enter_context(exclusive_lock(path, waiting))
        except OSError as err:
            if not _present(directory, files):
                raise cache_write_error(err, path) from None
        yield


def _fetch_all(
    directory: Path,
    name: str,
    files: list[tuple[str, str]],
    progress: Optional[Progress],
    attempts: int,
    timeout: float,
    deadline: Optional[float],
) -> None:
    """Fetch the missing `files` of `name` into `directory`, check that the model loads and record
    the files in the manifest (those placed by hand: where it can be written, see
    `hub.record_by_hand`)."""
    fetched = []
    for (file_name, url), limit in zip(files, hub.max_bytes(name)):
        target = directory / file_name
        if target.is_file():
            continue
        seconds = file_deadline(limit) if deadline is None else deadline
        try:
            _fetch(url, target, progress, attempts, timeout, limit, seconds)
        except urllib.error.URLError as err:  # no network (HTTP errors: ElmoResourceError)
            raise ElmoResourceError(
                f"could not reach {url} ({err.reason}). Without network access, fetch "
                f"{' and '.join(u for _, u in files)} elsewhere and place them in {directory}"
            ) from None
        fetched.append(target)
    _check_loads(directory, name, files[0][0], fetched)
    if not fetched:
        hub.record_by_hand(directory, name, stacklevel=4)
        return
    with write_errors(directory / hub.MANIFEST, "free space and run the download again"):
        hub.record(directory, name, dict(files))


def _check_loads(directory: Path, name: str, options_file: str, fetched: list[Path]) -> None:
    """Where the model `name` in `directory` does not load (ElmoResourceError) or has other sizes
    than the published one (ElmoFileError naming `options_file`, see `hub.check_architecture`):
    remove the files this call `fetched` (the next call fetches them again) and raise."""
    removed = f"removed {', '.join(p.name for p in fetched) or 'nothing'}"
    try:
        options = load_bilm(directory, state="zero").options
    except (ElmoError, OSError) as err:
        for path in fetched:
            path.unlink()
        raise ElmoResourceError(
            f"model '{name}' does not load, so the download is corrupt: {err} ({removed}; run the "
            "download again)"
        ) from None
    note = (
        f" ({removed}, not recorded; is the server a mirror of the published models?)"
        if fetched
        else " (placed by hand: not recorded; delete them and run the download again)"
    )
    try:
        hub.check_architecture(name, options, directory / options_file, note)
    except ElmoFileError:
        for path in fetched:
            path.unlink()
        raise


def _fetch(
    url: str,
    target: Path,
    progress: Optional[Progress],
    attempts: int,
    timeout: float,
    limit: int,
    seconds: float,
) -> None:
    """Download `url` to `target` through `target.part`, continuing what the part file holds: at
    most `limit` bytes, within `seconds` (all attempts together)."""
    part = target.with_name(target.name + ".part")
    end = time.monotonic() + seconds
    problem = ""
    for _ in range(attempts):
        offset, validator = part_file.resumable(part, url, limit)
        headers = {"Range": f"bytes={offset}-", "If-Range": validator} if offset else {}
        try:
            with http_deadline.urlopen(
                urllib.request.Request(url, headers=headers),
                _wait(end, timeout, target, part, url, seconds),
                end,
            ) as response:
                # headers cut off at the deadline are no response
                _wait(end, timeout, target, part, url, seconds)
                offset, total = _expected(response, offset, url, limit, target.name)
                if offset and part_file.validator(response) != validator:  # If-Range was not heeded
                    part_file.discard(part)
                    problem = "the file changed on the server since the part file was written"
                    continue
                if not offset:  # the whole file: the part starts again
                    part_file.start(part, url, part_file.validator(response))
                _copy(response, part, offset, total, progress, target.name, end, timeout)
        except ElmoError:
            raise
        except urllib.error.HTTPError as err:
            if err.code == 416:  # the part file is not a prefix of the file: start again
                part_file.discard(part)
                problem = "the server refused to continue the partial file"
                continue
            raise ElmoResourceError(f"{url}: the server answered {err.code} {err.reason}") from None
        # connection dropped or timed out: continue
        except (
            OSError,
            http.client.HTTPException,
        ) as err:
            _wait(end, timeout, target, part, url, seconds)  # unless the deadline has passed
            if isinstance(err, urllib.error.URLError):  # no connection at all: the caller says so
                raise
            problem = f"{type(err).__name__}: {err}"
            continue
        size = part.stat().st_size
        if size == total:
            part_file.complete(part, target)
            return
        if size > total:
            part_file.discard(part)
        problem = f"received {size} of {total} bytes"
    raise ElmoResourceError(
        f"{url}: incomplete after {attempts} attempts ({problem}); "
        "run the download again to continue where it stopped"
    )


def _wait(end: float, timeout: float, target: Path, part: Path, url: str, seconds: float) -> float:
    """Seconds the next network wait may take: `timeout`, or less where the deadline `end` is
    nearer; ElmoResourceError where it has passed (the part file is kept for the next run)."""
    left = end - time.monotonic()
    if left > 0.01:
        return min(timeout, left)
    have = part.stat().st_size if part.is_file() else 0
    raise ElmoResourceError(
        f"{target.name}: not complete within {seconds:g} s ({have:,} bytes received from {url}, "
        f"kept in {part}); "
        "the server is too slow: run the download again to continue where it stopped, or allow "
        "more time "
        "(`download --deadline SECONDS`)"
    )


def _expected(response, offset: int, url: str, limit: int, name: str):
    """`(offset, total_size)` for a response: a 206 continues at `offset`, a 200 starts from 0. A
    total over `limit` (the most the published file can hold) is refused before any of it is
    read."""
    offset, total = _announced(response, offset, url)
    if total > limit:
        raise ElmoResourceError(
            f"{name}: the server announces {total:,} bytes ({url}), but the published file is at "
            f"most {limit:,}: refused without fetching it (is the server a mirror of the "
            "published models?)"
        )
    return offset, total


def _announced(response, offset: int, url: str):
    length = response.headers.get("Content-Length")
    if length is None:
        raise ElmoResourceError(
            f"{url}: the server sent no Content-Length, so a complete download cannot be told apart"
        )
    length = length.strip()
    if not (length.isascii() and length.isdigit()):
        raise ElmoResourceError(
            f"{url}: the server sent Content-Length {length!r}, which is no size in bytes, so a "
            "complete download cannot be told apart"
        )
    if response.status == 206:
        content_range = response.headers.get("Content-Range", "")  # bytes START-END/TOTAL
        try:
            start, total = (
                int(content_range.split()[1].split("-")[0]),
                int(content_range.rsplit("/", 1)[1]),
            )
        except (IndexError, ValueError):
            raise ElmoResourceError(f"{url}: unreadable Content-Range {content_range!r}") from None
        if start != offset:
            raise ElmoResourceError(
                f"{url}: asked for bytes from {offset}, the server sent them from {start}"
            )
        return offset, total
    return 0, int(length)


def _copy(
    response,
    part: Path,
    offset: int,
    total: int,
    progress: Optional[Progress],
    name: str,
    end: float,
    timeout: float,
) -> None:
    """Append the body of `response` to `part` (which holds `offset` bytes) until the server ends
    it, each read as soon as bytes arrive: stops at the deadline `end` (an OSError, retried by the
    caller unless the deadline has passed) and at the first byte past `total` (ElmoResourceError,
    the part removed). A full disk or quota removes the part file: ElmoResourceError."""
    bar = progress(name, total, offset) if progress else None
    received, too_many = offset, False
    try:
        with open(part, "ab" if offset else "wb") as f:
            while not too_many:
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("deadline")
                # the wait for the next bytes
                sock = getattr(getattr(response.fp, "raw", None), "_sock", None)
                if sock is not None:
                    sock.settimeout(min(timeout, left))
                block = response.read1(CHUNK)
                if not block:
                    break
                received += len(block)
                too_many = received > total
                if not too_many:
                    f.write(block)
                    if bar is not None:
                        bar.update(len(block))
    except OSError as err:
        if err.errno in LOCAL:
            raise cache_write_error(err, part) from None
        if err.errno not in FULL:
            raise
        part_file.discard(part)
        raise ElmoResourceError(
            f"{part}: cannot write the download ({err.strerror}) after {received:,} of {total:,} "
            f"bytes; removed "
            f"the part file. Free {total:,} bytes under {part.parent}, or set SPACY_ELMO_CACHE to "
            f"a disk with "
            "room"
        ) from None
    finally:
        if bar is not None:
            bar.close()
    if too_many:
        part_file.discard(part)
        raise ElmoResourceError(
            f"{name}: the server sent more than the {total:,} bytes it announced; removed the "
            f"part file (is the server a mirror of the published models?)"
        )
