"""The steps of the study (project.yml runs them): corpus, baselines, train, evaluate, probe.

    python -m project.scripts.run_study STEP --scale full|smoke [--bilm PATH]
        [--ner-data conll2003|uner] [--tasks pos ner] [--systems base elmo ...] [--fractions F ...]

Every step skips the work whose output already exists, so an interrupted step continues where it
stopped. Runs are named `<task>-<system>-f<fraction>-s<seed>`: task `pos` (UD English-EWT UPOS),
`ner-uner` (Universal NER English-EWT) or `ner-conll2003` (CoNLL-2003); system `base` (hash
embeddings only), `elmo` (+ task-specific ELMo mix at the encoder's input), `spacy-pretrain`
(tok2vec initialised by `spacy pretrain` on the biLM's pretraining text) or `floret` (+ static
floret vectors trained on that text) or `elmo-tuned` (as `elmo`, with the biLM that the `tune` step
tuned on the run's own training set); the `placement` step's systems put ELMo elsewhere:
`elmo-output` (at the encoder's output), `elmo-both` (input and output, two mixes), `elmo-layers01`
(input, mixing layers 0 and 1 only); where dev then chooses one of them over the input, the step
trains the tuned biLM there too (`elmo-tuned-output`, say). At fractions below 1 the seed also draws
the training subset, so each seed sees a different random subset. The runs of the two NER data
sets are kept side by side (the summary gives each its rows); a run of any ELMo system made with
another biLM is redone, and so is a run of the tuned biLM made with another tuning, and a run
of `spacy-pretrain` or `floret` made with other baseline weights or vectors than those there now.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from spacy_elmo.files import write_atomic

from . import convert_data, corpora
from .baselines import pretrain_baselines
from .fetch_assets import sha256_file
from .run_locks import claim
from .scoring import evaluate
from .study import (
    ASSETS,
    CONFIGS,
    ELMO_SYSTEMS,
    PLACED,
    PLACEMENT_FRACTIONS,
    ROOT,
    SCALES,
    TASKS,
    TUNED_AT,
    TUNED_SYSTEMS,
    Scale,
    Task,
    errors,
    machine_line,
    metrics_dir,
    read_json,
    run_first,
    shown,
    spacy_train,
)
from .tuned_runs import TunedRuns

SYSTEMS_MAIN = ["base", "elmo", "spacy-pretrain", "floret", "elmo-tuned"]
SYSTEMS_SAMPLE = ["base", "elmo", "elmo-tuned"]
# `elmo` and `base` come from main and sample
SYSTEMS_PLACEMENT = [s for s in PLACED if s != "elmo"]
# the modules that turn a data file into a split (a split records their sha256)
CONVERTERS = (convert_data, corpora)
# a run record that is not there
NOT_TRAINED = "not trained"
# the runs (of `Study.runs`) -> the project.yml command that trains them
TRAINED_BY = {"main": "train", "sample": "sample-efficiency", "placement": "placement"}
# training step -> the runs it trains
STEPS = {
    "train": "main",
    "sample": "sample",
    "placement": "placement",
}


class Study(TunedRuns):
    def __init__(
        self,
        scale: Scale,
        bilm: Optional[str],
        ner_data: str,
        tasks: Sequence[str] = ("pos", "ner"),
        systems: Optional[Sequence[str]] = None,
        fractions: Optional[Sequence[float]] = None,
    ):
        self.scale = scale
        scale.check_fractions(fractions or [])
        self.tasks = [TASKS["pos"] if name == "pos" else TASKS[ner_data] for name in tasks]
        self.systems = systems
        self.fractions = fractions
        self.assets = ASSETS
        self.corpus = ROOT / "project" / "corpus" / scale.name
        self.training = ROOT / "project" / "training" / scale.name
        self.metrics = metrics_dir(scale.name)
        self.bilm = bilm or str(self.training / "bilm" / "model")
        self._digests: Dict[Tuple[Path, int, int], str] = {}

    @cached_property
    def bilm_info(self) -> Tuple[int, int, str]:
        """(output layers, width, fingerprint) of the biLM: the sizes ElmoFeatures.v1 needs, and the
        fingerprint that ties each ELMo run (and the probe) to the biLM it was made with."""
        from spacy_elmo import load_bilm

        bilm = load_bilm(self.bilm)
        return bilm.num_output_layers, bilm.output_dim, bilm.fingerprint()

    def other_bilm(self, record: Dict) -> bool:
        """Whether a record of an ELMo run or of the probe was made with another biLM than the
        current one."""
        return record.get("bilm_fingerprint") != self.bilm_info[2]

    def stale(self, record_path: Path, task: Task) -> bool:
        """Whether a run record is missing or out of date (`why_stale` says why)."""
        return self.why_stale(record_path, task) is not None

    def why_stale(self, record_path: Path, task: Task) -> Optional[str]:
        """Why a run record is stale, or None where it is not: it is missing (NOT_TRAINED), is of
        other data than the task's (another --ner-data), was made from other inputs than the run's
        now (its config, training subset or dev split changed; records made before runs recorded
        their inputs are trusted), is a baseline's run made with another baseline artefact than
        the one there now (records from before runs recorded it are trusted), is an ELMo run made
        with another biLM than the current one, or is a run of the tuned biLM made with another
        tuning than the current one of its training set (or with none now)."""
        if not record_path.exists():
            return NOT_TRAINED
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
            return f"{shown(record_path)} is not whole JSON ({err}): a write cut short"
        if record.get("data") != task.data:
            return f"made on other data ({record.get('data')})"
        inputs = record.get("inputs")
        if inputs is not None:
            now = self.inputs(task, record["system"], record["fraction"], record["seed"])
            if inputs != now:
                changed = sorted(
                    k for k in inputs.keys() | now.keys() if inputs.get(k) != now.get(k)
                )
                return f"made from other inputs ({', '.join(changed)} changed since)"
        baseline = self.baseline_of(record["system"])
        if "baseline" in record and record["baseline"] != baseline:
            [(path, now)] = baseline.items()
            if now is None:
                return f"its baseline {path} is missing: {run_first('baselines')}"
            return f"made with another baseline than {path} now (the baselines step made it again)"
        if record["system"] not in ELMO_SYSTEMS:
            return None
        if self.other_bilm(record):
            return (
                f"made with another biLM (fingerprint {str(record.get('bilm_fingerprint'))[:12]}, "
                f"the current biLM's {self.bilm_info[2][:12]}, {self.bilm})"
            )
        if record["system"] in TUNED_SYSTEMS and self.other_tuning(record, task):
            return "made with another tuning of the biLM than the current one of its training set"
        return None

    def digest(self, path: Path) -> str:
        """The sha256 of a file, computed once per size and modification time."""
        status = path.stat()
        key = (path, status.st_size, status.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = sha256_file(path)
        return self._digests[key]

    def inputs(self, task: Task, system: str, fraction: float, seed: int) -> Dict[str, str]:
        """The sha256 of what a run reads besides its biLM and baselines: its config, its
        training subset and the dev split, by their paths in the project."""
        files = [
            self.config_of(task, system),
            self.split(task, "train", fraction, seed),
            self.split(task, "dev"),
        ]
        if system == "spacy-pretrain":
            files.append(CONFIGS / "pretrain_tok2vec.cfg")
        return {shown(path): self.digest(path) for path in files}

    def baseline_of(self, system: str) -> Optional[Dict[str, Optional[str]]]:
        """The baseline artefact a run of `system` starts from, by its path in the project -> its
        sha256 (None where it is missing): the tok2vec weights of `spacy pretrain`, or the floret
        vectors (the sha256 of their files' names and sha256); None for the other systems."""
        baselines = self.training / "baselines"
        if system == "spacy-pretrain":
            path = baselines / "tok2vec" / "model-last.bin"
            return {shown(path): self.digest(path) if path.is_file() else None}
        if system == "floret":
            path = baselines / "floret" / "vectors"
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
            listing = "".join(f"{p.relative_to(path)} {self.digest(p)}\n" for p in files)
            return {shown(path): sha256_text(listing) if files else None}
        return None

    def made_from(self, task: Task, split: str, fraction: float, seed: int) -> Dict:
        """What the corpus step makes a split from: the data file's sha256, the subset's fraction,
        seed and size limit, and the converters' sha256."""
        limit = self.scale.train_sentences if split == "train" else self.scale.eval_sentences
        converters = [Path(module.__file__) for module in CONVERTERS]
        return {
            "source_sha256": self.digest(self.assets / task.files[split]),
            "fraction": fraction,
            "seed": seed,
            "limit": limit or 0,
            "converters": {path.name: self.digest(path) for path in converters},
        }

    # ------------------------------------------------------------------ paths
    def config_of(self, task: Task, system: str) -> Path:
        """The config a run of `system` trains (`spacy-pretrain`'s gets its [pretraining] section
        added as it trains)."""
        return CONFIGS / f"{task.config}_{ELMO_SYSTEMS.get(system, 'base')}.cfg"

    def split_path(self, task: Task, split: str, fraction: float = 1.0, seed: int = 0) -> Path:
        """Where the corpus step writes a split (or the training subset of a fraction and seed)."""
        name = split if fraction >= 1.0 else f"{split}-f{fraction:g}-s{seed}"
        return self.corpus / task.source / f"{name}.spacy"

    def split(self, task: Task, split: str, fraction: float = 1.0, seed: int = 0) -> Path:
        """The converted split; SystemExit naming it and the corpus step where it is missing."""
        path = self.split_path(task, split, fraction, seed)
        if not path.is_file():
            raise SystemExit(f"error: {shown(path)} is missing: {run_first('corpus')}")
        return path

    def runs(self, which: str) -> Iterator[Tuple[Task, str, float, int]]:
        """(task, system, fraction, seed) of the main comparison (`main`), the smaller fractions
        (`sample`) or where ELMo goes (`placement`), less those that --systems or --fractions leave
        out."""
        systems, fractions = {
            "main": (SYSTEMS_MAIN, [1.0]),
            "sample": (SYSTEMS_SAMPLE, [f for f in self.scale.fractions if f < 1.0]),
            "placement": (SYSTEMS_PLACEMENT, PLACEMENT_FRACTIONS),
        }[which]
        for task in self.tasks:
            for fraction in fractions:
                if self.fractions is not None and fraction not in self.fractions:
                    continue
                for system in systems:
                    if self.systems is None or system in self.systems:
                        for seed in self.scale.seeds:
                            yield task, system, fraction, seed

    @staticmethod
    def run_id(task: Task, system: str, fraction: float, seed: int) -> str:
        return f"{task.run_name}-{system}-f{fraction:g}-s{seed}"

    # ------------------------------------------------------------------ steps
    def corpus_step(self) -> None:
        """Convert every split (and the training subsets of the smaller fractions) to .spacy
        files; SystemExit naming the data files the assets step has not fetched, before any."""
        missing = [
            shown(self.assets / task.files[split])
            for task in self.tasks
            for split in ("train", "dev", "test")
            if not (self.assets / task.files[split]).is_file()
        ]
        if missing:
            raise SystemExit(f"error: {', '.join(missing)} missing: {run_first('assets')}")
        for task in self.tasks:
            jobs = [(split, 1.0, 0) for split in ("train", "dev", "test")]
            jobs += [
                ("train", f, s) for f in self.scale.fractions if f < 1.0 for s in self.scale.seeds
            ]
            for split, fraction, seed in jobs:
                target = self.split_path(task, split, fraction, seed)
                made_from = self.made_from(task, split, fraction, seed)
                record = target.with_suffix(".inputs.json")
                if target.exists() and record.is_file() and read_json(record) == made_from:
                    continue
                n = convert_data.convert(
                    task.kind,
                    self.assets / task.files[split],
                    target,
                    fraction,
                    seed,
                    made_from["limit"],
                )
                # after the split: it says the split is complete
                write_atomic(record, json.dumps(made_from, indent=2))
                print(f"{target.relative_to(ROOT)}: {n} sentences")

    def train_step(self, which: str) -> None:
        """Train the runs of `which` that are not done; `placement` then, once dev can choose, the
        tuned biLM at the chosen placements. The runs that other processes hold are named at the
        end: this step is not complete before they are."""
        left = self.train_runs(which, list(self.runs(which)))
        if which == "placement":
            runs, waiting = self.tuned_placed()
            left += self.train_runs("the tuned biLM at the placement chosen on dev", runs)
            if waiting:
                print(
                    "the tuned biLM's placement is not chosen yet for "
                    f"{', '.join(waiting)}: the ELMo runs there are not all done; rerun this step"
                )
        if left:
            print(
                f"{len(left)} run(s) left to another process, which holds their locks: "
                f"{', '.join(left)}; the step is complete once they are done (rerun it to check)"
            )

    def train_runs(self, which: str, runs: List[Tuple[Task, str, float, int]]) -> List[str]:
        """Train those of `runs` that are not done; the ids of those another process holds."""
        reasons = {
            self.run_id(*r): self.why_stale(self.run_dir(*r) / "train.json", r[0]) for r in runs
        }
        todo = [r for r in runs if reasons[self.run_id(*r)] is not None]
        todo = self.runnable(todo)
        if any(system in ELMO_SYSTEMS for _, system, _, _ in todo):
            # the biLM loaded now: one that does not load stops the step before any run
            _ = self.bilm_info
        print(f"{which}: {len(todo)} run(s) to train")
        left = []
        for i, (task, system, fraction, seed) in enumerate(todo, 1):
            run_id, out = (
                self.run_id(task, system, fraction, seed),
                self.run_dir(task, system, fraction, seed),
            )
            with claim(self.training / "runs" / f"{run_id}.lock") as mine:
                if not mine:
                    print(f"[{i}/{len(todo)}] {run_id}: taken by another process", flush=True)
                    left.append(run_id)
                    continue
                if not self.stale(out / "train.json", task):
                    print(f"[{i}/{len(todo)}] {run_id}: done by another process", flush=True)
                    continue
                again = "" if reasons[run_id] == NOT_TRAINED else f" again ({reasons[run_id]})"
                print(f"[{i}/{len(todo)}] training {run_id}{again}", flush=True)
                if out.exists():  # unfinished, or made on other data or with an earlier biLM
                    shutil.rmtree(out)
                self.train_one(task, system, fraction, seed)
        return left

    def run_dir(self, task: Task, system: str, fraction: float, seed: int) -> Path:
        return self.training / "runs" / self.run_id(task, system, fraction, seed)

    def train_one(self, task: Task, system: str, fraction: float, seed: int) -> None:
        out = self.run_dir(task, system, fraction, seed)
        # an elmo-tuned run's biLM, and its fingerprint as the run starts
        tuned = (
            (self.tuned_bilm(task, fraction, seed), self.tuned_fingerprint(task, fraction, seed))
            if system in TUNED_SYSTEMS
            else None
        )
        inputs = self.inputs(task, system, fraction, seed)
        baseline = self.baseline_of(system)
        config = self.config_of(task, system)
        if system == "spacy-pretrain":
            config = with_pretraining_section(config, out)
        overrides: Dict[str, Any] = {
            "paths.train": str(self.split(task, "train", fraction, seed)),
            "paths.dev": str(self.split(task, "dev")),
            "system.seed": seed,
            **self.scale.train_overrides,
        }
        baselines = self.training / "baselines"
        if system in ELMO_SYSTEMS:
            overrides["paths.elmo"] = self.bilm if tuned is None else str(tuned[0])
            overrides.update(size_overrides(config, *self.bilm_info[:2]))
        elif system == "spacy-pretrain":
            overrides["paths.init_tok2vec"] = str(baselines / "tok2vec" / "model-last.bin")
        elif system == "floret":
            overrides["paths.vectors"] = str(baselines / "floret" / "vectors")
            overrides["components.tok2vec.model.embed.include_static_vectors"] = True
        start = time.perf_counter()
        spacy_train(config, out, overrides)
        seconds = time.perf_counter() - start
        meta = json.loads((out / "model-best" / "meta.json").read_text(encoding="utf-8"))
        record = {
            "task": task.name,
            "data": task.data,
            "system": system,
            "fraction": fraction,
            "seed": seed,
            "train_sentences": count_docs(self.split(task, "train", fraction, seed)),
            "train_seconds": seconds,
            "dev": meta.get("performance", {}).get(task.metric),
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine_line(),
            "inputs": inputs,
        }
        if baseline is not None:
            record["baseline"] = baseline
        if system in ELMO_SYSTEMS:
            record["bilm_fingerprint"] = self.bilm_info[2]
        if tuned is not None:
            record["tuned_bilm"], record["tuned_bilm_fingerprint"] = shown(tuned[0]), tuned[1]
        write_atomic(out / "train.json", json.dumps(record, indent=2))

    def evaluate_step(self) -> None:
        """Test scores, speed and size of every trained run whose metrics are missing or record
        another training of it (its train.json: the run was trained again); a trained run that is
        stale (made with another biLM than --bilm, say) is named, and left to its training step."""
        runs_dir = self.metrics / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        runs = [(which, r) for which in STEPS.values() for r in self.runs(which)]
        runs += [("placement", r) for r in self.tuned_placed()[0]]
        for which, (task, system, fraction, seed) in runs:
            out = self.run_dir(task, system, fraction, seed)
            run_id = self.run_id(task, system, fraction, seed)
            target = runs_dir / f"{run_id}.json"
            reason = self.why_stale(out / "train.json", task)
            if reason is not None:
                if reason != NOT_TRAINED:
                    print(
                        f"{run_id}: not evaluated: {reason}; the {TRAINED_BY[which]} step "
                        "trains it again (with the same --vars)"
                    )
                continue
            record = json.loads((out / "train.json").read_text(encoding="utf-8"))
            done = self.why_stale(target, task)
            if done is None and evaluated(target, record):
                continue
            if done is not None and done != NOT_TRAINED:
                print(f"{shown(target)}: evaluated again ({done})")
            record.update(evaluate(out / "model-best", self.split(task, "test"), task.metric))
            write_atomic(target, json.dumps(record, indent=2, sort_keys=True) + "\n")
            print(
                f"{target.relative_to(ROOT)}: test {task.metric} {record['test'][task.metric]:.4f}"
            )


def evaluated(metrics: Path, trained: Dict) -> bool:
    """Whether the run's metrics record (`metrics`) is of the training that `trained` (its
    train.json) records: `evaluate` copies every field of it."""
    record = json.loads(metrics.read_text(encoding="utf-8"))
    return all(record.get(key) == value for key, value in trained.items())


def with_pretraining_section(config: Path, out: Path) -> Path:
    """`config` plus the [pretraining] section of pretrain_tok2vec.cfg, written to out/: spaCy loads
    `init_tok2vec` weights only into the component that a non-empty [pretraining] section names,
    and silently skips them otherwise."""
    from thinc.api import Config

    merged = Config().from_disk(config, interpolate=False)
    pretraining = Config().from_disk(CONFIGS / "pretrain_tok2vec.cfg", interpolate=False)
    merged["pretraining"] = pretraining["pretraining"]
    merged["corpora"]["pretrain"] = pretraining["corpora"]["pretrain"]
    merged["paths"]["raw_text"] = None
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{config.stem}+pretraining.cfg"
    merged.to_disk(target)
    return target


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def count_docs(path: Path) -> int:
    from spacy.tokens import DocBin

    return len(DocBin().from_disk(path))


def size_overrides(config: Path, n_layers: int, width: int) -> Dict[str, int]:
    """`spacy train` overrides that give every ElmoFeatures block of `config` the biLM's sizes."""
    from thinc.api import Config

    from spacy_elmo.layers import feature_paths

    sections = Config().from_disk(config, interpolate=False)["components"]
    return {
        f"{path}.{setting}": value
        for path in feature_paths(sections, "components")
        for setting, value in (("n_layers", n_layers), ("width", width))
    }


@errors()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=["corpus", "baselines", *STEPS, "evaluate"])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--bilm", default="", help="the biLM (default: the one the pretrain step trained)"
    )
    parser.add_argument("--ner-data", choices=["uner", "conll2003"], default="uner")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=["pos", "ner"],
        default=["pos", "ner"],
        help="only these tasks (e.g. to run the study in parts)",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=SYSTEMS_MAIN + SYSTEMS_PLACEMENT + [TUNED_AT[s] for s in SYSTEMS_PLACEMENT],
        default=None,
        help="only these systems",
    )
    parser.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        default=None,
        help="only these of the study's fractions of the training data (e.g. 0.1 1)",
    )
    args = parser.parse_args()
    study = Study(
        SCALES[args.scale], args.bilm, args.ner_data, args.tasks, args.systems, args.fractions
    )
    if args.step == "corpus":
        study.corpus_step()
    elif args.step == "baselines":
        pretrain_baselines(study.scale, study.training, study.metrics, study.systems, args.threads)
    elif args.step in STEPS:
        study.train_step(STEPS[args.step])
    else:
        study.evaluate_step()


if __name__ == "__main__":
    main()
