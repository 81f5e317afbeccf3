"""The optimizer's side of a training step: the optimizer of `training.optimizer`, gradients summed
across processes, the check that weights are still finite, and the error of a run that diverged."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from ..errors import ElmoConfigError


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adagrad":  # bilm-tf: Adagrad, lr 0.2, accumulators starting at 1.0
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=1.0)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def all_reduce_gradients(params: List[torch.nn.Parameter], world: int) -> None:
    """Sum every gradient across processes (missing ones count as zeros, on one process too)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if world > 1:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


def non_finite(state: Dict[str, torch.Tensor]) -> Optional[str]:
    """The name of the first floating-point tensor of `state` that holds NaN or infinity, or
    None."""
    return next(
        (
            name
            for name, value in state.items()
            if value.is_floating_point() and not bool(torch.isfinite(value).all())
        ),
        None,
    )


def diverged(step: int, what: str, saved_step: Optional[int], t: Dict[str, Any]) -> ElmoConfigError:
    """The error that stops a run whose `what` became NaN or infinite at `step` (nothing of it is
    saved; `saved_step`: its last checkpoint's; `t`: the config's `training` section)."""
    kept = (
        f"the last checkpoint (step {saved_step}) is kept"
        if saved_step is not None
        else "no checkpoint was written"
    )
    return ElmoConfigError(
        f"pretrain diverged at step {step}: {what} is not finite (NaN or infinity); {kept} and "
        f"no model is saved. Train again with a lower training.learning_rate (now "
        f"{t['learning_rate']:g}) or training.grad_clip (now {t['grad_clip']:g}); "
        f"--resume keeps a run's settings"
    )
