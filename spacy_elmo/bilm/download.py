"""Fetch the published AllenNLP models into the cache (`spacy_elmo.bilm.hub`), resumably, with urllib."""
from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ElmoError, ElmoResourceError
from . import hub
from .load import load_bilm

# tqdm-like: progress(description, total_bytes, initial_bytes) -> an object with .update(n) and .close()
Progress = Callable[[str, int, int], Any]
CHUNK = 1 << 20


def download(name: str, *, cache: str | Path | None = None, base_url: str | None = None,
             progress: Progress | None = None, attempts: int = 3, timeout: float = 60.0) -> Path:
    """Fetch a published model into the cache unless it is there, and return its directory.

    A file is complete when its size matches the server's Content-Length; until then its bytes stay
    in `FILE.part`, which a retry (up to `attempts` per call) or a later call continues with an
    HTTP Range request. Complete files must load (valid options, every weight present, of the
    right shape and finite) before their sha256s go into the manifest, which every later use
    checks. `base_url` defaults to `$SPACY_ELMO_BASE_URL`, else AllenNLP's public bucket.
    """
    directory = hub.model_dir(name, cache)
    files = hub.published_files(name, base_url)
    if all((directory / f).is_file() for f, _ in files) and hub.verify(directory, name):
        return directory
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    fetched = []
    try:
        for file_name, url in files:
            target = directory / file_name
            if target.is_file():
                continue
            try:
                _fetch(url, target, progress, attempts, timeout)
            except urllib.error.URLError as err:  # no network (HTTP errors became ElmoResourceError)
                raise ElmoResourceError(
                    f"could not reach {url} ({err.reason}). Without network access, fetch "
                    f"{' and '.join(u for _, u in files)} elsewhere and place them in {directory}"
                ) from None
            fetched.append(target)
        try:
            load_bilm(directory, state="zero")
        except (ElmoError, OSError) as err:
            for path in fetched:
                path.unlink()
            raise ElmoResourceError(f"model '{name}' does not load, so the download is corrupt: {err} (removed "
                                f"{', '.join(p.name for p in fetched) or 'nothing'}; run the download again)") from None
    except BaseException:
        if created and not any(directory.iterdir()):  # nothing to resume from: leave the cache as it was
            directory.rmdir()
        raise
    hub.record(directory, name, dict(files))
    return directory


def _fetch(url: str, target: Path, progress: Progress | None, attempts: int, timeout: float) -> None:
    """Download `url` to `target` through `target.part`, continuing what the part file holds."""
    part = target.with_name(target.name + ".part")
    problem = ""
    for _ in range(attempts):
        offset = part.stat().st_size if part.is_file() else 0
        request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                offset, total = _expected(response, offset, url)
                _copy(response, part, offset, total, progress, target.name)
        except urllib.error.HTTPError as err:
            if err.code == 416:  # the part file is not a prefix of the file: start again
                part.unlink()
                problem = "the server refused to continue the partial file"
                continue
            raise ElmoResourceError(f"{url}: the server answered {err.code} {err.reason}") from None
        except urllib.error.URLError:
            raise
        except (OSError, http.client.HTTPException) as err:  # connection dropped or timed out: continue
            problem = f"{type(err).__name__}: {err}"
            continue
        size = part.stat().st_size
        if size == total:
            part.replace(target)
            return
        if size > total:
            part.unlink()
        problem = f"received {size} of {total} bytes"
    raise ElmoResourceError(f"{url}: incomplete after {attempts} attempts ({problem}); "
                        "run the download again to continue where it stopped")


def _expected(response, offset: int, url: str):
    """`(offset, total_size)` for a response: a 206 continues at `offset`, a 200 starts from 0."""
    length = response.headers.get("Content-Length")
    if length is None:
        raise ElmoResourceError(f"{url}: the server sent no Content-Length, so a complete download cannot be told apart")
    if response.status == 206:
        content_range = response.headers.get("Content-Range", "")  # bytes START-END/TOTAL
        try:
            start, total = int(content_range.split()[1].split("-")[0]), int(content_range.rsplit("/", 1)[1])
        except (IndexError, ValueError):
            raise ElmoResourceError(f"{url}: unreadable Content-Range {content_range!r}") from None
        if start != offset:
            raise ElmoResourceError(f"{url}: asked for bytes from {offset}, the server sent them from {start}")
        return offset, total
    return 0, int(length)


def _copy(response, part: Path, offset: int, total: int, progress: Progress | None, name: str) -> None:
    bar = progress(name, total, offset) if progress else None
    try:
        with open(part, "ab" if offset else "wb") as f:
            for block in iter(lambda: response.read(CHUNK), b""):
                f.write(block)
                if bar is not None:
                    bar.update(len(block))
    finally:
        if bar is not None:
            bar.close()
