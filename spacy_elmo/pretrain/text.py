"""Corpus text: the files of a corpus, their lines, the tokenizers, and each file tokenized once.

A corpus is a file or a directory of files (optionally gzipped), one sentence per line (only \\n
ends a line, as in `embed`). Each file is tokenized once into `TokenizedFile`: its distinct token
texts, their counts, and every sentence as an array of indices into them.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN
from ..errors import ElmoConfigError, ElmoFileError
from ..files import TEXT_ENCODING, open_regular, regular_file, sha256_file
from ..tokenizer import blank, kept_whole

Tokenizer = Callable[[Iterable[str]], Iterator[List[str]]]
GZIP_MAGIC = b"\x1f\x8b"


def corpus_files(path, what: str) -> List[Path]:
    """A file, or the files of a directory (sorted, recursive, hidden ones skipped, links followed;
    a cycle of links is an error), or a list of those."""
    if path is None:
        raise ElmoConfigError(f"no {what} corpus given (set --{what} or corpus.{what})")
    if isinstance(path, (list, tuple)):
        return [f for p in path for f in corpus_files(p, what)]
    path = Path(path)
    if not path.exists():
        raise ElmoFileError(f"{what} corpus not found: {path}")
    if not path.is_dir():
        regular_file(path, f"{what} corpus file")
        return [path]
    files = sorted(_tree_files(path, path, frozenset([os.path.realpath(path)]), what))
    if not files:
        raise ElmoFileError(f"{what} corpus directory {path} holds no files")
    for file in files:  # a FIFO or a device among them is refused, not skipped
        regular_file(file, f"{what} corpus file")
    return files


def _tree_files(root: Path, directory: Path, chain: frozenset, what: str) -> Iterator[Path]:
    """The files under `directory` of corpus directory `root`, hidden ones skipped, links to files
    and directories followed; `chain`: the real paths of `directory` and the ones it is in."""
    try:
        entries = list(os.scandir(directory))
    except OSError as err:
        raise ElmoFileError(f"cannot read the {what} corpus directory {directory}: {err}") from None
    for entry in entries:
        path = directory / entry.name
        if entry.name.startswith("."):
            continue
        if not entry.is_dir():  # a link to a file is read as the file; a broken one is refused
            yield path
            continue
        real = os.path.realpath(path)
        if real in chain:
            raise ElmoFileError(
                f"{what} corpus directory {root}: {path} links to a directory that holds it "
                f"({real}), a cycle"
            )
        yield from _tree_files(root, path, chain | {real}, what)


def corpus_sha256(path, what: str) -> Dict[str, str]:
    """The sha256 of each file of a corpus (see `corpus_files`), by its path as given."""
    return {str(f): sha256_file(f) for f in corpus_files(path, what)}


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a corpus file (UTF-8, gzipped where it starts as gzip does, whatever its
    name), each with its \\n: only \\n ends a line, as in `embed` (a \\r, U+2028 or NEL stays in its
    line; the \\r of \\r\\n is whitespace to either tokenizer)."""
    gz = False
    try:
        with open_regular(path, "corpus file") as raw:
            gz = raw.read(len(GZIP_MAGIC)) == GZIP_MAGIC  # never the start of UTF-8 text
            raw.seek(0)
            text = (
                gzip.open(raw, "rt", encoding=TEXT_ENCODING, newline="\n")
                if gz
                else io.TextIOWrapper(raw, TEXT_ENCODING, newline="\n")
            )
            with text:
                yield from text
    except UnicodeDecodeError:
        raise _first_bad_utf8(path, gz) from None
    except (OSError, EOFError, zlib.error) as err:  # a damaged or truncated .gz among them
        raise ElmoFileError(f"cannot read {path}: {type(err).__name__}: {err}") from None


def _first_bad_utf8(path: Path, gz: bool) -> ElmoFileError:
    """The error naming the line (as `wc -l` counts) and byte where `path` stops being UTF-8."""
    line, at = 1, 0
    with (gzip.open if gz else open)(path, "rb") as f:
        for raw in f:
            try:
                raw.decode(TEXT_ENCODING)
            except UnicodeDecodeError as err:
                where = f"byte {at + err.start} of the {'decompressed ' if gz else ''}file"
                return ElmoFileError(
                    f"{path}: invalid UTF-8 on line {line}, {where} ({err.reason}): convert it to "
                    "UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)"
                )
            line, at = line + 1, at + len(raw)
    return ElmoFileError(f"{path}: invalid UTF-8")


def make_tokenizer(
    kind: str, lang: str = "en", lowercase: bool = False, unk_token: Optional[str] = None
) -> Tokenizer:
    """Lines -> token lists: whitespace splitting, or the tokenizer of the spaCy language `lang`
    that `embed` uses too (`tokenizer.blank`), which keeps `<S>`, `</S>` and the corpus's
    `unk_token` whole (spaCy splits `<unk>` in three). `lowercase`: each token lowercased after
    tokenizing the text as written (as the `elmo` component's tokens reach a biLM that
    lowercases), those three kept as written."""
    keep = frozenset(kept_whole(unk_token))

    def cased(tokens: List[str]) -> List[str]:
        return [t if t in keep else t.lower() for t in tokens] if lowercase else tokens

    if kind == "whitespace":

        def tokenize(lines: Iterable[str]) -> Iterator[List[str]]:
            for line in lines:
                yield cased(line.split())

        return tokenize
    try:
        tokenizer = blank(lang, unk_token).tokenizer
    except Exception as err:  # spaCy raises ImportError / ValueError for unknown languages
        raise ElmoConfigError(f"no spaCy tokenizer for language {lang!r} ({err})") from None

    def tokenize(lines: Iterable[str]) -> Iterator[List[str]]:
        for doc in tokenizer.pipe((line.strip() for line in lines), batch_size=1000):
            yield cased([t.text for t in doc if not t.is_space])

    return tokenize


def corpus_tokenizer(corpus: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer of a config's `[corpus]` section, for training and dev text alike."""
    return make_tokenizer(
        corpus["tokenizer"], corpus["lang"], corpus["lowercase"], corpus["unk_token"]
    )


@dataclass
class TokenizedFile:
    """One corpus file: distinct token `texts` (0, 1 = `<S>`, `</S>`), their `counts` `(n_texts,)`,
    and `sentences`, each an int32 array of indices into `texts` (boundaries not included)."""

    path: Path
    texts: List[str]
    counts: np.ndarray
    sentences: List[np.ndarray]

    @property
    def n_tokens(self) -> int:
        return int(self.counts.sum())


def tokenize_file(path: Path, tokenize: Tokenizer, max_len: int) -> TokenizedFile:
    """Read and tokenize `path`; empty lines are skipped, long sentences cut into `max_len`
    pieces."""
    index: Dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1}
    sentences: List[np.ndarray] = []
    for tokens in tokenize(read_lines(path)):
        ids = np.fromiter(
            (index.setdefault(t, len(index)) for t in tokens), dtype=np.int32, count=len(tokens)
        )
        sentences.extend(ids[i : i + max_len] for i in range(0, len(ids), max_len))
    counts = (
        np.bincount(np.concatenate(sentences), minlength=len(index))
        if sentences
        else np.zeros(len(index))
    )
    return TokenizedFile(path, list(index), counts.astype(np.int64), sentences)


def merge_files(files: Sequence[TokenizedFile]) -> TokenizedFile:
    """The sentences of several files as one `TokenizedFile` (token texts shared, in file order)."""
    if len(files) == 1:
        return files[0]
    index: Dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1}
    remaps = [
        np.fromiter(
            (index.setdefault(t, len(index)) for t in f.texts), dtype=np.int32, count=len(f.texts)
        )
        for f in files
    ]
    counts = np.zeros(len(index), dtype=np.int64)
    sentences: List[np.ndarray] = []
    for f, remap in zip(files, remaps):
        np.add.at(counts, remap, f.counts)
        sentences.extend(remap[s] for s in f.sentences)
    return TokenizedFile(files[0].path.parent, list(index), counts, sentences)
