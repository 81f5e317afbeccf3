"""Where the biLM runs: a torch device named by the user, checked before anything moves there."""

from __future__ import annotations

from functools import lru_cache
from typing import Union

import torch

from ..errors import ElmoConfigError


def check_device(device: Union[str, torch.device]) -> torch.device:
    """ "cpu", "cuda", "cuda:N" (or a torch.device) -> torch.device; ElmoConfigError for anything
    else, or for a CUDA device this machine does not have (naming what it has)."""
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise ElmoConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if chosen.type == "cpu":
        return chosen
    if chosen.type != "cuda":
        raise ElmoConfigError(f"device {str(device)!r}: the biLM runs on 'cpu' or 'cuda' devices")
    if not torch.cuda.is_available():
        raise ElmoConfigError(
            f"device {str(device)!r}: this torch ({torch.__version__}) sees no CUDA device; "
            f"install "
            "a CUDA build of torch on a machine with an NVIDIA GPU, or use device 'cpu'"
        )
    if chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise ElmoConfigError(
            f"device {str(device)!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    return chosen


@lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The CPU's feature flags as Linux reports them (x86 `flags`, Arm `Features`); empty
    elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()
