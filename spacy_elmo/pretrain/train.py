"""The training loop of `python -m spacy_elmo pretrain`, read top to bottom.

One step: a batch of both directions (see `corpus`) -> summed NLL -> loss = mean NLL over the
predicted tokens of both directions (the mean of the two LMs' losses) on all processes together
-> gradients summed across processes (torch.distributed, gloo on CPU) -> clip -> optimizer step.
Under the "stream" scheme the LSTM state at the end of each window is carried into the next.

Checkpoints hold the weights, the optimizer, the data position, the carried states and the random
generators, so a resumed run ends with the same weights as an uninterrupted one (bit for bit on
CPU); each is published at once, whole (see `checkpoint`). `corpus.json` and `dev.json` record the
sha256 of every training and dev file at the start, so that a resumed run refuses a corpus edited
since; the corpus paths are recorded absolute, so a run resumes from any working directory. A new
run (not `resume`) refuses a directory that holds an earlier run's checkpoint or model, and any run
one that another run is writing (see `lock`).

What is trained is built in `build`; the optimizer and gradients are in `optim`; the progress bar
and the reports' records in `progress`; the run's files in `outputs`; its end in `final`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Collection, Dict, Iterator, Optional, Tuple

import torch
import torch.distributed as dist
from thinc.api import Config
from tqdm import tqdm

from ..bilm import LSTMState
from ..bilm.device import check_device
from ..bilm.precision import resolve_precision
from ..errors import ElmoFileError
from . import checkpoint
from .batches import Batch
from .build import config_to_train, initial_bilm, initial_head, starting_bilm, training_vocab
from .config import model_policy, training_precision
from .corpus import DevSet, Position, TrainingCorpus, corpus_tokenizer, load_dev
from .final import kept_model, save_final
from .heads import train_loss_softmax
from .interrupt import deferred_interrupt
from .lm import BiLanguageModel, dev_nll, perplexities
from .lock import RunLock
from .optim import all_reduce_gradients, diverged, make_optimizer, non_finite
from .outputs import (
    CHECKPOINT_DIR,
    METRICS_FILE,
    append_metrics,
    check_new_run,
    forget_metrics_after,
    recorded_options,
    resolve_init,
    run_digests,
    start_new_run,
    with_absolute_corpus,
)
from .progress import Progress, TrainingBar, metrics_record, report_line

# the dropout seed of rank r > 0 is the run's seed + r x this (far from seed + 1 + r, the samplers')
RANK_SEED_STRIDE = 7919

__all__ = ["Progress", "Trainer", "all_reduce_gradients", "make_optimizer", "non_finite", "train"]


class Trainer:
    """Builds everything from the config, then `run()`s the loop. `rank` / `world` come from
    torch.distributed when it is initialized (torchrun); rank 0 alone writes shared files. `given`:
    the dotted settings the command line set (under `init_from`, see `build.config_to_train`).
    The run holds the lock of `output` from the start until `run()` ends (or `close()`)."""

    def __init__(
        self,
        config: Config,
        output: Path,
        *,
        resume: bool = False,
        init_from: Optional[str] = None,
        given: Collection[str] = (),
        device: str = "cpu",
        progress_bar: bool = True,
        log: Callable[[str], None] = print,
    ):
        self.output, self.device = Path(output), check_device(device)
        self.rank, self.world = (
            (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        )
        self.lock = RunLock(self.output, self.rank, self.world, self.device)
        try:
            self._build(config, resume, init_from, given, progress_bar, log)
        except BaseException:
            self.close()
            raise

    def _build(self, config, resume, init_from, given, progress_bar, log) -> None:
        """Everything `__init__` says, under the lock."""
        if not resume:
            check_new_run(self.output)
        init_dir = resolve_init(init_from, resumed=resume) if init_from else None
        start = starting_bilm(init_dir, init_from) if init_dir and not resume else None
        config, self.init = config_to_train(
            with_absolute_corpus(config), given, start, self.output if resume else None
        )
        self.config = config
        self.log = log if self.rank == 0 else (lambda msg: None)
        self.progress_bar = progress_bar and self.rank == 0
        c, t = config["corpus"], config["training"]
        self.t, self.unk, self.policy = t, c["unk_token"], model_policy(config)
        self.ckpt_dir = self.output / CHECKPOINT_DIR
        self.saved_step: Optional[int] = None
        self.resumed_step: Optional[int] = None  # the checkpoint's, where resumed
        self.train_sha256, self.dev_sha256 = run_digests(config, self.output, self.world, resume)

        tokenize = corpus_tokenizer(c)
        self.corpus = TrainingCorpus(c["train"], tokenize, c["max_sentence_length"])
        self.vocab = training_vocab(
            config,
            self.corpus.counts,
            resumed_run=self.output if resume else None,
            start=start,
            log=self.log,
        )
        self.dev: Optional[DevSet] = None
        if c["dev"] is not None:
            self.dev = load_dev(c["dev"], tokenize, c["max_sentence_length"], self.vocab, self.unk)

        torch.manual_seed(t["seed"])
        bilm = initial_bilm(config, start, recorded_options(self.output) if resume else None)
        self.head_rng = torch.Generator().manual_seed(t["seed"] + 1 + self.rank)
        head = initial_head(
            config["softmax"], bilm, len(self.vocab), self.head_rng, start or init_dir, self.log
        )
        self.model = BiLanguageModel(bilm, head, t["dropout"]).to(self.device)
        self.loss_softmax = train_loss_softmax(head)  # what the reported training loss is
        if self.rank:  # each process its own dropout masks; rank 0 draws what one process draws
            torch.manual_seed(t["seed"] + RANK_SEED_STRIDE * self.rank)
        # autocast of the forward pass: its products in bfloat16; weights, gradients and optimizer
        # stay float32
        self.precision = resolve_precision(training_precision(config), self.device, training=True)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(t["optimizer"], self.params, t["learning_rate"])
        self.progress = Progress()
        self.lstm_state: Optional[LSTMState] = None  # carried between windows of the stream scheme
        self.last_dev: Optional[Dict[str, Any]] = None
        if resume:
            self._load_checkpoint()
        elif self.rank == 0:  # a new run: an earlier one in `output` can no longer be resumed
            start_new_run(
                self.output, config, self.vocab, self.train_sha256, bilm, self.dev_sha256, self.init
            )
        self.log(self._describe())

    def _describe(self) -> str:
        """The log line that says what is trained, on what, and how."""
        n_params = sum(p.numel() for p in self.model.bilm.parameters())
        n_dev = self.dev.n_predicted if self.dev else 0
        return (
            f"corpus: {self.corpus.n_tokens} tokens in {len(self.corpus.files)} file(s); vocab "
            f"{len(self.vocab)}; dev {n_dev} predicted tokens; biLM {n_params / 1e6:.2f}M "
            f"parameters; scheme {self.t['scheme']}; {self.precision} products; {self.world} "
            f"process(es)"
        )

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self) -> None:
        """Checkpoint this step, once, on every process (see `checkpoint.save`); weights that are no
        longer finite stop the run instead."""
        step = self.progress.step
        if self.saved_step == step:
            return
        bad = non_finite(self.model.state_dict())
        if bad is not None:
            raise diverged(step, f"the weight {bad}", self.saved_step, self.t)
        own = {
            "step": step,
            "torch_rng": torch.get_rng_state(),
            "head_rng": self.head_rng.get_state(),
            "state": None if self.lstm_state is None else tuple(s.cpu() for s in self.lstm_state),
        }
        shared = None
        if self.rank == 0:
            shared = {
                "step": step,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "progress": asdict(self.progress),
            }
        checkpoint.save(self.ckpt_dir, step, self.rank, self.world, own, shared)
        self.saved_step = step

    def _load_checkpoint(self) -> None:
        shared, own = checkpoint.load(self.ckpt_dir, self.rank)
        try:
            self.model.load_state_dict(shared["model"])
            self.optimizer.load_state_dict(shared["optimizer"])
            self.progress = Progress(**shared["progress"])
            torch.set_rng_state(own["torch_rng"])
            self.head_rng.set_state(own["head_rng"])
            self.lstm_state = (
                None
                if own["state"] is None
                else LSTMState(*(s.to(self.device) for s in own["state"]))
            )
        except (RuntimeError, KeyError, TypeError, ValueError) as err:
            raise ElmoFileError(
                f"--resume: the checkpoint in {self.ckpt_dir} does not fit this run's model "
                f"({type(err).__name__}: {err})"
            ) from None
        bad = non_finite(self.model.state_dict())
        if bad is not None:
            raise ElmoFileError(
                f"--resume: the checkpoint in {self.ckpt_dir} holds non-finite weights ({bad}): "
                "the run diverged before it was saved; train again with a lower "
                "training.learning_rate"
            )
        self.saved_step = self.resumed_step = self.progress.step
        if self.rank == 0:
            torn, reported = forget_metrics_after(self.output, self.progress.step)
            if torn:
                self.log(
                    f"{self.output / METRICS_FILE}: dropped a torn last line (a run stopped while "
                    f"writing it)"
                )
            if reported:  # the loss the checkpoint holds is in the record of its step
                self.progress.loss_sum, self.progress.loss_steps = 0.0, 0
        self.log(f"resumed at step {self.progress.step} (epoch {self.progress.epoch})")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> Optional[Dict[str, Any]]:
        """Dev perplexity (forward, backward, mean) under the model's policy, on rank 0."""
        if self.dev is None or self.rank != 0:
            return None
        nll = dev_nll(
            self.model.bilm,
            self.model.head,
            self.dev,
            self.policy,
            self.t["eval_batch_size"],
            progress=self.progress_bar,
        )
        return {"policy": self.policy, **perplexities(nll, self.dev.n_predicted)}

    def _report(self) -> None:
        """Dev perplexity now and the mean training loss since the last report: printed, and
        appended to `metrics.jsonl` (the learning curve)."""
        p, start = self.progress, time.perf_counter()
        self.last_dev = self.evaluate()
        p.last_eval_seconds = p.train_seconds
        train_loss = p.loss_sum / p.loss_steps
        p.loss_sum, p.loss_steps = 0.0, 0
        if self.rank != 0:
            return
        record = metrics_record(p, train_loss, self.loss_softmax, self.last_dev, start)
        append_metrics(self.output, record)
        if self.progress_bar:
            tqdm.write(report_line(record))
        else:
            self.log(report_line(record))

    def close(self) -> None:
        """Release the lock of the output directory (`run` does as it ends)."""
        self.lock.release()

    # ------------------------------------------------------------------ the loop
    def run(self) -> Dict[str, Any]:
        """Train until `training.max_steps`, `max_epochs` or `max_minutes`, reporting and
        checkpointing on the way, then save the model (see `finish`); the lock is released after."""
        with self.lock:  # released as the run ends, however it ends
            return self._run()

    def _run(self) -> Dict[str, Any]:
        t, p = self.t, self.progress
        max_seconds = t["max_minutes"] * 60 if t["max_minutes"] else math.inf
        eval_seconds = t["eval_every_minutes"] * 60 if t["eval_every_minutes"] else math.inf
        self.model.train()
        bar = TrainingBar(p, t["max_steps"], max_seconds, self.loss_softmax, self.progress_bar)
        with deferred_interrupt() as interrupted:
            for position, batch in self._batches():
                if t["max_steps"] is not None and p.step >= t["max_steps"]:
                    break
                start = time.perf_counter()
                n_global, stop = self._everywhere(
                    batch, p.train_seconds >= max_seconds, interrupted()
                )
                if n_global is None:
                    break
                nll = self._step(batch, n_global)
                p.step += 1
                p.tokens += n_global
                p.epoch, p.file, p.batch = position
                p.train_seconds += time.perf_counter() - start
                step_loss = float(nll.detach().sum()) / (2 * batch.n_predicted)
                p.loss_sum, p.loss_steps = p.loss_sum + step_loss, p.loss_steps + 1
                bar.update(p, step_loss)
                step_due = t["eval_every"] and p.step % t["eval_every"] == 0
                if step_due or p.train_seconds - p.last_eval_seconds >= eval_seconds:
                    self._report()
                stop = stop or self.world == 1 and interrupted()
                if p.step % t["checkpoint_every"] == 0 or stop:
                    self._save_checkpoint()
                if stop:
                    bar.close()
                    self.log(f"checkpoint of step {p.step} saved")
                    raise KeyboardInterrupt
        bar.close()
        self._save_checkpoint()
        if p.loss_steps:  # the steps since the last report (a resumed run: from its checkpoint)
            self._report()
        return self.finish()

    def _batches(self) -> Iterator[Tuple[Position, Batch]]:
        """This process's batches from where training stands (see `TrainingCorpus.batches`)."""
        return self.corpus.batches(
            self.progress.position,
            self.t["seed"],
            self.vocab,
            self.unk,
            self.t["scheme"],
            self.t["batch_tokens"],
            self.t["window"],
            self.rank,
            self.world,
            self.t["max_epochs"],
            word_ids=self.model.bilm.word_ids,  # the model's own ids of each token
        )

    def _everywhere(self, batch: Batch, late: bool, asked: bool) -> Tuple[Optional[int], bool]:
        """The tokens all processes predict per direction in this step (None to stop now: one is
        `late`, out of time), and whether one was `asked` to stop (Ctrl-C): all stop together."""
        flags = torch.tensor([batch.n_predicted, float(late), float(asked)], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(flags)
        return (None if flags[1] > 0 else int(flags[0])), bool(flags[2] > 0)

    def _step(self, batch: Batch, n_global: int) -> torch.Tensor:
        """One optimizer step on `batch`, whose loss is averaged over the `n_global` tokens of all
        processes -> its NLL summed per direction `(2,)`."""
        carry = self.t["scheme"] == "stream"
        batch = type(batch)(*(x.to(self.device) for x in batch))
        with torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bfloat16"
        ):
            nll, lstm_state = self.model(batch, self.lstm_state if carry else None)
        loss = nll.sum() / (2 * n_global)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        all_reduce_gradients(self.params, self.world)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.t["grad_clip"])
        # the same on every process: the gradients are summed across them
        if not torch.isfinite(norm):
            raise diverged(self.progress.step + 1, "the loss's gradient", self.saved_step, self.t)
        self.optimizer.step()
        self.model.bilm.invalidate()
        if carry:
            self.lstm_state = lstm_state
        return nll

    # ------------------------------------------------------------------ the result
    def finish(self) -> Dict[str, Any]:
        """Save the final model (loadable by `load_bilm`), its softmax and vocabulary, and a
        summary; a resumed run that trained nothing keeps them where they are saved."""
        if self.rank != 0:
            return {}
        end = (self.output, self.model, self.vocab, self.policy, self.t["export_hdf5"])
        kept = kept_model(*end, self.log) if self.progress.step == self.resumed_step else None
        if kept is not None:
            return kept
        if self.last_dev is None and self.dev is not None:  # a resumed run that was complete
            self.last_dev = self.evaluate()
        summary = {
            "config": self.config.to_str(),
            "seed": self.t["seed"],
            "scheme": self.t["scheme"],
            "policy": self.policy,
            "options": self.model.bilm.options.to_dict(),
            "processes": self.world,
            "precision": self.precision,
            **self.progress.summary(),
            "corpus": self.train_sha256,
            "dev_corpus": str(self.config["corpus"]["dev"]),
            "dev": self.last_dev,
            "init_from": self.init,
        }
        save_final(*end, summary, self.log)
        return summary


def train(config: Config, output, **kwargs) -> Dict[str, Any]:
    """Train a biLM as `config` says into `output` (see `Trainer` for the keyword arguments)."""
    return Trainer(config, Path(output), **kwargs).run()
