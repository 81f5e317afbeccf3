"""Corpus reading, tokenization, the output vocabulary, and the batches of both training schemes.

A training corpus is a file or a directory of files (optionally gzipped), one sentence per
line. Each file is tokenized once into `TokenizedFile` (its distinct token texts, their counts,
and every sentence as an array of indices into them). Batches hold, for both directions at once:

- `index` `(2, B, T)`: per direction, row and position, an index into `chars`, the character ids
  `(U, 50)` of the `U` distinct token texts of the batch (the token encoder runs once per text);
- `targets` `(2, B, T)`: output-vocabulary ids of the next token in reading order;
- `mask` `(2, B, T)`: True on predicted positions (a prefix of each row).

Direction 0 reads left to right; direction 1 reads the same text reversed (`</S> w_n ... w_1 <S>`),
already in its reading order, as bilm-tf trains its backward LM.
"""

from __future__ import annotations

import gzip
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN, words_char_ids
from ..errors import ElmoConfigError, ElmoError, ElmoFileError
from ..files import RECORD_BYTES, TEXT_ENCODING, open_regular, read_regular, regular_file

UNK_TOKEN = "<unk>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2
# Tokenized files are kept in memory while the corpus has at most this many tokens.
MAX_CACHED_TOKENS = 20_000_000

Tokenizer = Callable[[Iterable[str]], Iterator[List[str]]]


# ---------------------------------------------------------------------- files and tokenizers
def corpus_files(path, what: str) -> List[Path]:
    """A file, or the files of a directory (sorted, recursive, hidden ones skipped), or a list of
    those."""
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
    files = sorted(
        p
        for p in path.rglob("*")
        if not p.is_dir() and not any(s.startswith(".") for s in p.relative_to(path).parts)
    )
    if not files:
        raise ElmoFileError(f"{what} corpus directory {path} holds no files")
    for file in files:  # a FIFO or a device among them is refused, not skipped
        regular_file(file, f"{what} corpus file")
    return files


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a corpus file (UTF-8, gzipped where it ends in .gz)."""
    try:
        with open_regular(path, "corpus file") as raw:
            text = (
                gzip.open(raw, "rt", encoding=TEXT_ENCODING)
                if path.suffix == ".gz"
                else io.TextIOWrapper(raw, TEXT_ENCODING)
            )
            with text:
                yield from text
    except (OSError, UnicodeDecodeError) as err:
        raise ElmoFileError(f"cannot read {path}: {err}") from None


def make_tokenizer(kind: str, lang: str = "en", lowercase: bool = False) -> Tokenizer:
    """Lines -> token lists: whitespace splitting, or the tokenizer of the spaCy language `lang`."""
    if kind == "whitespace":

        def tokenize(lines: Iterable[str]) -> Iterator[List[str]]:
            for line in lines:
                yield (line.lower() if lowercase else line).split()

        return tokenize
    import spacy

    try:
        tokenizer = spacy.blank(lang).tokenizer
    except Exception as err:  # spaCy raises ImportError / ValueError for unknown languages
        raise ElmoConfigError(f"no spaCy tokenizer for language {lang!r} ({err})") from None

    def tokenize(lines: Iterable[str]) -> Iterator[List[str]]:
        stripped = ((line.lower() if lowercase else line).strip() for line in lines)
        for doc in tokenizer.pipe(stripped, batch_size=1000):
            yield [t.text for t in doc if not t.is_space]

    return tokenize


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


# ---------------------------------------------------------------------- vocabulary
class Vocab:
    """Output vocabulary: `<S>`, `</S>`, `<unk>` (ids 0, 1, 2), then words by falling frequency."""

    def __init__(self, words: Sequence[str]):
        self.words = list(words)
        if tuple(self.words[:3]) != SPECIALS:
            raise ElmoFileError(f"a vocabulary must start with {SPECIALS}")
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def build(
        cls,
        counts: Counter,
        size: Optional[int],
        unk_token: Optional[str] = None,
        shrink: bool = False,
    ) -> "Vocab":
        """The `size` most frequent words of `counts` (ties by text); `size=None`: all of them. A
        `size` larger than the number of distinct words is an error, or with `shrink` means all of
        them."""
        counts = Counter({w: n for w, n in counts.items() if w not in SPECIALS and w != unk_token})
        if not counts:
            raise ElmoFileError(
                "the training corpus holds no words (empty files or empty lines only)"
            )
        if size is not None and size > len(counts) and not shrink:
            raise ElmoFileError(
                f"vocab.size = {size} is larger than the training corpus, which has only "
                f"{len(counts)} distinct "
                f"words; set --vocab.size {len(counts)} (or null to keep every word)"
            )
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return cls([*SPECIALS, *(w for w, _ in ranked[:size])])

    def lookup(self, texts: Sequence[str], unk_token: Optional[str] = None) -> np.ndarray:
        """Token texts -> int64 output ids `(len(texts),)`; unknown words (and `unk_token`) ->
        `<unk>`."""
        return np.array(
            [UNK_ID if t == unk_token else self.index.get(t, UNK_ID) for t in texts], dtype=np.int64
        )

    def to_str(self) -> str:
        return "".join(w + "\n" for w in self.words)

    @classmethod
    def from_disk(cls, path: Path) -> "Vocab":
        data = read_regular(path, "vocabulary", RECORD_BYTES)
        try:
            return cls(data.decode(TEXT_ENCODING).split("\n")[:-1])
        except (UnicodeDecodeError, ElmoError) as err:
            raise ElmoFileError(f"cannot read the vocabulary {path} ({err})") from None


# ---------------------------------------------------------------------- batches
class Batch(NamedTuple):
    """Both directions of one step: `index`, `targets`, `mask` `(2, B, T)`; `chars` `(U, 50)`."""

    index: torch.Tensor
    chars: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    @property
    def n_predicted(self) -> int:
        """Predicted tokens per direction (both directions predict as many)."""
        return int(self.mask[0].sum())


def make_batch(
    inputs: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    texts: Sequence[str],
    out_ids: np.ndarray,
) -> Batch:
    """inputs, targets `(2, B, T)` text indices; mask `(2, B, T)` -> `Batch` (targets as output
    ids)."""
    types, inverse = np.unique(inputs, return_inverse=True)
    chars = torch.from_numpy(words_char_ids([texts[i] for i in types]))
    return Batch(
        torch.from_numpy(inverse.reshape(inputs.shape).astype(np.int64)),
        chars,
        torch.from_numpy(out_ids[targets]),
        torch.from_numpy(mask),
    )


def stream_batches(
    f: TokenizedFile,
    order: np.ndarray,
    out_ids: np.ndarray,
    rows: int,
    window: int,
    rank: int,
    world: int,
) -> List[Callable[[], Batch]]:
    """bilm-tf's packed windows. Sentences (in `order`, each `<S> w.. </S>`) form one stream, cut
    into `world * rows` equal parts; this rank reads parts `rank * rows ...`. Window i of a part
    holds its tokens `i*window ... (i+1)*window - 1` and, for direction 1, the same of the reversed
    part."""
    stream = np.concatenate([np.concatenate(([BOS_ID], f.sentences[i], [EOS_ID])) for i in order])
    part = len(stream) // (world * rows)
    parts = stream[: world * rows * part].reshape(world * rows, part)[
        rank * rows : (rank + 1) * rows
    ]
    both = np.stack([parts, parts[:, ::-1]])  # (2, rows, part)
    mask = np.ones((2, rows, window), dtype=bool)

    def batch(i: int) -> Batch:
        s = slice(i * window, (i + 1) * window)
        t = slice(i * window + 1, (i + 1) * window + 1)
        return make_batch(both[:, :, s], both[:, :, t], mask, f.texts, out_ids)

    return [lambda i=i: batch(i) for i in range((part - 1) // window)] if part > 0 else []


def sentence_batches(
    f: TokenizedFile,
    order: np.ndarray,
    out_ids: np.ndarray,
    batch_tokens: int,
    rank: int,
    world: int,
    rng: np.random.RandomState,
) -> List[Callable[[], Batch]]:
    """One sentence per row. Sentences (in `order`) are sorted by length within pools of about 50
    batches and grouped under `world * batch_tokens` padded positions; batches are then shuffled and
    rank r takes sentences r, r + world, ... of each (batches with fewer than `world` are
    dropped)."""
    budget = world * batch_tokens
    lengths = np.array([len(f.sentences[i]) + 1 for i in order])
    pool = max(1, 50 * budget // max(1, int(lengths.mean()) if len(lengths) else 1))
    groups: List[List[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(range(start, min(start + pool, len(order))), key=lambda k: lengths[k])
        group: List[int] = []
        for k in chunk:
            if group and (len(group) + 1) * lengths[k] > budget:
                groups.append(group)
                group = []
            group.append(k)
        if group:
            groups.append(group)
    groups = [groups[i] for i in rng.permutation(len(groups)) if len(groups[i]) >= world]

    def batch(group: List[int]) -> Batch:
        sents = [f.sentences[order[k]] for k in group[rank::world]]
        T = max(len(s) for s in sents) + 1
        inputs = np.zeros((2, len(sents), T), dtype=np.int64)
        targets = np.zeros((2, len(sents), T), dtype=np.int64)
        mask = np.zeros((2, len(sents), T), dtype=bool)
        for row, s in enumerate(sents):
            seq = np.concatenate(([BOS_ID], s, [EOS_ID]))
            for d, x in enumerate((seq, seq[::-1])):
                inputs[d, row, : len(s) + 1] = x[:-1]
                targets[d, row, : len(s) + 1] = x[1:]
                mask[d, row, : len(s) + 1] = True
        return make_batch(inputs, targets, mask, f.texts, out_ids)

    return [lambda g=g: batch(g) for g in groups]


class Position(NamedTuple):
    """Where the data stream stands: the next batch is batch `batch` of unit `file` (the pooled
    corpus, or a file in this epoch's file order) of epoch `epoch`."""

    epoch: int
    file: int
    batch: int


class TrainingCorpus:
    """The training files, tokenized; yields the batches of a scheme from any `Position`, the same
    on every run (sentence and file orders come from the seed and the epoch).

    A corpus of at most `MAX_CACHED_TOKENS` tokens is kept in memory as one pool: every epoch
    shuffles the sentences of all its files together, so that files of different text (say
    WikiText and news) are mixed in every stretch of training. A larger corpus is read one file at
    a time (files in a shuffled order, sentences shuffled within each), as bilm-tf reads its shards:
    split it into many files of mixed content."""

    def __init__(self, path, tokenize: Tokenizer, max_len: int):
        self.files = corpus_files(path, "train")
        self.tokenize, self.max_len = tokenize, max_len
        self.counts: Counter = Counter()
        self.n_tokens = 0
        kept: List[TokenizedFile] = []
        for p in self.files:  # first pass: word counts (files are kept if the corpus is small)
            f = tokenize_file(p, tokenize, max_len)
            self.counts.update(dict(zip(f.texts, f.counts.tolist())))
            self.n_tokens += f.n_tokens
            if self.n_tokens <= MAX_CACHED_TOKENS:
                kept.append(f)
        if self.n_tokens == 0:
            raise ElmoFileError(
                f"the training corpus {', '.join(map(str, self.files))} is empty "
                f"(no tokens in {len(self.files)} file(s))"
            )
        self.pool: Optional[TokenizedFile] = (
            merge_files(kept) if self.n_tokens <= MAX_CACHED_TOKENS else None
        )

    @property
    def n_units(self) -> int:
        """What an epoch reads one after the other: the pool, or each file."""
        return 1 if self.pool is not None else len(self.files)

    def unit(self, i: int) -> TokenizedFile:
        return (
            self.pool
            if self.pool is not None
            else tokenize_file(self.files[i], self.tokenize, self.max_len)
        )

    def batches(
        self,
        start: Position,
        seed: int,
        vocab: Vocab,
        unk_token: Optional[str],
        scheme: str,
        batch_tokens: int,
        window: int,
        rank: int = 0,
        world: int = 1,
        max_epochs: Optional[int] = None,
    ) -> Iterator[Tuple[Position, Batch]]:
        """Yield `(position after the batch, batch)` from `start` on, epoch after epoch."""
        epoch, first_file, first_batch = start
        while max_epochs is None or epoch < max_epochs:
            n_batches = 0
            file_order = np.random.RandomState([seed, epoch]).permutation(self.n_units)
            for fi in range(first_file, self.n_units):
                f = self.unit(file_order[fi])
                rng = np.random.RandomState([seed, epoch, fi])
                order = rng.permutation(len(f.sentences))
                out_ids = vocab.lookup(f.texts, unk_token)
                if scheme == "stream":
                    makers = stream_batches(
                        f, order, out_ids, batch_tokens // window, window, rank, world
                    )
                else:
                    makers = sentence_batches(f, order, out_ids, batch_tokens, rank, world, rng)
                n_batches += len(makers)
                for bi in range(first_batch, len(makers)):
                    nxt = (
                        Position(epoch, fi, bi + 1)
                        if bi + 1 < len(makers)
                        else Position(epoch, fi + 1, 0)
                    )
                    yield (
                        (Position(epoch + 1, 0, 0) if nxt.file == self.n_units else nxt),
                        makers[bi](),
                    )
                first_batch = 0
            if n_batches == 0 and first_file == 0:
                raise ElmoConfigError(
                    f"the training corpus ({self.n_tokens} tokens) is too small for one batch: "
                    f"lower "
                    f"training.batch_tokens (now {batch_tokens}) or training.window (now {window})"
                )
            epoch, first_file = epoch + 1, 0


# ---------------------------------------------------------------------- dev set
class DevSet(NamedTuple):
    """Dev sentences (token texts) and their output ids with boundaries, `<S> w.. </S>` each."""

    sentences: List[List[str]]
    ids: List[np.ndarray]

    @property
    def n_predicted(self) -> int:
        """Predicted tokens per direction: every word plus the closing boundary."""
        return sum(len(s) + 1 for s in self.sentences)


def load_dev(
    path, tokenize: Tokenizer, max_len: int, vocab: Vocab, unk_token: Optional[str]
) -> DevSet:
    """Read the dev corpus; refuse an empty one or one whose words are all out of the vocabulary."""
    sentences: List[List[str]] = []
    for p in corpus_files(path, "dev"):
        f = tokenize_file(p, tokenize, max_len)
        sentences.extend([f.texts[i] for i in s] for s in f.sentences)
    if not sentences:
        raise ElmoFileError(f"the dev corpus {path} is empty")
    ids = [vocab.lookup([BOS_TOKEN, *s, EOS_TOKEN], unk_token) for s in sentences]
    n_words = sum(len(s) for s in sentences)
    n_known = sum(int((i[1:-1] != UNK_ID).sum()) for i in ids)
    if n_known == 0:
        raise ElmoFileError(
            f"every one of the {n_words} words of the dev corpus {path} is out of the vocabulary "
            f"({len(vocab) - 3} words from the training corpus): is it the same language, casing "
            f"and tokenization?"
        )
    return DevSet(sentences, ids)
