"""A download's part file (`FILE.part`) and the record of where its bytes came from
(`FILE.part.origin`: the URL and the validator its response named), for `download` to continue only
the file it began: a later request's `If-Range` names the validator, and any doubt starts over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ..errors import ElmoError
from ..files import read_regular, write_atomic, write_error

ORIGIN = ".origin"


def cache_write_error(err: OSError, path: Path) -> ElmoError:
    """A failed local write of the download (`write_error`), with where the cache can go instead."""
    error = write_error(err, path, "free space and run the download again")
    return type(error)(f"{error}; set SPACY_ELMO_CACHE to a writable directory")


def origin(part: Path) -> Path:
    return part.with_name(part.name + ORIGIN)


def validator(response) -> Optional[str]:
    """What an If-Range may name of the file `response` sends: its strong ETag, else its
    Last-Modified date; None for neither, and for a file:// URL (a local copy starts over)."""
    if urlsplit(response.geturl()).scheme == "file":
        return None
    etag = response.headers.get("ETag")
    if etag and not etag.startswith("W/"):  # a weak ETag never matches an If-Range
        return etag
    return response.headers.get("Last-Modified")


def resumable(part: Path, url: str, limit: int) -> tuple[int, Optional[str]]:
    """`(bytes to continue from, the validator to continue with)` for the part file of `url`. A
    part that holds nothing, more than `limit` bytes, or no record of coming from `url` under a
    validator is removed: `(0, None)`."""
    try:
        offset = part.stat().st_size if part.is_file() else 0
        recorded = json.loads(read_regular(origin(part), "download record", 1 << 16))
    except (ElmoError, OSError, ValueError):  # no record, or not one that `start` wrote
        offset, recorded = 0, {}
    if not isinstance(recorded, dict):
        recorded = {}
    tag = recorded.get("validator")
    if 0 < offset <= limit and recorded.get("url") == url and isinstance(tag, str):
        return offset, tag
    discard(part)
    return 0, None


def start(part: Path, url: str, tag: Optional[str]) -> None:
    """Remove `part` and record where its next bytes come from: `url`, under the validator `tag`."""
    discard(part)
    try:
        write_atomic(origin(part), json.dumps({"url": url, "validator": tag}))
    except OSError as err:
        raise cache_write_error(err, origin(part)) from None


def complete(part: Path, target: Path) -> None:
    """`part` renamed to `target`, its record removed."""
    part.replace(target)
    origin(part).unlink(missing_ok=True)


def discard(part: Path) -> None:
    """Remove `part` and its record, if any."""
    for path in (part, origin(part)):
        try:
            path.unlink(missing_ok=True)
        except OSError as err:
            raise cache_write_error(err, path) from None
