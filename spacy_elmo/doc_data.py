"""The ELMo data stored on each Doc (the getters behind `doc._.elmo` and friends read it:
`extensions`).

One `ElmoDocData` per Doc, in `doc._.elmo_data`. It holds either all biLM layers
`(n_layers + 1, n_tokens, 2 * projection_dim)` or only their fixed mix `(n_tokens, 2 *
projection_dim)`, as float32 or float16 (`doc._.elmo`, `token._.elmo` and `span._.elmo` give that
dtype; `doc._.elmo_layers` gives float32); whitespace tokens hold zero vectors. It also holds the
character span and text hash (spaCy's `ORTH`) of each token it was computed for, so it follows the
Doc through `doc.retokenize()` (`merge_entities`, `merge_noun_chunks`, ...): when the Doc's tokens
are no longer those, the data is realigned from the tokens it was computed for (the same vectors
however often the Doc was read in between), by one rule: a merged token gets the mean of its parts'
vectors (its whitespace parts left out), each piece of a split token gets the vector of the token it
came from, a new whitespace token zeros. Data that fits no rule (another text, even one with the
same token offsets, or data stored without its tokens' spans) is an error, never a shifted vector.
Means are summed in float64, and a mix beyond the stored dtype's range is an error, never an
infinity. Stored data read back is checked (types, shapes, finite values) against the Doc. The
data object is registered with srsly's msgpack, so `Doc.to_bytes`, `DocBin(store_user_data=True)`
and `nlp.pipe(n_process=2)` carry it: the mix only, unless `save_layers` (the layers are
`n_layers + 1` times its size).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field, fields
from typing import List, Optional, Tuple, Union

import numpy as np
import srsly
from spacy.attrs import IDX, LENGTH, ORTH
from spacy.strings import get_string_id
from spacy.tokens import Doc, Span, Token

from .bilm.finite import cast_finite
from .bilm.mix import mix_layers
from .errors import ElmoFileError

MSGPACK_KEY = "__spacy_elmo_doc_data__"
# the dtypes the layers and the mix are stored in (the component's `store`)
STORE_DTYPES = {"float16": np.float16, "float32": np.float32}


def token_spans(doc: Union[Doc, Span]) -> np.ndarray:
    """int32 `(n_tokens, 2)`: each token's character start and end in `doc.text` (a Span's: in its
    Doc's; spaCy's offsets are int32)."""
    spans = doc.to_array([IDX, LENGTH]).astype(np.int32).reshape(len(doc), 2)
    spans[:, 1] += spans[:, 0]
    return spans


def token_orths(doc: Union[Doc, Span]) -> np.ndarray:
    """uint64 `(n_tokens,)`: each token's text hash (spaCy's `ORTH`)."""
    return doc.to_array([ORTH]).astype(np.uint64).reshape(len(doc))


@dataclass
class ElmoDocData:
    """`layers` `(n_layers + 1, n_tokens, width)` or None; `mixed` `(n_tokens, width)` or None (one
    is set at least; with both, `mixed` is their mix); `mix_weights` `(n_layers + 1,)` float32: the
    weights of the fixed mix that `doc._.elmo` reports. `spans` int32 `(n_tokens, 2)`: the tokens'
    character spans it was computed for (None in data stored before they were kept: it fits no
    Doc). `save_layers`: whether a stored Doc keeps `layers` (else only the mix is written).
    `orths` uint64 `(n_tokens,)`: the tokens' text hashes (None in data stored before they were
    kept: checked by its spans only). Its arrays are read-only, in copies too."""

    layers: Optional[np.ndarray]
    mixed: Optional[np.ndarray]
    mix_weights: np.ndarray
    spans: Optional[np.ndarray] = None
    save_layers: bool = field(default=False, compare=False)
    orths: Optional[np.ndarray] = None
    _mix_cache: Optional[np.ndarray] = field(default=None, init=False, repr=False, compare=False)
    # the data realigned to the Doc's current tokens (`elmo_data`), made from this data
    _realigned: Optional["ElmoDocData"] = field(default=None, init=False, repr=False, compare=False)
    # the Docs whose text was found to be the one this data was computed for (held weakly)
    _text_checked: Optional[weakref.WeakSet] = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for value in (self.layers, self.mixed, self.mix_weights, self.spans, self.orths):
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def __deepcopy__(self, memo) -> "ElmoDocData":
        """A copy of the stored data (read-only, as this; caches start empty)."""
        return ElmoDocData(
            **{f.name: copy.deepcopy(getattr(self, f.name), memo) for f in fields(self) if f.init}
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_text_checked": None}

    @property
    def n_tokens(self) -> int:
        return self.layers.shape[1] if self.layers is not None else self.mixed.shape[0]

    @property
    def width(self) -> int:
        return self.layers.shape[2] if self.layers is not None else self.mixed.shape[1]

    def mix(self, what: str = "doc._.elmo") -> np.ndarray:
        """The fixed mix `(n_tokens, width)` in the stored dtype (summed in float32, computed once
        per Doc); NonFiniteError `{what}: ...` where a sum lies beyond float32's or the stored
        dtype's range."""
        if self._mix_cache is None:
            if self.mixed is not None:
                out = self.mixed
            else:
                summed = mix_layers(self.mix_weights, self.layers)
                out = cast_finite(summed, self.layers.dtype, what)
            out.setflags(write=False)
            self._mix_cache = out
        return self._mix_cache

    def fits(self, doc: Doc) -> bool:
        """Whether the data was computed for exactly `doc`'s tokens (from the Doc's own arrays:
        `fits_span(doc[:])` reads them through a Span, several times slower per read of
        `doc._.elmo`)."""
        if self.n_tokens != len(doc) or self.spans is None:
            return False
        fits = np.array_equal(self.spans, token_spans(doc)) and (
            self.orths is None or np.array_equal(self.orths, token_orths(doc))
        )
        if fits:
            self._remember_text(doc)
        return fits

    def fits_text(self, doc: Doc) -> bool:
        """Whether `doc.text` holds, at each token span, the text this data was computed for
        (O(len(doc)) once per Doc; where the texts' hashes were not kept, whether it is long enough
        for the spans)."""
        checked = self._text_checked
        return (checked is not None and doc in checked) or self._holds_texts(doc, doc.text)

    def _holds_texts(self, doc: Doc, text: str) -> bool:
        """`fits_text` of `doc`, its text `text` (spaCy builds `doc.text` anew on each read)."""
        spans = self.spans
        if len(spans) and len(text) < spans[-1, 1]:
            return False
        if self.orths is not None and any(
            get_string_id(text[a:b]) != orth
            for (a, b), orth in zip(spans.tolist(), self.orths.tolist())
        ):
            return False
        self._remember_text(doc)
        return True

    def _remember_text(self, doc: Doc) -> None:
        """Remember that `doc`'s text is the one this data was computed for."""
        if self._text_checked is None:
            self._text_checked = weakref.WeakSet()
        self._text_checked.add(doc)

    def fits_token(self, token: Token) -> bool:
        """Whether row `token.i` was computed for `token` (O(1))."""
        if self.n_tokens != len(token.doc) or self.spans is None:
            return False
        i = token.i
        return (
            self.spans[i, 0] == token.idx
            and self.spans[i, 1] == token.idx + len(token)
            and (self.orths is None or self.orths[i] == token.orth)
        )

    def fits_span(self, span: Span) -> bool:
        """Whether the rows of `span` were computed for its tokens (O(len(span)))."""
        if self.n_tokens != len(span.doc) or self.spans is None:
            return False
        rows = slice(span.start, span.end)
        return np.array_equal(self.spans[rows], token_spans(span)) and (
            self.orths is None or np.array_equal(self.orths[rows], token_orths(span))
        )

    def fitted(self, part: Union[Token, Span]) -> Optional["ElmoDocData"]:
        """This data, or its copy realigned last, where it was computed for the tokens of `part` (a
        Token: O(1); a Span: O(len(span))); None where neither is (`elmo_data` realigns)."""
        check = self.fits_token if isinstance(part, Token) else self.fits_span
        if check(part) and self.fits_text(part.doc):
            return self
        realigned = self._realigned
        return realigned if realigned is not None and realigned.fitted(part) else None

    def realigned(self, doc: Doc) -> "ElmoDocData":
        """The data for `doc`'s tokens, which cover the same text in other token boundaries (see the
        module's rule), made from this data once per set of tokens; ValueError where they do not."""
        if self._realigned is not None and self._realigned.fits(doc):
            return self._realigned
        if self.spans is None:
            raise ValueError(
                "it holds no character spans of its tokens (stored by an earlier spacy_elmo, or "
                "made without `spans`), so it cannot be checked against this Doc"
            )
        new, old, text = token_spans(doc), self.spans, doc.text
        if not self._holds_texts(doc, text):
            raise ValueError("it was computed for another text")
        # first old token ending after the start
        first = np.searchsorted(old[:, 1], new[:, 0], side="right")
        # first old token starting at/after the end
        stop = np.searchsorted(old[:, 0], new[:, 1], side="left")
        gaps = stop <= first  # in no old token: whitespace between them, else another text
        if any(not text[a:b].isspace() for a, b in new[gaps].tolist()):
            raise ValueError("it was computed for another text")
        is_space = np.array([text[a:b].isspace() for a, b in old.tolist()], dtype=bool)
        # zeros for whitespace: between old tokens (a gap) or split out of one
        blank = gaps | np.array([text[a:b].isspace() for a, b in new.tolist()], dtype=bool)
        rows = [
            [] if space else self._parts(i, j, is_space)
            for i, j, space in zip(first.tolist(), stop.tolist(), blank.tolist())
        ]
        # the mix of a new token is the mean of its parts' mixes, as a stored Doc read back gets it
        self._realigned = ElmoDocData(
            layers=None if self.layers is None else row_means(self.layers, rows),
            mixed=row_means(self.mix(), rows),
            mix_weights=self.mix_weights,
            spans=new,
            save_layers=self.save_layers,
            orths=token_orths(doc),
        )
        self._realigned._remember_text(doc)
        return self._realigned

    @staticmethod
    def _parts(first: int, stop: int, is_space: np.ndarray) -> List[int]:
        """The old rows a new token takes the mean of: its non-whitespace parts (all, if it has
        none)."""
        rows = [i for i in range(first, stop) if not is_space[i]]
        return rows or list(range(first, stop))

    def to_dict(self) -> dict:
        """What a stored Doc keeps: the layers where `save_layers`, else the mix."""
        kept = self.save_layers or self.layers is None
        return {
            "layers": self.layers if kept else None,
            "mixed": self.mixed if kept else self.mix(),
            "weights": self.mix_weights,
            "spans": self.spans,
            "orths": self.orths,
        }

    @classmethod
    def from_dict(cls, msg: dict) -> "ElmoDocData":
        """The data of a stored Doc, checked: ElmoFileError naming what is wrong."""
        try:
            return cls._checked(msg)
        except ValueError as err:
            raise ElmoFileError(f"stored ELMo data (doc._.elmo_data) is invalid: {err}") from None

    @classmethod
    def _checked(cls, msg: dict) -> "ElmoDocData":
        if not isinstance(msg, dict) or not {"layers", "mixed", "weights"} <= set(msg):
            raise ValueError("not a mapping with 'layers', 'mixed' and 'weights'")
        layers = _float_array(msg["layers"], "layers", 3)
        mixed = _float_array(msg["mixed"], "mixed", 2)
        if layers is None and mixed is None:
            raise ValueError("neither 'layers' nor 'mixed' holds an array")
        n_layers = None if layers is None else layers.shape[0]
        n_tokens, width = mixed.shape if layers is None else layers.shape[1:]
        if mixed is not None and mixed.shape != (n_tokens, width):
            raise ValueError(f"'mixed' has shape {mixed.shape}, 'layers' {layers.shape}")
        weights = _float_array(msg["weights"], "weights", 1, dtypes=None)
        if weights is None or (n_layers is not None and weights.shape != (n_layers,)):
            raise ValueError(f"'weights' must be {n_layers or 'n'} mix weights, one per layer")
        spans = msg.get("spans")
        if spans is not None:
            spans = np.asarray(spans)
            if (
                spans.dtype.kind not in "iu"
                or spans.shape != (n_tokens, 2)
                or (spans.size and not (0 <= spans.min() and spans.max() < 2**31))
            ):
                raise ValueError(
                    f"'spans' must be {n_tokens} integer (start, end) pairs within int32's range"
                )
            spans = spans.astype(np.int32)
        orths = msg.get("orths")
        if orths is not None:
            orths = np.asarray(orths)
            if orths.dtype != np.uint64 or orths.shape != (n_tokens,):
                raise ValueError(f"'orths' must be {n_tokens} uint64 text hashes")
        return cls(
            layers=layers,
            mixed=mixed,
            mix_weights=weights.astype(np.float32),
            spans=spans,
            save_layers=layers is not None,
            orths=orths,
        )


def row_means(array: np.ndarray, rows: List[List[int]]) -> np.ndarray:
    """`array` `(..., n_old, width)` -> `(..., len(rows), width)` in its dtype: the mean of each
    list of old rows, summed in float64 (a float32 sum can overflow where the mean does not), zeros
    for an empty list."""
    old = np.moveaxis(array, -2, 0)
    out = np.zeros((len(rows),) + old.shape[1:], dtype=array.dtype)
    for k, r in enumerate(rows):
        if r:
            out[k] = old[r].astype(np.float64).mean(axis=0)
    return np.ascontiguousarray(np.moveaxis(out, 0, -2))


def _float_array(
    value, name: str, ndim: int, dtypes: Optional[Tuple[str, ...]] = tuple(STORE_DTYPES)
) -> Optional[np.ndarray]:
    """`value` where it is None or a finite float array of `ndim` dimensions, of one of `dtypes`
    (None: any float); else ValueError naming it `name`."""
    if value is None:
        return None
    if (
        not isinstance(value, np.ndarray)
        or value.dtype.kind != "f"
        or value.ndim != ndim
        or (dtypes and value.dtype.name not in dtypes)
    ):
        kind = (
            f"{value.dtype} array of shape {value.shape}"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        what = " or ".join(dtypes or ("float",))
        raise ValueError(f"'{name}' must be a {ndim}-d {what} array, got a {kind}")
    if not np.isfinite(value).all():
        raise ValueError(f"'{name}' holds non-finite values (NaN or infinity)")
    return value


def stored_data(doc: Doc) -> Optional[ElmoDocData]:
    """`doc._.elmo_data`, None before `elmo` ran. A Doc read back before `spacy_elmo` was
    imported holds msgpack's plain dict of it (no decoder yet): decoded here and kept."""
    data = doc._.elmo_data
    if data is None or isinstance(data, ElmoDocData):
        return data
    if not (isinstance(data, dict) and MSGPACK_KEY in data):
        raise ElmoFileError(
            f"doc._.elmo_data holds a {type(data).__name__}, not ELMo data; run the 'elmo' "
            "component on the Doc again"
        )
    doc._.elmo_data = data = ElmoDocData.from_dict(data[MSGPACK_KEY])
    return data


def elmo_data(doc: Doc) -> Optional[ElmoDocData]:
    """The data of `doc._.elmo_data` fitted to `doc`'s current tokens (realigned after a
    retokenization, see the module; `doc._.elmo_data` itself stays as computed); None before
    `elmo` ran; ElmoFileError where it cannot belong to this Doc."""
    data = stored_data(doc)
    if data is None or data.fits(doc):
        return data
    try:
        return data.realigned(doc)
    except ValueError as err:
        raise ElmoFileError(
            f"doc._.elmo_data does not fit this Doc ({len(doc)} tokens): {err}; run the "
            "'elmo' component on it again"
        ) from None


@srsly.msgpack_encoders("spacy_elmo_doc_data")
def serialize_elmo_data(obj, chain=None):
    if isinstance(obj, ElmoDocData):
        return {MSGPACK_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


@srsly.msgpack_decoders("spacy_elmo_doc_data")
def deserialize_elmo_data(obj, chain=None):
    if isinstance(obj, dict) and MSGPACK_KEY in obj:
        return ElmoDocData.from_dict(obj[MSGPACK_KEY])
    return obj if chain is None else chain(obj)
