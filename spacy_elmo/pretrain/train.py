"""The training loop of `python -m spacy_elmo pretrain`, read top to bottom.

One step: a batch of both directions (see `corpus`) -> summed NLL -> loss = mean NLL over the
predicted tokens of both directions (the mean of the two LMs' losses) on all processes together
-> gradients summed across processes (torch.distributed, gloo on CPU) -> clip -> optimizer step.
Under the "stream" scheme the LSTM state at the end of each window is carried into the next.

Checkpoints hold the weights, the optimizer, the data position, the carried states and the random
generators, so a resumed run ends with the same weights as an uninterrupted one (bit for bit on
CPU); each is published at once, whole (see `checkpoint`). `corpus.json` records the sha256 of every
training file at the start, so that a resumed run refuses a corpus edited since. A new run (not
`resume`) in a directory of an earlier one removes that run's checkpoint and metrics first.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist
from thinc.api import Config
from tqdm import tqdm

from ..bilm import BiLM, LSTMState
from ..bilm.precision import resolve_precision
from ..errors import ElmoConfigError, ElmoFileError
from ..files import append_whole, write_atomic, write_errors
from ..weights import load_bilm
from ..weights.hub import sha256_file
from ..weights.untrained import UNTRAINED_KEY
from . import checkpoint
from .config import bilm_options, default_vocab_size, model_policy, training_precision
from .corpus import (
    SPECIALS,
    DevSet,
    Position,
    TrainingCorpus,
    Vocab,
    corpus_files,
    load_dev,
    make_tokenizer,
)
from .heads import build_head
from .lm import BiLanguageModel, dev_nll, perplexities
from .outputs import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    CORPUS_RECORD,
    HDF5_DIR,
    HEAD_FILE,
    METRICS_FILE,
    VOCAB_FILE,
    check_resumable,
    forget_metrics_after,
    resolve_init,
    save_trained,
)


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

    @property
    def position(self) -> Position:
        return Position(self.epoch, self.file, self.batch)


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


class Trainer:
    """Builds everything from the config, then `run()`s the loop. `rank` / `world` come from
    torch.distributed when it is initialized (torchrun); rank 0 alone writes shared files."""

    def __init__(
        self,
        config: Config,
        output: Path,
        *,
        resume: bool = False,
        init_from: Optional[str] = None,
        device: str = "cpu",
        progress_bar: bool = True,
        log: Callable[[str], None] = print,
    ):
        self.config, self.output, self.device = config, Path(output), torch.device(device)
        self.rank, self.world = (
            (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        )
        self.log = log if self.rank == 0 else (lambda msg: None)
        self.progress_bar = progress_bar and self.rank == 0
        c, t = config["corpus"], config["training"]
        self.t = t
        self.unk = c["unk_token"]
        self.policy = model_policy(config)
        self.ckpt_dir = self.output / CHECKPOINT_DIR
        self.saved_step: Optional[int] = None
        self.corpus_sha256 = {str(f): sha256_file(f) for f in corpus_files(c["train"], "train")}
        if resume:
            check_resumable(config, self.output, self.world, self.corpus_sha256)

        tokenize = make_tokenizer(c["tokenizer"], c["lang"], c["lowercase"])
        self.corpus = TrainingCorpus(c["train"], tokenize, c["max_sentence_length"])
        init_dir = resolve_init(init_from) if init_from else None
        self.vocab = self._vocab(init_dir, resume)
        self.dev: Optional[DevSet] = None
        if c["dev"] is not None:
            self.dev = load_dev(c["dev"], tokenize, c["max_sentence_length"], self.vocab, self.unk)

        torch.manual_seed(t["seed"])
        bilm = load_bilm(init_dir).network if init_dir else BiLM(bilm_options(config))
        bilm.options.extra.pop(
            UNTRAINED_KEY, None
        )  # from `init-random`'s weights: trained from here on
        if bilm.options.char_table:
            raise ElmoConfigError(
                f"--init-from {init_from}: a model with a character table (ELMoForManyLangs) "
                "cannot be trained here; pretrain reads utf-8 bytes"
            )
        self.head_rng = torch.Generator().manual_seed(t["seed"] + 1 + self.rank)
        s = config["softmax"]
        try:
            head = build_head(
                s["type"],
                bilm.options.projection_dim,
                len(self.vocab),
                s["n_samples"],
                s["adaptive_cutoffs"],
                self.head_rng,
            )
        except ValueError as err:
            raise ElmoConfigError(str(err)) from None
        if init_dir and (init_dir / HEAD_FILE).is_file():
            self._load_head(head, init_dir / HEAD_FILE)
        self.model = BiLanguageModel(bilm, head, t["dropout"]).to(self.device)
        # autocast of the forward pass: its products in bfloat16; weights, gradients and optimizer
        # stay float32
        self.precision = resolve_precision(
            training_precision(config), self.device, allow_int8=False
        )
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(t["optimizer"], self.params, t["learning_rate"])
        self.progress = Progress()
        self.lstm_state: Optional[LSTMState] = None  # carried between windows of the stream scheme
        self.last_dev: Optional[Dict[str, Any]] = None
        if resume:
            self._load_checkpoint()
        elif self.rank == 0:  # a new run: an earlier one in `output` can no longer be resumed
            self.output.mkdir(parents=True, exist_ok=True)
            checkpoint.retire(self.ckpt_dir)
            (self.output / METRICS_FILE).unlink(missing_ok=True)
            for name, text in (
                (CONFIG_FILE, config.to_str()),
                (VOCAB_FILE, self.vocab.to_str()),
                (CORPUS_RECORD, json.dumps(self.corpus_sha256, indent=1)),
            ):
                with write_errors(self.output / name):
                    write_atomic(self.output / name, text)
        n_params = sum(p.numel() for p in bilm.parameters())
        self.log(
            f"corpus: {self.corpus.n_tokens} tokens in {len(self.corpus.files)} file(s); vocab "
            f"{len(self.vocab)}; "
            f"dev {self.dev.n_predicted if self.dev else 0} predicted tokens; biLM "
            f"{n_params / 1e6:.2f}M "
            f"parameters; scheme {t['scheme']}; {self.precision} products; {self.world} process(es)"
        )

    # ------------------------------------------------------------------ setup helpers
    def _vocab(self, init_dir: Optional[Path], resume: bool) -> Vocab:
        if resume:
            return Vocab.from_disk(self.output / VOCAB_FILE)
        if init_dir and (init_dir / VOCAB_FILE).is_file() and (init_dir / HEAD_FILE).is_file():
            self.log(f"vocabulary and softmax from {init_dir}")
            return Vocab.from_disk(init_dir / VOCAB_FILE)
        size = self.config["vocab"]["size"]
        vocab = Vocab.build(self.corpus.counts, size, self.unk, shrink=size == default_vocab_size())
        if size is not None and len(vocab) - len(SPECIALS) < size:
            self.log(
                f"warning: vocab.size = {size} is larger than the {len(vocab) - len(SPECIALS)} "
                f"distinct words of "
                f"the training corpus: the output vocabulary keeps all of them"
            )
        return vocab

    def _load_head(self, head: torch.nn.Module, path: Path) -> None:
        state = checkpoint.torch_load(path, what="softmax weights")
        if {k: getattr(v, "shape", None) for k, v in state.items()} != {
            k: v.shape for k, v in head.state_dict().items()
        }:
            raise ElmoConfigError(
                f"{path}: the saved softmax does not match softmax.type = "
                f"{self.config['softmax']['type']!r}; set it to the type it was trained with"
            )
        head.load_state_dict(state)

    # ------------------------------------------------------------------ checkpoints
    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def _save_checkpoint(self) -> None:
        """Write this step's parts (every rank its own, rank 0 the model), then rank 0 publishes
        them."""
        step = self.progress.step
        if self.saved_step == step:
            return
        bad = non_finite(self.model.state_dict())
        if bad is not None:
            raise self._diverged(step, f"the weight {bad}")
        try:
            if self.rank == 0:
                checkpoint.prepare(self.ckpt_dir, step)
            self._barrier()
            directory = checkpoint.step_dir(self.ckpt_dir, step)
            own = {
                "step": step,
                "torch_rng": torch.get_rng_state(),
                "head_rng": self.head_rng.get_state(),
                "state": None
                if self.lstm_state is None
                else tuple(s.cpu() for s in self.lstm_state),
            }
            checkpoint.save_part(own, directory / checkpoint.rank_part(self.rank))
            if self.rank == 0:
                shared = {
                    "step": step,
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "progress": asdict(self.progress),
                }
                checkpoint.save_part(shared, directory / checkpoint.MODEL_PART)
            self._barrier()
            if self.rank == 0:
                checkpoint.publish(self.ckpt_dir, step, self.world)
        except (
            BaseException
        ):  # a full disk, a kill: the previous checkpoint stays, nothing partial beside it
            if self.rank == 0:
                checkpoint.discard(self.ckpt_dir, step)
            raise
        self._barrier()
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
                f"the "
                "run diverged before it was saved; train again with a lower training.learning_rate"
            )
        self.saved_step = self.progress.step
        if self.rank == 0 and forget_metrics_after(self.output, self.progress.step):
            self.log(
                f"{self.output / METRICS_FILE}: dropped a torn last line (a run stopped while "
                f"writing it)"
            )
        self.log(f"resumed at step {self.progress.step} (epoch {self.progress.epoch})")

    def _diverged(self, step: int, what: str) -> ElmoConfigError:
        """The error that stops a run whose `what` became NaN or infinite at `step` (nothing of it
        is saved)."""
        kept = (
            f"the last checkpoint (step {self.saved_step}) is kept"
            if self.saved_step is not None
            else "no checkpoint was written"
        )
        return ElmoConfigError(
            f"pretrain diverged at step {step}: {what} is not finite (NaN or infinity); {kept} and "
            f"no model is "
            f"saved. Train again with a lower training.learning_rate (now "
            f"{self.t['learning_rate']:g}) or "
            f"training.grad_clip (now {self.t['grad_clip']:g}); --resume keeps a run's settings"
        )

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

    def _say(self, message: str) -> None:
        if self.progress_bar:
            tqdm.write(message)
        else:
            self.log(message)

    def _report(self, train_loss: float) -> None:
        """Dev perplexity now: printed, and appended to `metrics.jsonl` (the learning curve)."""
        start = time.perf_counter()
        self.last_dev = self.evaluate()
        p, dev = self.progress, self.last_dev
        p.last_eval_seconds = p.train_seconds
        if self.rank != 0:
            return
        record = {
            "step": p.step,
            "epoch": p.epoch,
            "tokens": p.tokens,
            "train_minutes": p.train_seconds / 60,
            "train_loss": train_loss,
            "tokens_per_s": p.tokens / max(p.train_seconds, 1e-9),
            "dev": dev,
            "eval_seconds": time.perf_counter() - start,
        }
        path = self.output / METRICS_FILE
        with write_errors(path, checkpoint.retry_hint(self.ckpt_dir)):  # a line whole or not at all
            append_whole(path, (json.dumps(record) + "\n").encode("utf-8"))
        dev_text = (
            (
                f"dev ppl fwd {dev['forward']:.1f} bwd {dev['backward']:.1f} mean "
                f"{dev['mean']:.1f} "
                f"({dev['policy']}, {record['eval_seconds']:.0f}s)"
            )
            if dev
            else "no dev set"
        )
        self._say(
            f"step {p.step} epoch {p.epoch} {p.train_seconds / 60:.1f} min: train loss "
            f"{train_loss:.3f}; {dev_text}"
        )

    # ------------------------------------------------------------------ the loop
    def run(self) -> Dict[str, Any]:
        t, p = self.t, self.progress
        max_seconds = t["max_minutes"] * 60 if t["max_minutes"] else math.inf
        eval_seconds = t["eval_every_minutes"] * 60 if t["eval_every_minutes"] else math.inf
        carry = t["scheme"] == "stream"
        self.model.train()
        batches = self.corpus.batches(
            p.position,
            t["seed"],
            self.vocab,
            self.unk,
            t["scheme"],
            t["batch_tokens"],
            t["window"],
            self.rank,
            self.world,
            t["max_epochs"],
        )
        # Without a step limit, a time budget is the bar's total: it advances by training seconds.
        budget = t["max_steps"] is None and t["max_minutes"] is not None
        bar = tqdm(
            total=max_seconds if budget else t["max_steps"],
            initial=p.train_seconds if budget else p.step,
            unit="s" if budget else "step",
            disable=not self.progress_bar,
            dynamic_ncols=True,
            bar_format="{desc}{percentage:3.0f}%|{bar}| [{elapsed} wall{postfix}]"
            if budget
            else None,
        )
        loss_sum, loss_count = 0.0, 0
        for position, batch in batches:
            if t["max_steps"] is not None and p.step >= t["max_steps"]:
                break
            start = time.perf_counter()
            # Tokens predicted per direction on all processes, and whether rank 0 says stop.
            flags = torch.tensor(
                [batch.n_predicted, float(p.train_seconds >= max_seconds)], dtype=torch.float64
            )
            if self.world > 1:
                dist.all_reduce(flags)
            if flags[1] > 0:
                break
            n_global = int(flags[0])

            batch = type(batch)(*(x.to(self.device) for x in batch))
            with torch.autocast(
                self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bfloat16"
            ):
                nll, lstm_state = self.model(batch, self.lstm_state if carry else None)
            loss = nll.sum() / (2 * n_global)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            all_reduce_gradients(self.params, self.world)
            norm = torch.nn.utils.clip_grad_norm_(self.params, t["grad_clip"])
            if not torch.isfinite(
                norm
            ):  # the same on every process: the gradients are summed across them
                raise self._diverged(p.step + 1, "the loss's gradient")
            self.optimizer.step()
            self.model.bilm.invalidate()
            if carry:
                self.lstm_state = lstm_state

            p.step += 1
            p.tokens += n_global
            p.epoch, p.file, p.batch = position
            p.train_seconds += time.perf_counter() - start
            step_loss = float(nll.detach().sum()) / (2 * batch.n_predicted)
            loss_sum, loss_count = loss_sum + step_loss, loss_count + 1
            if budget:
                bar.update(min(p.train_seconds, max_seconds) - bar.n)
                bar.set_description(
                    f"step {p.step}, {tqdm.format_interval(p.train_seconds)} / "
                    f"{tqdm.format_interval(max_seconds)} of the time budget, "
                    f"{tqdm.format_interval(max(max_seconds - p.train_seconds, 0))} left",
                    refresh=False,
                )
            else:
                bar.update(1)
            bar.set_postfix(
                loss=f"{step_loss:.3f}",
                ppl=f"{math.exp(min(step_loss, 50)):.0f}",
                tok_s=f"{p.tokens / p.train_seconds:.0f}",
                epoch=p.epoch,
                refresh=False,
            )
            if (
                t["eval_every"] and p.step % t["eval_every"] == 0
            ) or p.train_seconds - p.last_eval_seconds >= eval_seconds:
                self._report(loss_sum / loss_count)
                loss_sum, loss_count = 0.0, 0
            if p.step % t["checkpoint_every"] == 0:
                self._save_checkpoint()
        bar.close()
        self._save_checkpoint()
        if loss_count or self.last_dev is None:
            self._report(loss_sum / loss_count if loss_count else float("nan"))
        return self.finish()

    # ------------------------------------------------------------------ the result
    def finish(self) -> Dict[str, Any]:
        """Save the final model (loadable by `load_bilm`), its softmax and vocabulary, and a
        summary."""
        if self.rank != 0:
            return {}
        p = self.progress
        summary = {
            "config": self.config.to_str(),
            "seed": self.t["seed"],
            "scheme": self.t["scheme"],
            "policy": self.policy,
            "options": self.model.bilm.options.to_dict(),
            "processes": self.world,
            "precision": self.precision,
            "steps": p.step,
            "epochs_started": p.epoch,
            "tokens": p.tokens,
            "train_minutes": p.train_seconds / 60,
            "tokens_per_s": p.tokens / max(p.train_seconds, 1e-9),
            "corpus": self.corpus_sha256,
            "dev_corpus": str(self.config["corpus"]["dev"]),
            "dev": self.last_dev,
        }
        model_dir = save_trained(
            self.output,
            self.model.bilm.cpu(),
            self.model.head.cpu(),
            self.vocab,
            self.policy,
            self.t["export_hdf5"],
            summary,
        )
        self.log(
            f"saved {model_dir}"
            + (f" and {self.output / HDF5_DIR}" if self.t["export_hdf5"] else "")
        )
        return summary


def train(config: Config, output, **kwargs) -> Dict[str, Any]:
    """Train a biLM as `config` says into `output` (see `Trainer` for the keyword arguments)."""
    return Trainer(config, Path(output), **kwargs).run()
