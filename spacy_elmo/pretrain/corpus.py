"""The training corpus and the dev set.

`TrainingCorpus` reads the training files (see `text`) and yields the batches of a scheme (see
`batches`) from any `Position`, epoch after epoch; `load_dev` reads the dev sentences with their
output ids (see `vocab`). The names of those modules are importable from here too.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN
from ..errors import ElmoConfigError, ElmoFileError
from .batches import Batch, WordIds, make_batch, sentence_batches, stream_batches
from .text import (
    TokenizedFile,
    Tokenizer,
    corpus_files,
    corpus_tokenizer,
    make_tokenizer,
    merge_files,
    read_lines,
    tokenize_file,
)
from .vocab import BOS_ID, EOS_ID, SPECIALS, UNK_ID, UNK_TOKEN, Vocab

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MAX_CACHED_TOKENS",
    "SPECIALS",
    "UNK_ID",
    "UNK_TOKEN",
    "Batch",
    "DevSet",
    "Position",
    "TokenizedFile",
    "Tokenizer",
    "TrainingCorpus",
    "Vocab",
    "corpus_files",
    "corpus_tokenizer",
    "load_dev",
    "make_batch",
    "make_tokenizer",
    "merge_files",
    "read_lines",
    "sentence_batches",
    "stream_batches",
    "tokenize_file",
]

# Tokenized files are kept in memory while the corpus has at most this many tokens.
MAX_CACHED_TOKENS = 20_000_000


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
        *,
        word_ids: WordIds,
    ) -> Iterator[Tuple[Position, Batch]]:
        """Yield `(position after the batch, batch)` from `start` on, epoch after epoch; the
        tokens' character ids from `word_ids`, the model's encoder (`BiLM.word_ids`)."""
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
                    rows = batch_tokens // window
                    makers = stream_batches(f, order, out_ids, rows, window, rank, world, word_ids)
                else:
                    makers = sentence_batches(
                        f, order, out_ids, batch_tokens, rank, world, rng, word_ids
                    )
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
                    f"lower training.batch_tokens (now {batch_tokens}) or training.window "
                    f"(now {window})"
                )
            epoch, first_file = epoch + 1, 0


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
