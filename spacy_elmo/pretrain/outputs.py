"""A pretraining run's directory: the files it writes and reads back (names, the resume checks, the
learning curve, the final model), and where a run starts from (`--init-from`).

    OUT/config.cfg, vocab.txt, corpus.json and dev.json (sha256 of every training and dev file),
        bilm_options.json (the biLM's sizes), init.json (where a run from `--init-from` started),
        metrics.jsonl (the learning curve)
    OUT/checkpoint/    the latest checkpoint (see `checkpoint`)
    OUT/model/         the trained biLM (`load_bilm`), its softmax (lm_head.pt), vocab.txt,
        training.json
    OUT/model-hdf5/    the biLM in the bilm-tf layout (training.export_hdf5)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from thinc.api import Config

from ..bilm import BiLM, BiLMOptions, ElmoEmbedder
from ..errors import ElmoFileError, ElmoResumeError
from ..files import (
    RECORD_BYTES,
    TEXT_ENCODING,
    append_whole,
    atomic_dir,
    parse_json,
    read_regular,
    write_atomic,
    write_errors,
)
from ..weights import export_hdf5, hub, load_bilm, locate, read_options, save_bilm
from ..weights.own import DIGESTS, OWN_CONFIG, OWN_WEIGHTS, PRETRAIN_MODEL
from . import checkpoint
from .heads import build_head
from .text import corpus_sha256
from .vocab import Vocab

CHECKPOINT_DIR = "checkpoint"
MODEL_DIR = PRETRAIN_MODEL  # where load_bilm(OUT) looks
HDF5_DIR = "model-hdf5"
HEAD_FILE = "lm_head.pt"  # the softmax, in OUT/model
VOCAB_FILE = "vocab.txt"  # the output vocabulary, in OUT and OUT/model
TRAINING_SUMMARY = "training.json"
CONFIG_FILE = "config.cfg"
CORPUS_RECORD = "corpus.json"
DEV_RECORD = "dev.json"  # written where the run has a dev corpus
OPTIONS_RECORD = "bilm_options.json"  # the sizes of the biLM the run built (`--init-from`'s)
INIT_RECORD = "init.json"  # the biLM `--init-from` named: as given, its directory, its fingerprint
METRICS_FILE = "metrics.jsonl"
# Settings added to the config since its first release, with the value a config without them meant.
DEFAULTS_BEFORE = {("training", "precision"): "float32"}
# Settings that may change between a run and its resumption (they only say when to stop or report).
RESUMABLE_CHANGES = {
    "max_steps",
    "max_epochs",
    "max_minutes",
    "eval_every",
    "eval_every_minutes",
    "checkpoint_every",
    "export_hdf5",
}


# where a resumed run cannot use the model its --init-from names: what continues it
RESUMED_HINT = (
    "; a resumed run continues from its checkpoint: --resume without --init-from continues it"
)


def resolve_init(path: str, resumed: bool = False) -> Path:
    """The directory to continue training from: a path (a pretrain output directory's model/), or
    a published model's directory in the cache (`python -m spacy_elmo download NAME`; its files
    are checked against the recorded sha256). `resumed`: a resumed run names it (its errors say
    that the run goes on without it)."""
    try:
        return _init_directory(path)
    except ElmoFileError as err:
        if resumed:
            raise ElmoFileError(f"{err}{RESUMED_HINT}") from None
        raise


def _init_directory(path: str) -> Path:
    # a published name, never a directory of that name here (`./NAME` is one)
    if hub.is_published(path):
        try:
            return locate(path, verify=True).config.parent
        except ElmoFileError as err:
            raise ElmoFileError(f"--init-from {path}: {err}") from None
    if not Path(path).exists():
        raise ElmoFileError(
            f"--init-from: {path} not found. Pass a directory saved by this project or one with "
            f"bilm-tf options + hdf5 weights (`python -m spacy_elmo download NAME` fetches "
            f"published ones)"
        )
    if not Path(path).is_dir():
        raise ElmoFileError(
            f"--init-from {path}: not a directory; pass the directory that holds the biLM (its "
            f"options and weights: bilm-tf / AllenNLP hdf5, or a model saved by pretrain)"
        )
    try:
        return locate(path).config.parent  # of a pretrain output directory: its model/
    except ElmoFileError as err:
        raise ElmoFileError(f"--init-from {path}: {err}") from None


def check_resumable(
    config: Config,
    output: Path,
    world: int,
    corpus_sha256: Dict[str, str],
    dev_sha256: Optional[Dict[str, str]] = None,
) -> None:
    """A resumed run must train the same model on the same data (the training files' sha256 and,
    where the run recorded them, the dev files'); only when to stop or report may change."""
    manifest = checkpoint.read_manifest(output / CHECKPOINT_DIR)
    if manifest["world"] != world:
        raise ElmoResumeError(
            f"--resume: the checkpoint was written by {manifest['world']} process(es), "
            f"this run has {world}; resume with the same number"
        )
    path = output / CONFIG_FILE
    if not os.path.lexists(path):
        raise ElmoFileError(f"--resume: {path} not found (the config of the run to continue)")
    data = read_regular(path, "config of the run", RECORD_BYTES)
    try:
        saved = Config().from_str(data.decode(TEXT_ENCODING))
    except Exception as err:  # confection raises several error types for bad files
        raise ElmoFileError(
            f"--resume: cannot read the run's config {path} ({type(err).__name__}: {err})"
        ) from None
    for section in ("corpus", "vocab", "model", "softmax", "training"):
        for key, value in config[section].items():
            if section == "training" and key in RESUMABLE_CHANGES:
                continue
            old = saved.get(section, {}).get(key, DEFAULTS_BEFORE.get((section, key)))
            paths = section == "corpus" and key in ("train", "dev")
            if (resolved_paths(old) != resolved_paths(value)) if paths else (old != value):
                raise ElmoResumeError(
                    f"--resume: {section}.{key} is {value!r} but the checkpoint in {output} "
                    f"was trained with {old!r}{_relative_hint(old) if paths else ''}"
                )
    _check_digests(output / CORPUS_RECORD, corpus_sha256, "training")
    if dev_sha256 is not None and os.path.lexists(output / DEV_RECORD):
        _check_digests(output / DEV_RECORD, dev_sha256, "dev")


def run_digests(
    config: Config, output: Path, world: int, resume: bool
) -> Tuple[Dict[str, str], Optional[Dict[str, str]]]:
    """The sha256 of the training and dev (None: no dev) files; a resumed run's must be those it
    recorded, and the rest of the run as `check_resumable` says."""
    c = config["corpus"]
    train = corpus_sha256(c["train"], "train")
    dev = corpus_sha256(c["dev"], "dev") if c["dev"] is not None else None
    if resume:
        check_resumable(config, output, world, train, dev)
    return train, dev


def _check_digests(path: Path, current: Dict[str, str], what: str) -> None:
    """The `what` files' sha256 now (`current`) must be those recorded in `path`."""
    data = read_regular(path, f"{what} corpus record", RECORD_BYTES)
    try:
        recorded = json.loads(data.decode(TEXT_ENCODING))
        recorded = {os.path.realpath(str(k)): str(v) for k, v in recorded.items()}
    except (ValueError, AttributeError) as err:  # UnicodeDecodeError, JSONDecodeError: ValueErrors
        raise ElmoFileError(
            f"--resume: cannot read the corpus record {path} ({type(err).__name__}: {err})"
        ) from None
    current = {os.path.realpath(k): v for k, v in current.items()}
    for name in sorted(recorded.keys() | current.keys()):
        if recorded.get(name) != current.get(name):
            change = (
                "is new"
                if name not in recorded
                else "is gone"
                if name not in current
                else "was edited (its sha256 differs)"
            )
            raise ElmoResumeError(
                f"--resume: the {what} file {name} {change} since the run started "
                f"(recorded in {path}); resume only on the same corpus"
            )


def resolved_paths(value: Any, resolve: Callable[[str], str] = os.path.realpath) -> Any:
    """A corpus setting (a path, a list of paths, or null) with each path as the file system
    resolves it, so that `a.txt`, `./a.txt` and its absolute path are one file (or as `resolve`
    gives it)."""
    if isinstance(value, str):
        return resolve(value)
    if isinstance(value, (list, tuple)):
        return [resolved_paths(v, resolve) for v in value]
    return value


def check_new_run(output: Path) -> None:
    """Refuse a new run (not `--resume`) in `output` where it holds an earlier run's checkpoint or
    model: nothing of a run is removed unasked."""
    held = []
    if os.path.lexists(output / CHECKPOINT_DIR / checkpoint.MANIFEST):
        try:
            step = checkpoint.read_manifest(output / CHECKPOINT_DIR)["step"]
            held.append(f"its checkpoint at step {step}")
        except ElmoFileError:
            held.append("its checkpoint")
    if os.path.lexists(output / MODEL_DIR) or os.path.lexists(output / HDF5_DIR):
        held.append("its model")
    if held:
        raise ElmoResumeError(
            f"{output} holds a pretrain run ({' and '.join(held)}): pass --resume to continue it, "
            "or remove it (or choose another output)"
        )


def _relative_hint(value: Any) -> str:
    """For a corpus setting recorded by a run from before paths were recorded absolute: where its
    relative paths start."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, str) and not os.path.isabs(v) for v in values):
        return " (relative to the directory that run started in: resume from there)"
    return ""


def with_absolute_corpus(config: Config) -> Config:
    """`config` with its corpus paths (`corpus.train`, `corpus.dev` and the `paths` they come from)
    absolute, as a run records them: it resumes from any working directory (symlinks are kept, so
    that messages name the files given)."""
    config = config.copy()
    for section in ("paths", "corpus"):
        for key in ("train", "dev"):
            if key in config.get(section, {}):
                config[section][key] = resolved_paths(config[section][key], os.path.abspath)
    return config


def start_new_run(
    output: Path,
    config: Config,
    vocab: Vocab,
    corpus_sha256: Dict[str, str],
    bilm: BiLM,
    dev_sha256: Optional[Dict[str, str]] = None,
    init: Optional[Dict[str, Any]] = None,
) -> None:
    """Clear what a run stopped before its first checkpoint left in `output` (`check_new_run`
    refuses any other run), then record this run's config, vocabulary, corpus digests (the dev
    corpus's too, if any), biLM sizes and the `init` record of the biLM it starts from, if any."""
    with write_errors(output):
        output.mkdir(parents=True, exist_ok=True)
        checkpoint.clear_unpublished(output / CHECKPOINT_DIR)
        (output / METRICS_FILE).unlink(missing_ok=True)
        for name in (INIT_RECORD, DEV_RECORD):
            (output / name).unlink(missing_ok=True)
    records = [
        (CONFIG_FILE, config.to_str()),
        (VOCAB_FILE, vocab.to_str()),
        (CORPUS_RECORD, json.dumps(corpus_sha256, indent=1)),
        (OPTIONS_RECORD, json.dumps(bilm.options.to_dict(), indent=1)),
    ]
    if dev_sha256 is not None:
        records.append((DEV_RECORD, json.dumps(dev_sha256, indent=1)))
    if init is not None:
        records.append((INIT_RECORD, json.dumps(init, indent=1)))
    for name, text in records:
        with write_errors(output / name):
            write_atomic(output / name, text)


def recorded_options(output: Path) -> Optional[BiLMOptions]:
    """The biLM sizes a run in `output` started with; None for a run from before they were kept."""
    path = output / OPTIONS_RECORD
    return read_options(path) if os.path.lexists(path) else None


def recorded_init(output: Path) -> Optional[Dict[str, Any]]:
    """The record of the biLM a run in `output` started from (`--init-from`); None for a run from
    scratch or from before it was kept."""
    path = output / INIT_RECORD
    if not os.path.lexists(path):
        return None
    record = parse_json(read_regular(path, "init record", RECORD_BYTES), path, "init record")
    if not isinstance(record, dict) or not isinstance(record.get("init_from"), str):
        raise ElmoFileError(f"{path}: not an init record written by pretrain")
    return record


def interrupted_note(output: Path) -> str:
    """What to do after Ctrl-C stopped a run in `output`: resume from its checkpoint, where it has
    one."""
    try:
        step = checkpoint.read_manifest(output / CHECKPOINT_DIR)["step"]
    except ElmoFileError:
        return "interrupted before a checkpoint was written: run the same command again"
    return f"interrupted; continue with --resume (from the checkpoint of step {step})"


def append_metrics(output: Path, record: Dict[str, Any]) -> None:
    """Append one record of the learning curve to `metrics.jsonl`, a line whole or not at all."""
    path = output / METRICS_FILE
    with write_errors(path, checkpoint.retry_hint(output / CHECKPOINT_DIR)):
        append_whole(path, (json.dumps(record) + "\n").encode("utf-8"))


def forget_metrics_after(output: Path, step: int) -> Tuple[bool, bool]:
    """Drop the learning-curve records of steps after the checkpoint (the resumed run redoes them)
    and a torn last line (a line without its newline that is not a record: a kill while it was
    written). Returns (whether a torn line was dropped, whether a record of `step` is kept); any
    other line that is not a record is an ElmoFileError."""
    path = output / METRICS_FILE
    if not os.path.lexists(path):
        return False, False
    data = read_regular(path, "metrics file", RECORD_BYTES)
    try:
        lines = data.decode(TEXT_ENCODING, "replace").splitlines(keepends=True)
        torn = bool(lines) and not lines[-1].endswith("\n") and not _is_record(lines[-1])
        lines = lines[:-1] if torn else lines
        steps = [json.loads(line)["step"] for line in lines]
        kept = [line for line, s in zip(lines, steps) if s <= step]
    except (ValueError, KeyError, TypeError) as err:
        raise ElmoFileError(
            f"{path}: not a metrics file written by pretrain ({type(err).__name__}: {err})"
        ) from None
    if torn or len(kept) < len(lines):
        with write_errors(path, "free space and run again with --resume"):
            write_atomic(path, "".join(kept))
    return torn, step in steps


def _is_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def save_trained(
    output: Path,
    bilm: BiLM,
    head: torch.nn.Module,
    vocab: Vocab,
    policy: str,
    export: bool,
    summary: Dict[str, Any],
) -> Path:
    """Write the final model (warm state computed), its softmax, vocabulary and `training.json`
    (`summary` plus the weights' sha256 and fingerprint), and the bilm-tf export if asked. Returns
    the model directory. Each directory appears complete or not at all (replacing an earlier run's);
    a full disk is one error."""
    model_dir = output / MODEL_DIR
    bilm.eval()
    bilm.compute_warm_state()
    retry = checkpoint.retry_hint(output / CHECKPOINT_DIR)
    with write_errors(model_dir, retry), atomic_dir(model_dir) as tmp:
        save_bilm(bilm, tmp, state=policy)
        with open(tmp / HEAD_FILE, "wb") as f:
            # to a file object: a failed write keeps its OSError as the cause
            torch.save(head.state_dict(), f)
        (tmp / VOCAB_FILE).write_text(vocab.to_str(), encoding="utf-8")
        embedder = ElmoEmbedder(bilm, policy, source=str(model_dir))
        # as save_bilm recorded it while writing: not hashed a second time
        digests = json.loads((tmp / OWN_CONFIG).read_text(encoding="utf-8"))[DIGESTS]
        summary = {
            **summary,
            "weights_sha256": digests[OWN_WEIGHTS],
            "fingerprint": embedder.fingerprint(),
        }
        (tmp / TRAINING_SUMMARY).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if export:  # under the model's policy: one the layout cannot record is refused
        with write_errors(output / HDF5_DIR, retry), atomic_dir(output / HDF5_DIR) as tmp:
            export_hdf5(embedder, tmp)
    return model_dir


def load_trained(model_dir) -> Tuple[BiLM, torch.nn.Module, Vocab, Config]:
    """A model directory written by `pretrain` -> (biLM, softmax head, vocabulary, training
    config)."""
    model_dir = Path(model_dir)
    path = model_dir / TRAINING_SUMMARY
    summary = parse_json(read_regular(path, "training summary", RECORD_BYTES), path, "summary")
    config = Config().from_str(summary["config"])
    bilm = load_bilm(model_dir).network
    vocab = Vocab.from_disk(model_dir / VOCAB_FILE)
    s = config["softmax"]
    head = build_head(
        s["type"], bilm.options.projection_dim, len(vocab), s["n_samples"], s["adaptive_cutoffs"]
    )
    head.load_state_dict(saved_head(model_dir / HEAD_FILE))
    return bilm, head.eval(), vocab, config


def saved_head(path: Path) -> Dict[str, torch.Tensor]:
    """The softmax weights saved at `path` (a state dict, read without unpickling)."""
    return checkpoint.torch_load(path, what="softmax weights")
