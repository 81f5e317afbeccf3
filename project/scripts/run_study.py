"""The steps of the study (project.yml runs them): corpus, baselines, train, evaluate, probe.

    python project/scripts/run_study.py STEP --scale full|smoke [--bilm PATH] [--ner-data
    conll2003|uner]
                                        [--tasks pos ner] [--systems base elmo ...] [--fractions 0.1
                                        ...]

Every step skips the work whose output already exists, so an interrupted step continues where it
stopped. Runs are named `<task>-<system>-f<fraction>-s<seed>`: task `pos` (UD English-EWT UPOS),
`ner-uner` (Universal NER English-EWT) or `ner-conll2003` (CoNLL-2003); system `base` (hash
embeddings only), `elmo` (+ task-specific ELMo mix at the encoder's input), `spacy-pretrain`
(tok2vec initialised by `spacy pretrain` on the biLM's pretraining text) or `floret` (+ static
floret vectors trained on that text); the `placement` step's systems put ELMo elsewhere:
`elmo-output` (at the encoder's output), `elmo-both` (input and output, two mixes), `elmo-layers01`
(input, mixing layers 0 and 1 only). At fractions below 1 the seed also draws the training subset,
so each seed sees a different random subset. The runs of the two NER data sets are kept side by side
(the summary gives each its rows); a run of any ELMo system made with another biLM is redone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import convert_data
from scoring import evaluate
from study import ELMO_SYSTEMS, ROOT, SCALES, Scale, machine_line, metrics_dir

ASSETS = ROOT / "project" / "assets"
CONFIGS = ROOT / "project" / "configs"
LM_TEXT = ["wikitext2.train.txt", "1b_benchmark.dev.tokens", "1b_benchmark.test.tokens"]
SYSTEMS_MAIN = ["base", "elmo", "spacy-pretrain", "floret"]
SYSTEMS_SAMPLE = ["base", "elmo"]
SYSTEMS_PLACEMENT = [
    "elmo-output",
    "elmo-both",
    "elmo-layers01",
]  # `elmo` and `base` come from main and sample
PLACEMENT_FRACTIONS = [0.1, 1.0]
STEPS = {
    "train": "main",
    "sample": "sample",
    "placement": "placement",
}  # training step -> the runs it trains


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


class Study:
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
        self.tasks = [TASKS["pos"] if name == "pos" else TASKS[ner_data] for name in tasks]
        self.systems = systems
        self.fractions = fractions
        self.corpus = ROOT / "project" / "corpus" / scale.name
        self.training = ROOT / "project" / "training" / scale.name
        self.metrics = metrics_dir(scale.name)
        self.bilm = bilm or str(self.training / "bilm" / "model")

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
        """Whether a run record is missing, is of other data than the task's (another --ner-data),
        or is an ELMo run made with another biLM than the current one."""
        if not record_path.exists():
            return True
        record = json.loads(record_path.read_text(encoding="utf-8"))
        return record.get("data") != task.data or (
            record["system"] in ELMO_SYSTEMS and self.other_bilm(record)
        )

    # ------------------------------------------------------------------ paths
    def split(self, task: Task, split: str, fraction: float = 1.0, seed: int = 0) -> Path:
        name = split if fraction >= 1.0 else f"{split}-f{fraction:g}-s{seed}"
        return self.corpus / task.source / f"{name}.spacy"

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
        files."""
        for task in self.tasks:
            jobs = [(split, 1.0, 0) for split in ("train", "dev", "test")]
            jobs += [
                ("train", f, s) for f in self.scale.fractions if f < 1.0 for s in self.scale.seeds
            ]
            for split, fraction, seed in jobs:
                target = self.split(task, split, fraction, seed)
                if target.exists():
                    continue
                limit = (
                    self.scale.train_sentences if split == "train" else self.scale.eval_sentences
                )
                n = convert_data.convert(
                    task.kind, ASSETS / task.files[split], target, fraction, seed, limit or 0
                )
                print(f"{target.relative_to(ROOT)}: {n} sentences")

    def baselines_step(self, threads: int) -> None:
        """The two baselines that use the biLM's pretraining text: `spacy pretrain` and floret
        vectors (with --systems, only those named). baselines.json keeps the cost of each."""
        out = self.training / "baselines"
        out.mkdir(parents=True, exist_ok=True)
        text_dir = self.training / "text"
        texts = [self.scale.slice_text(ASSETS / "lm" / name, text_dir) for name in LM_TEXT]
        jsonl = out / "raw_text.jsonl"
        if not jsonl.exists():
            with open(jsonl.with_suffix(".part"), "w", encoding="utf-8") as f:
                for path in texts:
                    with open(path, encoding="utf-8") as src:
                        for line in src:
                            if line.split():
                                f.write(json.dumps({"text": " ".join(line.split())}) + "\n")
            jsonl.with_suffix(".part").replace(jsonl)
        record = self.metrics / "baselines.json"
        costs = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
        if self.systems is None or "spacy-pretrain" in self.systems:
            self._spacy_pretrain(jsonl, out / "tok2vec")
            costs["spacy-pretrain"] = json.loads(
                (out / "tok2vec" / "pretrain.json").read_text(encoding="utf-8")
            )
        if self.systems is None or "floret" in self.systems:
            self._floret(jsonl, out / "floret", threads)
            costs["floret"] = json.loads(
                (out / "floret" / "floret.json").read_text(encoding="utf-8")
            )
        self.metrics.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(costs, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def _spacy_pretrain(self, jsonl: Path, out: Path) -> None:
        final = out / "model-last.bin"
        if final.exists():
            return
        overrides = [
            f"--{k}={json.dumps(v)}"
            for k, v in self.scale.baseline_overrides.items()
            if k.startswith("pretraining.")
        ]
        start = time.perf_counter()
        run(
            [
                sys.executable,
                "-m",
                "spacy",
                "pretrain",
                str(CONFIGS / "pretrain_tok2vec.cfg"),
                str(out),
                "--paths.raw_text",
                str(jsonl),
                *overrides,
            ]
        )
        record = {"seconds": time.perf_counter() - start, "text": str(jsonl.relative_to(ROOT))}
        (out / "pretrain.json").write_text(json.dumps(record), encoding="utf-8")

    def _floret(self, jsonl: Path, out: Path, threads: int) -> None:
        vectors = out / "vectors"
        if (vectors / "vectors.cfg").exists() or (vectors / "config.cfg").exists():
            return
        import floret

        out.mkdir(parents=True, exist_ok=True)
        text = out / "text.txt"
        with open(jsonl, encoding="utf-8") as src, open(text, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(json.loads(line)["text"] + "\n")
        epochs = self.scale.baseline_overrides.get("pretraining.max_epochs", 1) * 2
        start = time.perf_counter()
        model = floret.train_unsupervised(
            str(text),
            model="cbow",
            mode="floret",
            hashCount=2,
            bucket=50000,
            minn=3,
            maxn=5,
            minCount=2,
            dim=100,
            epoch=epochs,
            thread=threads,
        )
        model.save_floret_vectors(str(out / "vectors.floret"))
        seconds = time.perf_counter() - start
        run(
            [
                sys.executable,
                "-m",
                "spacy",
                "init",
                "vectors",
                "en",
                str(out / "vectors.floret"),
                str(vectors),
                "--mode",
                "floret",
            ]
        )
        (out / "floret.json").write_text(
            json.dumps({"seconds": seconds, "dim": 100, "epochs": epochs}), encoding="utf-8"
        )

    def train_step(self, which: str) -> None:
        todo = [r for r in self.runs(which) if self.stale(self.run_dir(*r) / "train.json", r[0])]
        print(f"{which}: {len(todo)} run(s) to train")
        for i, (task, system, fraction, seed) in enumerate(todo, 1):
            run_id, out = (
                self.run_id(task, system, fraction, seed),
                self.run_dir(task, system, fraction, seed),
            )
            with claim(self.training / "runs" / f"{run_id}.lock") as mine:
                if not mine or not self.stale(out / "train.json", task):
                    print(f"[{i}/{len(todo)}] {run_id}: taken by another process", flush=True)
                    continue
                print(f"[{i}/{len(todo)}] training {run_id}", flush=True)
                if out.exists():  # unfinished, or made on other data or with an earlier biLM
                    shutil.rmtree(out)
                self.train_one(task, system, fraction, seed)

    def run_dir(self, task: Task, system: str, fraction: float, seed: int) -> Path:
        return self.training / "runs" / self.run_id(task, system, fraction, seed)

    def train_one(self, task: Task, system: str, fraction: float, seed: int) -> None:
        out = self.run_dir(task, system, fraction, seed)
        config = CONFIGS / f"{task.config}_{ELMO_SYSTEMS.get(system, 'base')}.cfg"
        if system == "spacy-pretrain":
            config = with_pretraining_section(config, out)
        args = [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(config),
            "--output",
            str(out),
            "--paths.train",
            str(self.split(task, "train", fraction, seed)),
            "--paths.dev",
            str(self.split(task, "dev")),
            "--system.seed",
            str(seed),
        ]
        args += [f"--{k}={json.dumps(v)}" for k, v in self.scale.train_overrides.items()]
        baselines = self.training / "baselines"
        if system in ELMO_SYSTEMS:
            args += ["--paths.elmo", self.bilm, *size_overrides(config, *self.bilm_info[:2])]
        elif system == "spacy-pretrain":
            args += ["--paths.init_tok2vec", str(baselines / "tok2vec" / "model-last.bin")]
        elif system == "floret":
            args += [
                "--paths.vectors",
                str(baselines / "floret" / "vectors"),
                "--components.tok2vec.model.embed.include_static_vectors=true",
            ]
        start = time.perf_counter()
        run(args)
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
        }
        if system in ELMO_SYSTEMS:
            record["bilm_fingerprint"] = self.bilm_info[2]
        (out / "train.json").write_text(json.dumps(record, indent=2), encoding="utf-8")

    def evaluate_step(self) -> None:
        """Test scores, speed and size of every trained run that has none yet."""
        runs_dir = self.metrics / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        for which in STEPS.values():
            for task, system, fraction, seed in self.runs(which):
                out = self.run_dir(task, system, fraction, seed)
                target = runs_dir / f"{self.run_id(task, system, fraction, seed)}.json"
                if not self.stale(target, task) or self.stale(out / "train.json", task):
                    continue
                record = json.loads((out / "train.json").read_text(encoding="utf-8"))
                record.update(evaluate(out / "model-best", self.split(task, "test"), task.metric))
                target.write_text(
                    json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
                )
                print(
                    f"{target.relative_to(ROOT)}: test {task.metric} "
                    f"{record['test'][task.metric]:.4f}"
                )


@contextmanager
def claim(lock: Path) -> Iterator[bool]:
    """Whether this process may do the work `lock` guards: so that several processes (one per core,
    say) can run the same step and share its runs. A lock left by a process that died is taken
    over."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if process_alive(lock):
                break
            lock.unlink(missing_ok=True)
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        try:
            yield True
        finally:
            lock.unlink(missing_ok=True)
        return
    yield False


def process_alive(lock: Path) -> bool:
    """Whether the process whose pid `lock` holds is running."""
    try:
        pid = int(lock.read_text(encoding="utf-8"))
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's process
    except (ProcessLookupError, ValueError, FileNotFoundError):
        return False
    return True


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


def count_docs(path: Path) -> int:
    from spacy.tokens import DocBin

    return len(DocBin().from_disk(path))


def size_overrides(config: Path, n_layers: int, width: int) -> List[str]:
    """`spacy train` overrides that give every ElmoFeatures block of `config` the biLM's sizes."""
    from thinc.api import Config

    from spacy_elmo.layers import feature_paths

    sections = Config().from_disk(config, interpolate=False)["components"]
    return [
        f"--{path}.{setting}={value}"
        for path in feature_paths(sections, "components")
        for setting, value in (("n_layers", n_layers), ("width", width))
    ]


def run(args: List[str]) -> None:
    """Run a command, its output shown as it comes; a failure stops the step with the command's
    message."""
    print("$ " + " ".join(args[1:] if args[0] == sys.executable else args), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    code = subprocess.call(args, env=env)
    if code != 0:
        raise SystemExit(f"error: the command above failed with exit code {code}")


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
        choices=SYSTEMS_MAIN + SYSTEMS_PLACEMENT,
        default=None,
        help="only these systems",
    )
    parser.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        default=None,
        help="only these fractions of the training data (e.g. 0.1 1)",
    )
    args = parser.parse_args()
    study = Study(
        SCALES[args.scale], args.bilm, args.ner_data, args.tasks, args.systems, args.fractions
    )
    if args.step == "corpus":
        study.corpus_step()
    elif args.step == "baselines":
        study.baselines_step(args.threads)
    elif args.step in STEPS:
        study.train_step(STEPS[args.step])
    else:
        study.evaluate_step()


if __name__ == "__main__":
    main()
