"""Token texts -> the ids the token encoder reads: `ByteIds` (bilm-tf / AllenNLP) or `CharTable`
(ELMoForManyLangs).

bilm-tf: a token becomes `max_chars` slots `[BOW, utf-8 bytes..., EOW, PAD...]`, bytes cut to
`max_chars - 2`; every id is then shifted by +1 so that 0 means "no token" (padding).
`<S>` / `</S>` (added around each sentence, or given literally as token texts) become
`[BOW, 256 or 257, EOW, PAD...]`. A model trained on lowercased text (`lowercase`) reads each
token lowercased (`str.lower`), `<S>` and `</S>` as written.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache, partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ElmoFileError
from ..files import excerpt, parse_json

BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
MAX_CHARS = 50  # bilm-tf's ids per token, its boundary marks included


@lru_cache(maxsize=8192)  # misses of the token cache, and the "carry" path
def _word_ids(key: Union[str, bytes], max_chars: int) -> np.ndarray:
    """The ids of a token given by its `_key`."""
    ids = np.full(max_chars, PAD_CHAR + 1, dtype=np.int64)
    if key == BOS_TOKEN:
        body = [BOS_CHAR]
    elif key == EOS_TOKEN:
        body = [EOS_CHAR]
    else:
        body = list(
            (key if isinstance(key, bytes) else key.encode("utf-8", "ignore"))[: max_chars - 2]
        )
    ids[0] = BOW_CHAR + 1
    ids[1 : 1 + len(body)] = np.asarray(body, dtype=np.int64) + 1
    ids[1 + len(body)] = EOW_CHAR + 1
    ids.setflags(write=False)
    return ids


def _key(text: str, max_chars: int) -> Union[str, bytes]:
    """What a token's ids depend on, at most `max_chars - 2` characters or bytes long (the cache
    holds no long text): `<S>`, `</S>` or a text of at most that many characters itself, else the
    first `max_chars - 2` bytes of its utf-8, as bytes (a multibyte character may be cut; characters
    that encode to nothing, lone surrogates, are left out)."""
    cut = max_chars - 2
    if len(text) <= cut or text == BOS_TOKEN or text == EOS_TOKEN:
        return text
    # each character gives 1 to 4 bytes: enough, unless some give none
    body = text[:cut].encode("utf-8", "ignore")
    if len(body) < cut:
        body = text.encode("utf-8", "ignore")
    return body[:cut]


def lowercased(text: str) -> str:
    """`text.lower()`, but `<S>` and `</S>` as written (and a non-str as it is, for the caller's
    TypeError)."""
    if not isinstance(text, str) or text == BOS_TOKEN or text == EOS_TOKEN:
        return text
    return text.lower()


def word_char_ids(text: str, max_chars: int = MAX_CHARS) -> np.ndarray:
    """One token text -> int64 array `(max_chars,)` of shifted character ids (read-only)."""
    if not isinstance(text, str):
        raise TypeError(f"token texts must be str, got {type(text).__name__}: {text!r}")
    return _word_ids(_key(text, max_chars), max_chars)


def words_char_ids(words: Sequence[str], max_chars: int = MAX_CHARS) -> np.ndarray:
    """Token texts -> int64 array `(n_words, max_chars)`."""
    if not words:
        return np.zeros((0, max_chars), dtype=np.int64)
    return np.stack([word_char_ids(w, max_chars) for w in words])


def batch_char_ids(sentences: Sequence[Sequence[str]], max_chars: int = MAX_CHARS) -> np.ndarray:
    """Sentences -> int64 array `(n_sentences, max_len + 2, max_chars)` with `<S>`/`</S>` added.

    Rows shorter than the longest sentence are padded with 0 (the "no token" id).
    """
    ids = partial(words_char_ids, max_chars=max_chars)
    return padded_batch(sentences, ids, max_chars, (BOS_TOKEN, EOS_TOKEN))


def padded_batch(
    sentences: Sequence[Sequence[str]],
    words_ids: Callable[[Sequence[str]], np.ndarray],
    width: int,
    boundary: Tuple[str, str],
) -> np.ndarray:
    """Sentences -> int64 `(n_sentences, max_len + 2, width)`: each row the ids `words_ids` gives
    `(n, width)` its tokens between the `boundary` tokens, rows padded with 0 (no token)."""
    max_len = max((len(s) for s in sentences), default=0)
    out = np.zeros((len(sentences), max_len + 2, width), dtype=np.int64)
    for i, sent in enumerate(sentences):
        out[i, : len(sent) + 2] = words_ids([boundary[0], *sent, boundary[1]])
    return out


class ByteIds:
    """bilm-tf's ids (the functions above): `width` = `max_chars` columns per token; with
    `lowercase`, of each token lowercased (`lowercased`)."""

    boundary: Tuple[str, str] = (BOS_TOKEN, EOS_TOKEN)
    pad_id = PAD_CHAR + 1

    def __init__(self, max_chars: int, lowercase: bool = False):
        self.max_chars = self.width = max_chars
        self.lowercase = lowercase

    def texts(self, words: Sequence[str]) -> Sequence[str]:
        """The texts that the ids of `words` are made from (`words` itself unless `lowercase`):
        two words of one text have the same ids."""
        return [lowercased(w) for w in words] if self.lowercase else words

    def words_ids(self, words: Sequence[str]) -> np.ndarray:
        """Token texts -> int64 `(n_words, width)`."""
        return words_char_ids(self.texts(words), self.max_chars)

    def keys(self, words: Sequence[str]) -> List[Union[str, bytes]]:
        """Token texts -> what their ids depend on (`_key` of each of `texts`), at most
        `max_chars - 2` long: two words have the same ids exactly where their keys are equal."""
        cut, max_chars = self.max_chars - 2, self.max_chars
        return [w if len(w) <= cut else _key(w, max_chars) for w in self.texts(words)]

    def key_ids(self, keys: Sequence[Union[str, bytes]]) -> np.ndarray:
        """Keys (of `keys`) -> int64 `(n_keys, width)`, the ids of their words."""
        if not keys:
            return np.zeros((0, self.width), dtype=np.int64)
        return np.stack([_word_ids(k, self.max_chars) for k in keys])

    def batch_ids(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        """Sentences -> int64 `(n_sentences, max_len + 2, width)`, boundaries added, rows padded
        with 0."""
        if self.lowercase:
            return padded_batch(sentences, self.words_ids, self.width, self.boundary)
        return batch_char_ids(sentences, self.max_chars)


CHAR_SPECIALS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
WORD_SPECIALS = ("<oov>", "<pad>")


class CharTable:
    """ELMoForManyLangs' ids. Characters are code points looked up in `chars` (`char.dic`; `<oov>`
    where missing); a token is cut to `max_chars - 2` characters and becomes `[BOW, chars..., EOW,
    PAD...]`, where BOW is the id of `<eow>` and EOW the id of `<bow>` (EFML swaps them, in training
    and inference alike). `<bos>` / `<eos>` (around each sentence, or given literally) become `[BOW,
    its id, EOW, PAD...]`. With `words` (`word.dic`), one more column holds the word id of the cut
    token (case-sensitive, `<oov>` where missing). Every id is shifted by +1, so that 0 means "no
    token"; `width` = columns per token."""

    boundary: Tuple[str, str] = ("<bos>", "<eos>")

    def __init__(self, chars: Dict[str, int], words: Optional[Dict[str, int]], max_chars: int):
        self.chars, self.words, self.max_chars = chars, words, max_chars
        self.width = max_chars + (words is not None)
        self.pad_id = chars["<pad>"] + 1
        self._bow, self._eow, self._oov = chars["<eow>"] + 1, chars["<bow>"] + 1, chars["<oov>"]

    @classmethod
    def checked(
        cls,
        chars: Dict[str, int],
        words: Optional[Dict[str, int]],
        max_chars: int,
        n_characters: int,
        n_words: int,
        source: str,
        word_source: Optional[str] = None,
    ) -> "CharTable":
        """A table whose specials are there, with one entry per row of its embedding
        (`n_characters`, `n_words`, row 0 included: ELMoForManyLangs sizes its embeddings by the
        entries), ids indexing them; else ElmoFileError naming `source` (`word_source` for the word
        table, if other)."""
        for kind, table, rows, where, specials in (
            ("character", chars, n_characters - 1, source, CHAR_SPECIALS),
            ("word", words, n_words - 1, word_source or source, WORD_SPECIALS),
        ):
            if table is None:
                continue
            missing = [s for s in specials if s not in table]
            if missing:
                raise ElmoFileError(f"{where}: the {kind} table lacks {', '.join(missing)}")
            if len(table) != rows:
                raise ElmoFileError(
                    f"{where}: {len(table):,} {kind}s for the {rows:,} rows of the {kind} "
                    f"embedding: "
                    "the table and the weights do not belong together"
                )
            for text, i in table.items():
                if not 0 <= i < rows:
                    raise ElmoFileError(
                        f"{where}: {kind} {excerpt(text)} has id {i:,}, outside the {rows:,} rows "
                        f"of the {kind} embedding"
                    )
        return cls(chars, words, max_chars)

    def token_ids(self, text: str) -> np.ndarray:
        """One token text -> int64 `(width,)`."""
        ids = np.full(self.width, self.pad_id, dtype=np.int64)
        if text in self.boundary:
            body = [self.chars[text]]
        else:
            text = text[: self.max_chars - 2]
            body = [self.chars.get(c, self._oov) for c in text]
        ids[0] = self._bow
        ids[1 : 1 + len(body)] = np.asarray(body, dtype=np.int64) + 1
        ids[1 + len(body)] = self._eow
        if self.words is not None:
            ids[-1] = self.words.get(text, self.words["<oov>"]) + 1
        return ids

    def texts(self, words: Sequence[str]) -> Sequence[str]:
        """The texts that the ids of `words` are made from: `words` (the tables are
        case-sensitive)."""
        return words

    def words_ids(self, words: Sequence[str]) -> np.ndarray:
        """Token texts -> int64 `(n_words, width)`."""
        out = np.zeros((len(words), self.width), dtype=np.int64)
        for i, w in enumerate(words):
            if not isinstance(w, str):
                raise TypeError(f"token texts must be str, got {type(w).__name__}: {w!r}")
            out[i] = self.token_ids(w)
        return out

    def keys(self, words: Sequence[str]) -> List[str]:
        """Token texts -> what their ids depend on, at most `max_chars - 1` characters: the text
        cut as `token_ids` cuts it (one character more where the cut would read as a boundary
        token); two words have the same ids exactly where their keys are equal."""
        cut = self.max_chars - 2
        out = []
        for w in words:
            if len(w) > cut and w not in self.boundary:
                w = w[:cut] if w[:cut] not in self.boundary else w[: cut + 1]
            out.append(w)
        return out

    def key_ids(self, keys: Sequence[str]) -> np.ndarray:
        """Keys (of `keys`) -> int64 `(n_keys, width)`, the ids of their words."""
        return self.words_ids(keys)

    def batch_ids(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        """Sentences -> int64 `(n_sentences, max_len + 2, width)`, boundaries added, rows padded
        with 0."""
        return padded_batch(sentences, self.words_ids, self.width, self.boundary)

    def to_json(self) -> str:
        """`{"chars": {text: id}, "words": {text: id} or null}` (what `from_json` reads)."""
        return json.dumps(
            {"chars": self.chars, "words": self.words}, ensure_ascii=False, sort_keys=True
        )

    @classmethod
    def from_json(
        cls, text: str, max_chars: int, n_characters: int, n_words: int, source: str
    ) -> "CharTable":
        """The inverse of `to_json`, checked (see `checked`); ElmoFileError naming `source`."""
        data = parse_json(text, source, "character table")
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("chars"), dict)
            or not isinstance(data.get("words"), (dict, type(None)))
        ):
            raise ElmoFileError(
                f'{source}: expected {{"chars": {{text: id}}, "words": {{text: id}} or null}}'
            )
        for table in (data["chars"], data["words"] or {}):
            bad = next(
                (i for i in table.values() if isinstance(i, bool) or not isinstance(i, int)), None
            )
            if bad is not None:
                raise ElmoFileError(f"{source}: ids must be integers, got {excerpt(bad)}")
        if (data["words"] is None) != (n_words == 0):
            raise ElmoFileError(
                f"{source}: a word table {'is missing' if n_words else 'is given'}, but the "
                f"options "
                f"say n_words = {n_words}"
            )
        return cls.checked(data["chars"], data["words"], max_chars, n_characters, n_words, source)

    def digest(self) -> str:
        """sha256 of the tables (part of a model's fingerprint)."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()
