"""The input of `embed`: a UTF-8 text file (one sentence per line, only \\n ends a line; a last line
without one counts too) or a `.spacy` DocBin, scanned once (size, sha256, line count, UTF-8
checked) and read lazily."""

from __future__ import annotations

import codecs
import hashlib
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from spacy.language import Language
from spacy.tokens import DocBin
from spacy.vocab import Vocab

from ..errors import ElmoFileError
from ..files import TEXT_ENCODING, open_regular
from .options import DEFAULT_MAX_DOCBIN_BYTES

# what spaCy raises on a DocBin of other content: missing keys, wrong types, unknown strings
DOCBIN_ERRORS = (
    AssertionError,
    AttributeError,
    IndexError,
    KeyError,
    OverflowError,
    TypeError,
    ValueError,
    ZeroDivisionError,
)


def _bad_utf8(path: Path, line: int, offset: int, err: UnicodeDecodeError) -> ElmoFileError:
    return ElmoFileError(
        f"{path}: invalid UTF-8 on line {line}, byte {offset} of the file ({err.reason}): "
        "convert it to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)"
    )


Identity = tuple[int, int, int, int]


class InputChanged(ElmoFileError):
    """The input is no longer the file that was scanned."""


def identity(status: os.stat_result) -> Identity:
    """What changes when a file is rewritten in place (size, mtime, ctime) or replaced (inode)."""
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def check_unchanged(
    path: Path, then: Optional[Identity], now: Optional[os.stat_result] = None
) -> None:
    """InputChanged where `path` (or its open file, of status `now`) is no longer the file of
    identity `then` (None: not checked)."""
    if then is None:
        return
    try:
        seen = identity(os.stat(path) if now is None else now)
    except OSError:
        seen = None
    if seen != then:
        raise InputChanged(
            f"{path}: the input changed while it was embedded (rewritten or replaced): nothing "
            "built from the changed input was kept; run again"
        )


def scan_input(path: Path, max_docbin_bytes: int = DEFAULT_MAX_DOCBIN_BYTES) -> dict[str, Any]:
    """`input` (resolved path), `input_bytes`, `input_sha256` and `lines` of an input, in one pass
    (a DocBin: decompressed to at most `max_docbin_bytes`), and its `identity` (see `identity`;
    ElmoFileError where it changed during the scan).

    Only \\n ends a line; a last line without it counts too (one more than `wc -l`). Text
    is checked to be UTF-8 here, before any work: ElmoFileError names the line and byte offset."""
    digest, size, lines, last = hashlib.sha256(), 0, 0, b"\n"
    utf8 = codecs.getincrementaldecoder("utf-8")()  # keeps a character cut between blocks
    docbin = path.suffix == ".spacy"
    with open_regular(path, "input") as f:
        then = identity(os.fstat(f.fileno()))
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            if not docbin:
                _check_utf8(path, utf8, block, size, lines)
                lines += block.count(b"\n")
            size += len(block)
            last = block[-1:]
        check_unchanged(path, then)
    if docbin:  # every Doc read here, before any work: a file that cannot be read leaves nothing
        lines = sum(1 for _ in _docbin_sentences(path, _docbin(path, max_docbin_bytes, then)))
    else:
        _check_utf8(path, utf8, b"", size, lines)
        lines += last != b"\n"
    return {
        "input": str(path.resolve()),
        "input_bytes": size,
        "input_sha256": digest.hexdigest(),
        "lines": lines,
        "identity": then,
    }


def _check_utf8(
    path: Path, utf8: codecs.IncrementalDecoder, block: bytes, at: int, lines: int
) -> None:
    """Feed `block` (at byte `at` of the file, after `lines` \\n) to the decoder `utf8`, the end of
    the file where `block` is empty; ElmoFileError naming the line and byte of invalid UTF-8."""
    held = utf8.getstate()[0]  # a character's first bytes, from the block before: no \n
    try:
        utf8.decode(block, final=not block)
    except UnicodeDecodeError as err:
        start = max(err.start - len(held), 0)  # in `block`
        raise _bad_utf8(
            path, lines + block.count(b"\n", 0, start) + 1, at + err.start - len(held), err
        ) from None


def read_sentences(
    path: Path,
    nlp: Optional[Language] = None,
    skip: int = 0,
    max_docbin_bytes: int = DEFAULT_MAX_DOCBIN_BYTES,
    then: Optional[Identity] = None,
) -> Iterator[tuple[str, list[str]]]:
    """`(text, tokens)` per line of a UTF-8 text file (tokenized by `nlp`'s tokenizer, or split on
    whitespace without one), or per Doc of a `.spacy` DocBin (decompressed to at most
    `max_docbin_bytes`); lazily, after `skip` lines.
    Only \\n ends a line: a \\r, U+2028 or NUL inside a line stays in its text.
    Whitespace tokens are left out, as in the `elmo` component; `text`, the key of
    `sentence_to_index`, is stripped (AllenNLP's key of a line). `then`: the identity the input
    must still have when opened (`check_unchanged`)."""
    if path.suffix == ".spacy":
        docbin = _docbin(path, max_docbin_bytes, then)
        yield from _docbin_sentences(path, docbin, nlp.vocab if nlp is not None else None, skip)
        return
    lines = (text.strip() for text in _decoded_lines(path, skip, then))
    if nlp is None:
        for line in lines:
            yield line, line.split()
    else:
        for doc in nlp.tokenizer.pipe(lines, batch_size=1000):
            yield doc.text, [t.text for t in doc if not t.is_space]


def _decoded_lines(path: Path, skip: int, then: Optional[Identity]) -> Iterator[str]:
    offset = 0
    with open_regular(path, "input") as f:  # binary: iteration splits on b"\n" only
        check_unchanged(path, then, os.fstat(f.fileno()))
        for number, raw in enumerate(f, 1):
            if number > skip:
                try:
                    yield raw.decode(TEXT_ENCODING if number == 1 else "utf-8")
                except UnicodeDecodeError as err:
                    raise _bad_utf8(path, number, offset + err.start, err) from None
            offset += len(raw)


def _docbin_sentences(
    path: Path, docbin: DocBin, vocab: Optional[Vocab] = None, skip: int = 0
) -> Iterator[tuple[str, list[str]]]:
    """`(text, tokens)` per Doc of `docbin` (read from `path`) after `skip`, its strings looked up
    in `vocab` (default: a new one); ElmoFileError where a Doc cannot be made of it."""
    number = 0
    try:
        for number, doc in enumerate(docbin.get_docs(Vocab() if vocab is None else vocab)):
            if number >= skip:
                yield doc.text.strip(), [t.text for t in doc if not t.is_space]
    except DOCBIN_ERRORS as err:
        raise ElmoFileError(
            f"{path}: not a spaCy DocBin (.spacy) file: its Doc {number + 1} (counting from 1) "
            f"cannot be read ({type(err).__name__}: {err})"
        ) from None


def _docbin(path: Path, max_bytes: int, then: Optional[Identity] = None) -> DocBin:
    """The DocBin in `path`; ElmoFileError where it holds something else or decompresses to more
    than `max_bytes` (checked first, a piece at a time: a zlib bomb never fills memory)."""
    with open_regular(path, "input") as f:
        check_unchanged(path, then, os.fstat(f.fileno()))
        data = f.read()
    inflater, size, view = zlib.decompressobj(), 0, memoryview(data)
    try:
        for at in range(0, len(data), 1 << 16):
            pending = view[at : at + (1 << 16)]
            while pending and not inflater.eof:
                size += len(inflater.decompress(pending, 1 << 22))
                pending = inflater.unconsumed_tail
                if size > max_bytes:
                    raise ElmoFileError(
                        f"{path}: decompresses to more than {max_bytes:,} bytes (a zlib bomb, or a "
                        "DocBin larger than the bound): give a higher --max-docbin-bytes where it "
                        "is a DocBin you trust"
                    )
    except zlib.error as err:
        raise ElmoFileError(f"{path}: not a spaCy DocBin (.spacy) file ({err})") from None
    try:
        return DocBin().from_bytes(data)
    except DOCBIN_ERRORS as err:
        raise ElmoFileError(
            f"{path}: not a spaCy DocBin (.spacy) file ({type(err).__name__}: {err})"
        ) from None
