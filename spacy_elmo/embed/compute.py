"""What `embed` computes per line: the biLM's layers in blocks (each from an empty token cache), the layer
asked for, in the dtype asked for; and the process settings that keep memory flat over a long input."""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

import numpy as np

from ..bilm import ElmoEmbedder
from ..errors import ElmoConfigError


def parse_layer(spec: str, num_output_layers: int) -> str | int:
    """`all`, `top`, `average` or a layer number `0 .. n_layers` (0: the token layer)."""
    if spec in ("all", "top", "average"):
        return spec
    if spec.isdigit() and int(spec) < num_output_layers:
        return int(spec)
    raise ElmoConfigError(f"--layer must be all, top, average or a number from 0 to {num_output_layers - 1}, got {spec!r}")


def select_layer(layers: np.ndarray, layer: str | int) -> np.ndarray:
    """`(n_layers + 1, n_tokens, dim)` -> itself (`all`) or `(n_tokens, dim)` (`top`, `average`, N)."""
    if layer == "all":
        return layers
    if layer == "average":
        return layers.mean(axis=0)
    return layers[-1 if layer == "top" else layer]


def embed_blocks(bilm: ElmoEmbedder, sentences: Iterable[tuple[str, list[str]]], *, block: int, layer: str | int = "all",
                 batch_size: int = 64, dtype: str = "float32",
                 on_line: Callable[[int], None] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """`(text, array)` per `(text, tokens)`: the chosen layers `(n_layers + 1, n_tokens, dim)` or
    `(n_tokens, dim)` as `dtype`. Every `block` lines start again from an empty token cache."""
    it = iter(sentences)
    while chunk := list(islice(it, block)):
        bilm.token_cache.clear()
        for (text, toks), layers in zip(chunk, bilm.embed_iter((toks for _, toks in chunk), batch_size=batch_size)):
            yield text, select_layer(layers, layer).astype(dtype, copy=False)
            if on_line is not None:
                on_line(len(toks))
        trim_heap()


def bound_kernel_cache(capacity: int = 16) -> None:
    """Keep at most `capacity` oneDNN kernels (default 1024), unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    says otherwise. oneDNN keeps one per convolution shape, and a long file brings ever new shapes
    (words per encoder call, longest word), so an unbounded cache grows with the file. oneDNN reads the setting
    when it makes its first kernel, so call this before the biLM runs."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc's malloc_trim; a no-op elsewhere): tensors of
    ever-changing shapes otherwise leave the heap fragmented, and RSS creeps up over a long file."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
