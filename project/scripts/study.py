"""Shared definitions of the study: the two scales (`full`, `smoke`), the tasks, paths and small
helpers.

The scripts of project.yml import this module; it holds no step of its own.
"""

from __future__ import annotations

import gc
import json
import os
import shlex
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from .machine import machine

ROOT = Path(__file__).resolve().parent.parent.parent  # the project directory (holds project.yml)
ASSETS = ROOT / "project" / "assets"
CONFIGS = ROOT / "project" / "configs"
LM_TEXT = ["wikitext2.train.txt", "1b_benchmark.dev.tokens", "1b_benchmark.test.tokens"]
# The systems that read the biLM, and the config each trains (configs/<task config>_<suffix>.cfg):
# `elmo` at the task encoder's input, `elmo-output` at its output only, `elmo-both` at both (two
# mixes), `elmo-layers01` at its input mixing layers 0 and 1 only; `elmo-tuned` as `elmo` with the
# biLM tuned on the run's training set, and `elmo-tuned-<placement>` so at another placement.
PLACED = {
    "elmo": "elmo",
    "elmo-output": "elmo_output",
    "elmo-both": "elmo_both",
    "elmo-layers01": "elmo_layers01",
}
# each placement -> ELMo there with the tuned biLM
TUNED_AT = {system: system.replace("elmo", "elmo-tuned", 1) for system in PLACED}
TUNED_SYSTEMS = frozenset(TUNED_AT.values())
# the fractions of the training data the `placement` step runs on
PLACEMENT_FRACTIONS = [0.1, 1.0]
ELMO_SYSTEMS = {**PLACED, **{TUNED_AT[system]: config for system, config in PLACED.items()}}


def chosen_placement(dev: Dict[str, float]) -> str:
    """The placement (a system of PLACED) with the best mean dev score in `dev` (placement -> mean);
    the first in PLACED's order on a tie."""
    return max((s for s in PLACED if s in dev), key=lambda s: dev[s])


@dataclass(frozen=True)
class Scale:
    """How big each step is. `None` limits mean "everything"."""

    name: str
    text_lines: Optional[int]  # lines of each pretraining text file
    dev_text_lines: Optional[int]
    train_sentences: Optional[int]  # tagging / NER sentences per split
    eval_sentences: Optional[int]
    fractions: List[float]
    seeds: List[int]
    pretrain_overrides: Dict[str, Any] = field(default_factory=dict)
    train_overrides: Dict[str, Any] = field(default_factory=dict)
    baseline_overrides: Dict[str, Any] = field(default_factory=dict)
    tune_overrides: Dict[str, Any] = field(default_factory=dict)  # of the biLM's tuning config
    probe_sentences: Optional[int] = None

    def check_fractions(self, fractions: List[float]) -> None:
        """SystemExit naming the study's fractions where `fractions` (--fractions) has another."""
        studied = sorted({*self.fractions, *PLACEMENT_FRACTIONS})
        outside = [f for f in fractions if f not in studied]
        if outside:
            raise SystemExit(
                f"error: --fractions {' '.join(f'{f:g}' for f in outside)}: the {self.name} study "
                f"trains on the fractions {', '.join(f'{f:g}' for f in studied)} of the data only"
            )

    def slice_text(self, path: Path, out_dir: Path, dev: bool = False) -> Path:
        """The text file itself, or its first lines written under out_dir (smoke runs)."""
        limit = self.dev_text_lines if dev else self.text_lines
        if limit is None:
            return path
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / path.name
        with open(path, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as dst:
            for i, line in enumerate(src):
                if i >= limit:
                    break
                dst.write(line)
        return target


SCALES = {
    "full": Scale(
        name="full",
        text_lines=None,
        dev_text_lines=None,
        train_sentences=None,
        eval_sentences=None,
        fractions=[0.01, 0.1, 1.0],
        seeds=[0, 1, 2],
        probe_sentences=4000,
        train_overrides={
            "training.max_steps": 2000,
            "training.eval_frequency": 200,
            "training.patience": 600,
        },
        baseline_overrides={"pretraining.max_epochs": 3},
    ),
    "smoke": Scale(
        name="smoke",
        # the baselines' `spacy pretrain` epoch takes time in proportion to the text; the biLM's
        # steps are counted (training.max_steps)
        text_lines=100,
        dev_text_lines=50,
        train_sentences=200,
        eval_sentences=60,
        fractions=[0.1, 1.0],
        seeds=[0],
        probe_sentences=100,
        pretrain_overrides={
            "model.filters": [[1, 8], [2, 8], [3, 16]],
            "model.projection_dim": 16,
            "model.lstm_dim": 32,
            "vocab.size": 1000,
            "softmax.type": "full",
            "training.max_steps": 20,
            "training.max_minutes": None,
            "training.eval_batch_size": 16,
            "training.checkpoint_every": 10,
        },
        train_overrides={
            "training.max_steps": 12,
            "training.eval_frequency": 6,
            "training.patience": 0,
            "nlp.batch_size": 32,
        },
        # floret.bucket: the rows of floret's vector table (50000 at full scale)
        baseline_overrides={"pretraining.max_epochs": 1, "floret.bucket": 5000},
        # a few steps; 4-row batches, as a 10% subset of 200 sentences fills few of them
        tune_overrides={
            "training.max_steps": 3,
            "training.batch_tokens": 80,
            "training.checkpoint_every": 2,
        },
    ),
}


@dataclass(frozen=True)
class Task:
    name: str
    source: str  # the data set: "ud", "uner" or "conll2003" (its corpus folder)
    kind: str  # convert_data format
    files: Dict[str, str]  # split -> file under project/assets
    config: str  # configs/<config>_base.cfg, or _<suffix>.cfg of an ELMo system (ELMO_SYSTEMS)
    metric: str  # the score that selects the model and that the summary reports
    data: str  # what the summary calls the data set

    @property
    def run_name(self) -> str:
        """The task in run names: `pos`, or `ner-<source>` (NER has two data sets, kept apart)."""
        return self.name if self.name == "pos" else f"{self.name}-{self.source}"


TASKS = {
    "pos": Task(
        "pos",
        "ud",
        "conllu",
        {
            "train": "ud/en_ewt-ud-train.conllu",
            "dev": "ud/en_ewt-ud-dev.conllu",
            "test": "ud/en_ewt-ud-test.conllu",
        },
        "tagger",
        "tag_acc",
        "UD English-EWT (UPOS)",
    ),
    "conll2003": Task(
        "ner",
        "conll2003",
        "conll03",
        {
            "train": "conll2003/eng.train",
            "dev": "conll2003/eng.testa",
            "test": "conll2003/eng.testb",
        },
        "ner",
        "ents_f",
        "CoNLL-2003 English",
    ),
    "uner": Task(
        "ner",
        "uner",
        "iob2",
        {
            "train": "uner/en_ewt-ud-train.iob2",
            "dev": "uner/en_ewt-ud-dev.iob2",
            "test": "uner/en_ewt-ud-test.iob2",
        },
        "ner",
        "ents_f",
        "Universal NER English-EWT (preliminary train split)",
    ),
}


def metrics_dir(scale: str) -> Path:
    """Where a scale's metrics go: project/metrics (committed) for the full study, else under
    training/."""
    return (
        ROOT / "project" / "metrics"
        if scale == "full"
        else ROOT / "project" / "training" / scale / "metrics"
    )


def machine_line() -> str:
    """This machine in one line, for the metrics records (the summary groups runs by it)."""
    m = machine()
    return f"{m['cores']} vCPU {m['cpu']}, {m['system']}"


def bilm_record(model_dir: Path) -> Dict[str, Any]:
    """What the summary says about a biLM trained by the `pretrain` step."""
    training = json.loads((model_dir / "training.json").read_text(encoding="utf-8"))
    return {
        "path": str(model_dir.relative_to(ROOT)),
        "trained_here": True,
        "fingerprint": training["fingerprint"],
        "sha256": {"weights.pt": training["weights_sha256"]},
        "training": {
            **{
                k: training[k]
                for k in (
                    "seed",
                    "scheme",
                    "policy",
                    "options",
                    "steps",
                    "tokens",
                    "train_minutes",
                    "tokens_per_s",
                    "dev",
                )
            },
            "dev_corpus": Path(training["dev_corpus"]).name,
        },
        "corpus_sha256": {Path(f).name: h for f, h in training["corpus"].items()},
    }


def run(args: List[str]) -> None:
    """Run a command, its output shown as it comes; a failure stops the step with the command's
    message."""
    print("$ " + " ".join(args[1:] if args[0] == sys.executable else args), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    code = subprocess.call(args, env=env)
    if code != 0:
        raise SystemExit(f"error: the command above failed with exit code {code}")


def spacy_train(config: Path, output: Path, overrides: Dict[str, Any]) -> None:
    """`python -m spacy train CONFIG --output OUTPUT` with the config's `overrides`
    (`{"paths.train": "...", ...}`), run in this process: a run does not start Python, spaCy and
    torch again. The command is shown first, to run by hand. Where spaCy stops (its message
    printed), the step stops with one error line; other errors (an ElmoError: the biLM) reach the
    step's `errors`."""
    from spacy.cli.train import train

    shown_overrides = [
        f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()
    ]
    command = ["python", "-m", "spacy", "train", str(config), "--output", str(output)]
    print("$ " + shlex.join(command + shown_overrides), flush=True)
    try:
        train(config, output, overrides=overrides)
    except SystemExit as stop:
        if stop.code:  # spaCy's `msg.fail(..., exits=1)`, after its message
            raise SystemExit(
                f"error: spacy train stopped (exit code {stop.code}): see above"
            ) from None
    finally:
        sys.stdout.flush()
        gc.collect()  # the run's pipeline (thinc's models hold cycles), before the next is built


# the tuned biLMs of the `tune` step (tune_bilm.py), which the `elmo-tuned` runs read. What a model
# directory of `pretrain` holds beside the biLM: its config, softmax and vocabulary.
TUNABLE_FILES = ("training.json", "lm_head.pt", "vocab.txt")
STAMP = "base.json"  # in a tuning's directory: the biLM and text it started from


@contextmanager
def errors() -> Iterator[None]:
    """A script's expected failures -> one `error: ...` line and exit code 1, as the package's
    command line gives them (spacy_elmo.cli.app.errors, which exits through typer): an `ElmoError`
    names the file or setting; anything else is a bug and keeps its traceback."""
    from spacy_elmo import ElmoError

    try:
        yield
    except ElmoError as err:
        raise SystemExit(f"error: {err}") from None


def run_first(step: str) -> str:
    """What an error says to do where a step's output is missing."""
    return f"run the {step} step first, `python -m spacy project run {step}` (with the same --vars)"


def shown(path: Union[str, Path]) -> str:
    """A path as the records give it: relative to the project directory where it lies inside."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None where there is none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def tunable_model(weights: str) -> Tuple[Optional[Path], str]:
    """The model directory of `weights` (a model `pretrain` saved, or the run directory holding it
    in `model/`), or None and why the weights cannot be tuned."""
    for candidate in (Path(weights), Path(weights) / "model"):
        if all((candidate / name).is_file() for name in TUNABLE_FILES):
            return candidate, ""
    return None, (
        f"{weights} is not a model saved by `pretrain` with its softmax "
        f"({', '.join(TUNABLE_FILES)}): tuning continues the language model, and the dev "
        f"perplexity before and after needs its softmax"
    )
