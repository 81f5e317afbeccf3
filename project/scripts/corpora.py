"""CoNLL-U (Universal Dependencies) sentences as token texts: what the biLM, the benchmarks and the
study read."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional, Union


class ConlluSentence(NamedTuple):
    """One sentence: its words, whether whitespace follows each (no `SpaceAfter=No`), and their UPOS
    tags."""

    words: List[str]
    spaces: List[bool]
    tags: List[str]


def read_conllu(path: Union[str, Path], limit: Optional[int] = None) -> Iterator[ConlluSentence]:
    """The sentences of a CoNLL-U file (gzipped where its name ends in `.gz`), lazily, the first
    `limit` of them where it is set. Multiword-token ranges and empty nodes are skipped: words are
    the syntactic ones. A word line short of CoNLL-U's 10 columns stops (SystemExit), naming it."""
    if limit is not None and limit <= 0:
        return
    sentence = ConlluSentence([], [], [])
    count = 0
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                if sentence.words:
                    yield sentence
                    count += 1
                    if count == limit:
                        return
                    sentence = ConlluSentence([], [], [])
            elif not line.startswith("#"):
                cols = line.split("\t")
                if cols[0].isdigit():
                    if len(cols) < 10:
                        raise SystemExit(
                            f"error: {path}, line {number}: {len(cols)} column(s), where CoNLL-U "
                            "has 10 (separated by tabs)"
                        )
                    sentence.words.append(cols[1])
                    sentence.spaces.append("SpaceAfter=No" not in cols[9])
                    sentence.tags.append(cols[3])
    if sentence.words:
        yield sentence
