"""The output vocabulary of the LM heads, and the ids of its special tokens."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN
from ..errors import ElmoConfigError, ElmoError, ElmoFileError
from ..files import RECORD_BYTES, TEXT_ENCODING, read_regular

UNK_TOKEN = "<unk>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2


class Vocab:
    """Output vocabulary: `<S>`, `</S>`, `<unk>` (ids 0, 1, 2), then words by falling frequency,
    each once."""

    def __init__(self, words: Sequence[str]):
        self.words = list(words)
        if tuple(self.words[:3]) != SPECIALS:
            raise ElmoFileError(f"a vocabulary must start with {SPECIALS}")
        self.index = {}
        for i, word in enumerate(self.words):
            first = self.index.setdefault(word, i)
            if first != i:  # a second row of the softmax for a word would never be trained
                raise ElmoFileError(f"the word {word!r} is on lines {first + 1} and {i + 1}")

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
        them; so is a vocabulary whose vocab.txt a run could not read back."""
        counts = Counter({w: n for w, n in counts.items() if w not in SPECIALS and w != unk_token})
        if not counts:
            raise ElmoFileError(
                "the training corpus holds no words (empty files or empty lines only)"
            )
        if size is not None and size > len(counts) and not shrink:
            raise ElmoFileError(
                f"vocab.size = {size} is larger than the training corpus, which has only "
                f"{len(counts)} distinct words; set --vocab.size {len(counts)} (or null to keep "
                f"every word)"
            )
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        words = [*SPECIALS, *(w for w, _ in ranked[:size])]
        ends = np.cumsum([len(w.encode("utf-8")) + 1 for w in words])  # of its lines in vocab.txt
        if ends[-1] > RECORD_BYTES:  # what `from_disk` reads; a run could not be resumed
            fits = int(np.searchsorted(ends, RECORD_BYTES, side="right")) - len(SPECIALS)
            raise ElmoConfigError(
                f"the output vocabulary of {len(words) - len(SPECIALS)} words takes "
                f"{int(ends[-1]):,} bytes in vocab.txt, more than the {RECORD_BYTES:,} that a "
                f"run reads back (--resume, --init-from): set --vocab.size {fits} or less"
            )
        return cls(words)

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
