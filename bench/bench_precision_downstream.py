"""Does the biLM's precision change a trained tagger's accuracy? Against the spread of training
seeds.

    python bench/bench_precision_downstream.py [--weights DIR] [--train 2000] [--steps 400] [--seeds
    0 1 2]

Trains `project/configs/tagger_elmo.cfg` (UD English-EWT UPOS, the first `--train` training
sentences) with ELMo features from `--weights` (default: AllenNLP's trained fixture), once per seed
and training precision (`[components.elmo.model] precision`); evaluates on the first 1,000 test
sentences: a pipeline trained in float32 with its features computed in each precision (the only
change is the precision), and one trained in a low precision in that precision. Prints one JSON
line: accuracy per seed as `trained->evaluated`, the largest change from float32->float32 of each,
and the spread (max - min) over seeds in float32.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import spacy
from common import DATA, REPO, machine, read_conllu
from spacy.tokens import Doc, DocBin
from spacy.training import Corpus

CONFIG = REPO / "project" / "configs" / "tagger_elmo.cfg"


def write_split(path: Path, conllu: Path, limit: int) -> Path:
    nlp = spacy.blank("en")
    docs = [
        Doc(nlp.vocab, words=s.words, spaces=s.spaces, tags=s.tags)
        for s in read_conllu(conllu, limit)
    ]
    DocBin(docs=docs).to_disk(path)
    return path


def accuracy(model: Path, test: Path, precision: str) -> float:
    import spacy_elmo  # noqa: F401 (the factory)

    nlp = spacy.load(model, config={"components": {"elmo": {"model": {"precision": precision}}}})
    return nlp.evaluate(list(Corpus(str(test))(nlp)))["tag_acc"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default=str(DATA / "allennlp_elmo_fixture"))
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precisions", default="float32,int8")
    return parser.parse_args()


def train_tagger(
    out: Path, train: Path, dev: Path, weights: str, seed: int, precision: str, steps: int
) -> None:
    """`spacy train` of the tagger config with ELMo features in `precision`."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(CONFIG),
            "--output",
            str(out),
            "--paths.train",
            str(train),
            "--paths.dev",
            str(dev),
            "--paths.elmo",
            weights,
            "--system.seed",
            str(seed),
            "--components.elmo.model.precision",
            precision,
            "--training.max_steps",
            str(steps),
            "--training.eval_frequency",
            "100",
        ],
        check=True,
        capture_output=True,
    )


def main() -> None:
    args = parse_args()
    ud = DATA / "ud_english_ewt"
    precisions = args.precisions.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train = write_split(tmp / "train.spacy", ud / "en_ewt-ud-train.conllu.gz", args.train)
        dev = write_split(tmp / "dev.spacy", ud / "en_ewt-ud-dev.conllu.gz", 500)
        test = write_split(tmp / "test.spacy", ud / "en_ewt-ud-test.conllu.gz", 1000)
        scores = {}
        for seed in args.seeds:
            scores[seed] = {}
            for trained in precisions:
                out = tmp / f"seed{seed}-{trained}"
                train_tagger(out, train, dev, args.weights, seed, trained, args.steps)
                for evaluated in precisions if trained == "float32" else [trained]:
                    scores[seed][f"{trained}->{evaluated}"] = round(
                        accuracy(out / "model-best", test, evaluated), 5
                    )
    float32 = [s["float32->float32"] for s in scores.values()]
    print(
        json.dumps(
            {
                "weights": args.weights,
                "train_sentences": args.train,
                "steps": args.steps,
                "test_sentences": 1000,
                "tag_acc": scores,
                "seed_spread_float32": round(max(float32) - min(float32), 5),
                "largest_change_from_float32": {
                    k: round(max(abs(s[k] - s["float32->float32"]) for s in scores.values()), 5)
                    for k in next(iter(scores.values()))
                    if k != "float32->float32"
                },
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
