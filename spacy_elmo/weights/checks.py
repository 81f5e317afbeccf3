"""The checks the weight formats share, each one ElmoFileError naming the file: float dtypes, every
value stored (no expanded view), finite values, and a state dict against the network it fills (bytes
enough for the parameters its options imply, names, dtypes, shapes)."""

from __future__ import annotations

from typing import Dict

import torch

from ..bilm.finite import check_finite
from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from ..errors import ElmoFileError

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

__all__ = [
    "FLOAT_DTYPES",
    "check_enough_bytes",
    "check_finite",
    "check_float",
    "check_matches",
    "check_network_finite",
    "check_stored",
]


def check_float(name: str, tensor: torch.Tensor, source: str) -> None:
    """`tensor` is of a float dtype (`FLOAT_DTYPES`)."""
    if tensor.dtype not in FLOAT_DTYPES:
        raise ElmoFileError(f"{source}: '{name}' is a {tensor.dtype} tensor; weights must be float")


def check_stored(name: str, tensor: torch.Tensor, source: str) -> None:
    """`tensor` stores every value it has: not a view that repeats them (stride 0), which copied
    would be as large as its shape, not as its file."""
    stored = tensor.untyped_storage().nbytes() // tensor.element_size()
    if stored < tensor.numel():
        raise ElmoFileError(
            f"{source}: tensor '{name}' of shape {tuple(tensor.shape)} stores {stored:,} of its "
            f"{tensor.numel():,} values (an expanded view); weight files store every value"
        )


def check_enough_bytes(state_dict: Dict[str, torch.Tensor], opts: BiLMOptions, source: str) -> None:
    """The state dict stores at least 2 bytes (float16) per parameter `opts` imply (tensors that
    view one storage count it once), so that sizes the weights do not have allocate nothing."""
    stored = sum(
        {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in state_dict.values()
        }.values()
    )
    if stored < 2 * opts.n_parameters:
        raise ElmoFileError(
            f"{source}: stores {stored:,} bytes of weights, too few for the {opts.n_parameters:,} "
            "parameters its options imply; the options and the weights do not belong together"
        )


def check_matches(
    state_dict: Dict[str, torch.Tensor], own: Dict[str, torch.Tensor], source: str
) -> None:
    """`state_dict` has the names of the network's state dict `own`, float tensors of their
    shapes."""
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ElmoFileError(
            f"{source}: tensors missing {missing[:5]} / unexpected {unexpected[:5]}"
        )
    for name, tensor in state_dict.items():
        check_float(name, tensor, source)
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise ElmoFileError(
                f"{source}: tensor '{name}' has shape {tuple(tensor.shape)} but the options imply "
                f"{tuple(own[name].shape)}"
            )


def check_network_finite(bilm: BiLM, source: str) -> None:
    """Every tensor of the network finite, after the cast to its dtype."""
    for name, tensor in bilm.state_dict().items():
        check_finite(tensor, source, f"'{name}' as {tensor.dtype}".replace("torch.", ""))
