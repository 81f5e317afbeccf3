"""What `embed` computes per line: the biLM's layers in blocks (each from an empty token cache), the
layer asked for, in the dtype asked for; and the process settings that keep memory flat over a long
input."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Optional, Union

import numpy as np

from ..bilm import ElmoEmbedder
from ..bilm.finite import NonFiniteError, cast_finite
from ..bilm.mix import average_layers
from ..bilm.runner import long_sentence
from ..errors import ElmoConfigError
from .h5writer import Pieces


def parse_layer(spec: str, num_output_layers: int) -> Union[str, int]:
    """`all`, `top`, `average` or a layer number `0 .. n_layers` (0: the token layer)."""
    if spec in ("all", "top", "average"):
        return spec
    if spec.isascii() and spec.isdigit() and int(spec) < num_output_layers:
        return int(spec)
    raise ElmoConfigError(
        f"--layer must be all, top, average or a number from 0 to {num_output_layers - 1}, got "
        f"{spec!r}"
    )


def select_layer(layers: np.ndarray, layer: Union[str, int]) -> np.ndarray:
    """`(n_layers + 1, n_tokens, dim)` -> itself (`all`) or `(n_tokens, dim)` (`top`, `average`,
    N)."""
    if layer == "all":
        return layers
    if layer == "average":
        return average_layers(layers)  # as the component's mix "average" (doc._.elmo)
    return layers[-1 if layer == "top" else layer]


def embed_blocks(
    bilm: ElmoEmbedder,
    sentences: Iterable[tuple[str, list[str]]],
    *,
    block: int,
    layer: Union[str, int] = "all",
    batch_size: int = 64,
    dtype: str = "float32",
    on_line: Optional[Callable[[int], None]] = None,
    first_line: int = 1,
) -> Iterator[tuple[str, np.ndarray]]:
    """`(text, array)` per `(text, tokens)`: the chosen layers `(n_layers + 1, n_tokens, dim)` or
    `(n_tokens, dim)` as `dtype` (`Pieces` of them for a line of more than `256 * batch_size`
    tokens). Every `block` lines start again from an empty token cache. Vectors with NaN or infinite
    values are an error naming the line (`first_line`: the number of the first)."""
    it = iter(sentences)
    limit = long_sentence(batch_size)
    while chunk := list(islice(it, block)):
        bilm.token_cache.clear()
        short = (toks if len(toks) <= limit else [] for _, toks in chunk)
        with on_line_number(first_line, len(chunk)):
            for k, ((text, toks), layers) in enumerate(
                zip(chunk, bilm.embed_iter(short, batch_size=batch_size))
            ):
                if len(toks) > limit:
                    yield text, in_pieces(bilm, toks, layer, batch_size, dtype, first_line + k)
                else:
                    yield (
                        text,
                        cast_finite(select_layer(layers, layer), dtype, f"--dtype {dtype}", k),
                    )
                if on_line is not None:
                    on_line(len(toks))
        first_line += len(chunk)
        trim_heap()


@contextmanager
def on_line_number(first_line: int, lines: int = 1) -> Iterator[None]:
    """A NonFiniteError about sentence k of `lines` lines from `first_line` -> one naming line
    `first_line + k` of the input (the lines, where it names no sentence)."""
    try:
        yield
    except NonFiniteError as err:
        sentence = 0 if lines == 1 else err.sentence
        where = (
            f"lines {first_line} to {first_line + lines - 1}"
            if sentence is None
            else f"line {first_line + sentence}"
        )
        raise NonFiniteError(f"{where} of the input: {err}", sentence) from None


def in_pieces(
    bilm: ElmoEmbedder,
    tokens: list[str],
    layer: Union[str, int],
    batch_size: int,
    dtype: str,
    line: int,
) -> Pieces:
    """A line (number `line`) longer than `long_sentence(batch_size)` tokens: its chosen layers as
    consecutive pieces along the token axis, computed as they are written (memory bounded by
    batch_size, not by the line)."""
    if not bilm.state_policy.allows_pieces:
        raise ElmoConfigError(
            f"a line of {len(tokens)} tokens, more than 256 x --batch-size {batch_size}: under "
            "--state carry a line is computed whole; give a larger --batch-size, or --state warm "
            "or zero (which compute long lines in pieces)"
        )
    shape = (bilm.num_output_layers, len(tokens), bilm.output_dim)
    pieces = (
        cast_finite(select_layer(p, layer), dtype, f"--dtype {dtype}")
        for p in named_line(bilm.embed_long(tokens, batch_size), line)
    )
    if layer == "all":
        return Pieces(shape, np.dtype(dtype), 1, long_sentence(batch_size), pieces)
    return Pieces(shape[1:], np.dtype(dtype), 0, long_sentence(batch_size), pieces)


def named_line(pieces: Iterator[np.ndarray], line: int) -> Iterator[np.ndarray]:
    """`pieces`, a NonFiniteError naming line `line`."""
    with on_line_number(line):
        yield from pieces


def bound_kernel_cache(capacity: int = 16) -> None:
    """Keep at most `capacity` oneDNN kernels (default 1024), unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    says otherwise. oneDNN keeps one per convolution shape, and a long file brings ever new shapes
    (words per encoder call, longest word), so an unbounded cache grows with the file. oneDNN reads
    the setting when it makes its first kernel, so call this before the biLM runs."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc's malloc_trim; a no-op elsewhere): tensors of
    ever-changing shapes otherwise leave the heap fragmented, and RSS creeps up over a long file."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
