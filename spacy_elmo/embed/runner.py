"""`spacy_elmo.embed.run`: one `embed` run, whoever writes it (this process, into one file or
shards; one shard of N; a pool of Ray actors), from its `EmbedOptions` to its `EmbedResult`."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..bilm.threads import torch_threads
from .compute import bound_kernel_cache
from .job import embed_sharded, embed_single, first_missing_line, new_job
from .options import EmbedOptions

# (lines embedded, those kept from before included; the input's)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EmbedResult:
    """What a run did: `output`, the input's `lines`, `lines_done` (complete before the run, kept),
    `lines_run` and `tokens` (embedded by the run), in `seconds`; `wrote`: False where the output
    was complete already. `source`: the biLM used (`ElmoEmbedder.source`); `precision` of its
    products and why (`ElmoEmbedder.precision_reason`); `missing`: the shards of `output` not
    written yet (after `--shard I/N`)."""

    output: Path
    lines: int
    lines_done: int
    lines_run: int
    tokens: int
    seconds: float
    wrote: bool
    source: str
    precision: str
    precision_reason: str
    missing: tuple[int, ...] = ()


class EmbedInterrupted(KeyboardInterrupt):
    """A run stopped by KeyboardInterrupt; `resume_from`: for a single-file output, the index (from
    0) of the first line that a run with `resume` computes again (its complete parts are kept); None
    for shards (the same options redo the missing ones) and where `starts_over`: the run cannot be
    continued (`state` carry), and the same options start it again."""

    def __init__(self, resume_from: Optional[int], starts_over: bool = False):
        super().__init__(resume_from)
        self.resume_from, self.starts_over = resume_from, starts_over


def run(options: EmbedOptions, progress: Optional[Progress] = None) -> EmbedResult:
    """Embed `options.input_path` into `options.output`: one hdf5 file; with `shards` N a directory
    of N shard files and a manifest (only shard I with `shard` "I/N"); with `engine` "ray" those
    shards written by Ray actors. Streams and keeps memory flat, writes every file whole, and
    continues an interrupted output (`resume`, or the same options for shards) to the same bits.
    `progress(done, total)` follows the lines embedded (those kept included). Raises an ElmoError
    (ElmoConfigError, ElmoFileError, ElmoResumeError, ElmoResourceError) in one line, or
    EmbedInterrupted."""
    bound_kernel_cache()
    options = options.check()
    ray = options.engine == "ray"
    # with Ray, the weights' fingerprint as the actors will see it, on their threads (see
    # `ray_engine.embed_job`)
    with torch_threads((options.threads_per_worker or 1) if ray else options.threads):
        bilm, job = new_job(options)
        total, source, tokens, embedded = job.settings["lines"], bilm.source, 0, 0
        precision = (bilm.precision, bilm.precision_reason)
        resumable = bilm.state_policy.allows_resume

        # a line embedded here, or a shard by an actor
        def on_lines(n_tokens: int, lines: int = 1) -> None:
            nonlocal tokens, embedded
            tokens, embedded = tokens + n_tokens, embedded + lines
            if progress is not None:
                progress(job.lines_done + embedded, total)

        job.on_line = on_lines
        start = time.perf_counter()
        try:
            if ray:
                from .ray_engine import embed_job

                del bilm  # each actor loads its own
                wrote = embed_job(
                    job,
                    options.weights,
                    address=options.address,
                    workers=options.workers,
                    threads_per_worker=options.threads_per_worker or 1,
                    gpus_per_worker=options.gpus_per_worker or 0.0,
                    runtime_env=options.runtime_env,
                    on_shard=lambda lines, n_tokens: on_lines(n_tokens, lines),
                )
            elif options.shards:
                wrote = embed_sharded(bilm, job, options.only_shard())
            else:
                wrote = embed_single(bilm, job, options.resume)
        except KeyboardInterrupt:
            if not resumable:
                raise EmbedInterrupted(None, starts_over=True) from None
            raise EmbedInterrupted(None if options.shards else first_missing_line(job)) from None
    return EmbedResult(
        options.output,
        total,
        job.lines_done,
        job.lines_run,
        tokens,
        time.perf_counter() - start,
        wrote,
        source,
        *precision,
        job.missing,
    )


def embed_with_ray(
    input_path: Union[str, os.PathLike],
    output: Union[str, os.PathLike],
    weights: str,
    *,
    shards: int,
    **settings: Any,
) -> EmbedResult:
    """Deprecated: `run(EmbedOptions(input_path, output, weights, shards=shards, engine="ray",
    **settings))`, whose result this returns."""
    warnings.warn(
        "embed_with_ray is deprecated: use spacy_elmo.embed.run(EmbedOptions(..., engine='ray'))",
        DeprecationWarning,
        stacklevel=2,
    )
    return run(
        EmbedOptions(
            Path(input_path), Path(output), weights, shards=shards, engine="ray", **settings
        )
    )
