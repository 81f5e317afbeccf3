"""Convert the tagging and NER data to spaCy's binary format (.spacy DocBin).

    python -m project.scripts.convert_data conllu IN.conllu OUT.spacy  # UPOS (tag_), sentences
    python -m project.scripts.convert_data iob2 IN.iob2 OUT.spacy      # UNER (IOB2, CoNLL-U-like)
    python -m project.scripts.convert_data conll03 IN OUT.spacy        # CoNLL-2003 (IOB1)

Options: `--limit N` keeps the first N sentences (smoke runs); then `--fraction F --seed S` keeps a
random subset of them (sample-efficiency runs). One Doc per sentence.
"""

from __future__ import annotations

import argparse
import random
from itertools import islice
from pathlib import Path
from typing import Iterator, List, Tuple

import spacy
from spacy.tokens import Doc, DocBin
from spacy.training.iob_utils import biluo_tags_to_spans, iob_to_biluo

from .corpora import read_conllu

Sentence = Tuple[List[str], List[bool], List[str]]  # words, spaces, tags


def read_columns(path: Path, word_col: int, tag_col: int, iob1: bool) -> Iterator[Sentence]:
    """Column files with blank lines between sentences; `#` comments and -DOCSTART- skipped.
    IOB1 tags (CoNLL-2003) are turned into IOB2. A line short of the columns read stops, naming
    it."""
    words: List[str] = []
    tags: List[str] = []

    def done():
        return words, [True] * len(words), (to_iob2(tags) if iob1 else list(tags))

    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("-DOCSTART-"):
                if words:
                    yield done()
                words, tags = [], []
            elif not line.startswith("#"):
                cols = line.split("\t") if "\t" in line else line.split()
                if len(cols) <= max(word_col, tag_col):
                    raise SystemExit(
                        short_line(path, number, len(cols), max(word_col, tag_col) + 1)
                    )
                words.append(cols[word_col])
                tags.append(cols[tag_col])
    if words:
        yield done()


def short_line(path: Path, number: int, found: int, needed: int) -> str:
    """The error of a line with fewer columns than the reader takes."""
    return (
        f"error: {path}, line {number}: {found} column(s), where the format has at least {needed} "
        "(separated by tabs, or by spaces where a line has no tab)"
    )


def to_iob2(tags: List[str]) -> List[str]:
    """IOB1 (I- starts an entity unless it continues one of the same type) -> IOB2."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            prev = out[i - 1] if i else "O"
            if prev == "O" or prev[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        out.append(tag)
    return out


def to_doc(vocab, sentence: Sentence, kind: str) -> Doc:
    words, spaces, tags = sentence
    spaces = spaces[:-1] + [False]  # one Doc per sentence: no trailing whitespace
    if kind == "conllu":
        return Doc(
            vocab,
            words=words,
            spaces=spaces,
            tags=tags,
            sent_starts=[True] + [False] * (len(words) - 1),
        )
    doc = Doc(vocab, words=words, spaces=spaces, sent_starts=[True] + [False] * (len(words) - 1))
    doc.ents = biluo_tags_to_spans(doc, iob_to_biluo(tags))
    return doc


def read(kind: str, path: Path) -> Iterator[Sentence]:
    if kind == "conllu":
        return read_conllu(path)
    if kind == "iob2":
        return read_columns(path, word_col=1, tag_col=2, iob1=False)
    if kind == "conll03":
        return read_columns(path, word_col=0, tag_col=3, iob1=True)
    raise ValueError(f"unknown format {kind!r}")


def convert(
    kind: str, source: Path, target: Path, fraction: float = 1.0, seed: int = 0, limit: int = 0
) -> int:
    # the first `limit` sentences, read lazily: a smoke run reads a slice, not the whole file
    try:
        sentences = list(islice(read(kind, source), limit or None))
    except OSError as err:  # missing, unreadable, a damaged gzip file
        raise SystemExit(f"error: cannot read {source}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise SystemExit(f"error: cannot read {source}: not UTF-8 text ({err.reason})") from None
    if not sentences:
        raise SystemExit(f"error: no sentences in {source}")
    if fraction < 1.0:
        keep = max(1, round(len(sentences) * fraction))
        sentences = random.Random(seed).sample(sentences, keep)
    vocab = spacy.blank("en").vocab
    db = DocBin(store_user_data=False)
    for sentence in sentences:
        db.add(to_doc(vocab, sentence, kind))
    target.parent.mkdir(parents=True, exist_ok=True)
    db.to_disk(target)
    return len(sentences)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=["conllu", "iob2", "conll03"])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0)
    args = parser.parse_args(argv)
    n = convert(args.kind, args.source, args.target, args.fraction, args.seed, args.limit)
    print(f"{args.target}: {n} sentences")


if __name__ == "__main__":
    main()
