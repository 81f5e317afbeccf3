"""The side of the study's training steps of the tuned biLM's runs (`elmo-tuned`, and
`elmo-tuned-output` and the like): where each run finds the biLM that the `tune` step
(tune_bilm.py) tuned on its training set, that biLM's fingerprint, whether a run record is of the
current tuning, which of a step's runs can be trained, and which runs the `placement` step adds at
the placement dev chose."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .study import (
    PLACED,
    PLACEMENT_FRACTIONS,
    STAMP,
    TUNED_AT,
    TUNED_SYSTEMS,
    Scale,
    Task,
    chosen_placement,
    read_json,
    run_first,
    shown,
    tunable_model,
)


class TunedRuns:
    """Mixed into run_study.Study, whose `training` (the scale's training directory), `bilm` (the
    path of the untuned biLM), `bilm_info` (its fingerprint last), its selection of tasks, systems
    and fractions, and its `run_dir` and `stale` it reads."""

    training: Path
    bilm: str
    bilm_info: Tuple[int, int, str]
    scale: Scale
    tasks: List[Task]
    systems: Optional[Sequence[str]]
    fractions: Optional[Sequence[float]]

    def tuned_bilm(self, task: Task, fraction: float, seed: int) -> Path:
        """Where the `tune` step writes the biLM tuned on a training set: the whole split, or the
        subset of that fraction and seed."""
        name = "f1" if fraction >= 1.0 else f"f{fraction:g}-s{seed}"
        return self.training / "tuned" / task.run_name / name / "model"

    def tuned_fingerprint(self, task: Task, fraction: float, seed: int) -> Optional[str]:
        """The fingerprint of the biLM tuned on a training set; None where the `tune` step has not
        finished tuning the current biLM on it."""
        model = self.tuned_bilm(task, fraction, seed)
        summary, stamp = read_json(model / "training.json"), read_json(model.parent / STAMP)
        if summary is None or stamp is None or stamp["bilm_fingerprint"] != self.bilm_info[2]:
            return None
        return summary["fingerprint"]

    def other_tuning(self, record: Dict, task: Task) -> bool:
        """Whether the record of a run of the tuned biLM was made with another tuned biLM than the
        current tuning of its training set (or with none now)."""
        tuned = self.tuned_fingerprint(task, record["fraction"], record["seed"])
        return tuned is None or record.get("tuned_bilm_fingerprint") != tuned

    def runnable(
        self, runs: List[Tuple[Task, str, float, int]]
    ) -> List[Tuple[Task, str, float, int]]:
        """`runs` less those of the tuned biLM where the biLM cannot be tuned (the `tune` step
        records why); stops, before any training, where a tuned biLM that one of them needs is
        missing."""
        tuned = [(task, f, s) for task, system, f, s in runs if system in TUNED_SYSTEMS]
        if not tuned:
            return runs
        model, reason = tunable_model(self.bilm)
        if model is None:
            print(f"elmo-tuned: not run, as the biLM cannot be tuned: {reason}")
            return [r for r in runs if r[1] not in TUNED_SYSTEMS]
        missing = sorted(
            {shown(self.tuned_bilm(*r)) for r in tuned if self.tuned_fingerprint(*r) is None}
        )
        if missing:
            raise SystemExit(
                "error: the runs of the tuned biLM read the biLM tuned on their training set, and "
                f"the current biLM is not tuned in {', '.join(missing)}: {run_first('tune')}"
            )
        return runs

    def tuned_placed(self) -> Tuple[List[Tuple[Task, str, float, int]], List[str]]:
        """The runs of the tuned biLM at the placement dev chose for ELMo, where that is not the
        input (the tuned biLM's runs at the input are the `train` and `sample` steps'), and the
        task and fraction pairs where dev cannot choose yet."""
        runs, waiting = [], []
        for task in self.tasks:
            for fraction in PLACEMENT_FRACTIONS:
                if self.fractions is not None and fraction not in self.fractions:
                    continue
                dev = self.placement_dev(task, fraction)
                if dev is None:
                    waiting.append(f"{task.run_name} at {100 * fraction:g}%")
                    continue
                tuned = TUNED_AT[chosen_placement(dev)]
                if tuned != "elmo-tuned" and (self.systems is None or tuned in self.systems):
                    runs += [(task, tuned, fraction, seed) for seed in self.scale.seeds]
        return runs, waiting

    def placement_dev(self, task: Task, fraction: float) -> Optional[Dict[str, float]]:
        """The dev score of ELMo at the input and at each other placement, as placement -> mean over
        the seeds; None while one of these runs is missing or of an earlier biLM."""
        dev = {}
        for system in PLACED:
            records = [
                self.run_dir(task, system, fraction, seed) / "train.json"
                for seed in self.scale.seeds
            ]
            if any(self.stale(record, task) for record in records):
                return None
            dev[system] = statistics.fmean(read_json(record)["dev"] for record in records)
        return dev
