"""How far a run has come: the position saved in checkpoints, the progress bar, and what each
report records in `metrics.jsonl` and prints."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

from tqdm import tqdm

from .corpus import Position


@dataclass
class Progress:
    """Everything about how far training has come (saved in checkpoints)."""

    step: int = 0
    epoch: int = 0
    file: int = 0
    batch: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    last_eval_seconds: float = 0.0
    # the training loss of the steps since the last report, summed over them (the next report's)
    loss_sum: float = 0.0
    loss_steps: int = 0

    @property
    def position(self) -> Position:
        return Position(self.epoch, self.file, self.batch)

    @property
    def epochs_started(self) -> int:
        """Epochs begun, the one under way included (`epoch` is the next batch's: at the start of
        an epoch, that epoch has not begun)."""
        return self.epoch + (self.file > 0 or self.batch > 0)

    def summary(self) -> Dict[str, Any]:
        """How far the run came, as `training.json` records it."""
        return {
            "steps": self.step,
            "epochs_started": self.epochs_started,
            "tokens": self.tokens,
            "train_minutes": self.train_seconds / 60,
            "tokens_per_s": self.tokens / max(self.train_seconds, 1e-9),
        }


class TrainingBar:
    """The run's progress bar: steps out of `max_steps`, or, given a `time_budget` in seconds (a
    run without a step limit), training seconds out of the budget."""

    def __init__(
        self,
        progress: Progress,
        max_steps: Optional[int],
        max_seconds: float,
        loss_softmax: str,
        enabled: bool,
    ):
        # without a step limit, a time limit (`max_seconds`) is the bar's total
        timed = max_steps is None and math.isfinite(max_seconds)
        self.time_budget = max_seconds if timed else None
        self.label = " (sampled)" if loss_softmax == "sampled" else ""
        self.bar = tqdm(
            total=max_seconds if timed else max_steps,
            initial=progress.train_seconds if timed else progress.step,
            unit="s" if timed else "step",
            disable=not enabled,
            dynamic_ncols=True,
            bar_format="{desc}{percentage:3.0f}%|{bar}| [{elapsed} wall{postfix}]"
            if timed
            else None,
        )

    def update(self, p: Progress, step_loss: float) -> None:
        """Advance by the step just taken, whose mean loss per predicted token is `step_loss`."""
        if self.time_budget is not None:
            budget = self.time_budget
            self.bar.update(min(p.train_seconds, budget) - self.bar.n)
            self.bar.set_description(
                f"step {p.step}, {tqdm.format_interval(p.train_seconds)} / "
                f"{tqdm.format_interval(budget)} of the time budget, "
                f"{tqdm.format_interval(max(budget - p.train_seconds, 0))} left",
                refresh=False,
            )
        else:
            self.bar.update(1)
        self.bar.set_postfix(
            {
                f"loss{self.label}": f"{step_loss:.3f}",
                f"ppl{self.label}": f"{math.exp(min(step_loss, 50)):.0f}",
                "tok_s": f"{p.tokens / p.train_seconds:.0f}",
                "epoch": p.epoch,
            },
            refresh=False,
        )

    def close(self) -> None:
        self.bar.close()


def metrics_record(
    p: Progress,
    train_loss: float,
    loss_softmax: str,
    dev: Optional[Dict[str, Any]],
    eval_start: float,
) -> Dict[str, Any]:
    """One line of the learning curve: where training stands, its mean loss since the last report
    and which softmax's it is (`heads.train_loss_softmax`: "sampled" or "exact"), the dev
    perplexities (or None), and the seconds since `eval_start` (a `time.perf_counter()`)."""
    return {
        "step": p.step,
        "epoch": p.epoch,
        "tokens": p.tokens,
        "train_minutes": p.train_seconds / 60,
        "train_loss": train_loss,
        "train_loss_softmax": loss_softmax,
        "tokens_per_s": p.tokens / max(p.train_seconds, 1e-9),
        "dev": dev,
        "eval_seconds": time.perf_counter() - eval_start,
    }


def report_line(record: Dict[str, Any]) -> str:
    """What a report prints of its `metrics_record`."""
    dev = record["dev"]
    dev_text = (
        (
            f"dev ppl fwd {dev['forward']:.1f} bwd {dev['backward']:.1f} mean {dev['mean']:.1f} "
            f"({dev['policy']}, {record['eval_seconds']:.0f}s)"
        )
        if dev
        else "no dev set"
    )
    sampled = " (sampled softmax)" if record.get("train_loss_softmax") == "sampled" else ""
    return (
        f"step {record['step']} epoch {record['epoch']} {record['train_minutes']:.1f} min: "
        f"train loss{sampled} {record['train_loss']:.3f}; {dev_text}"
    )
