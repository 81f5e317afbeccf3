"""The token encoder alone (character CNN, highways, projection), by precision: what each distinct
word costs before the LSTM.

    python bench/bench_token_encoder.py --size original [--precisions float32,int8] [--rounds 4]

The distinct words of the UD English-EWT test sentences (5,629), in chunks of `--chunk` words as the
runner encodes them, one torch thread, the precisions alternating round by round in one process
(so that a host's load moves them alike). Prints one JSON line: seconds per round per precision,
words/s at the best round, the host.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import DATA, machine, read_conllu_sentences, weights_dir

from spacy_elmo import load_bilm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="original", choices=["small", "medium", "original"])
    parser.add_argument("--precisions", default="float32,int8")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    test = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz")
    words = sorted({w for sentence in test for w in sentence})
    precisions = args.precisions.split(",")
    bilms = {p: load_bilm(weights_dir(args.size), precision=p) for p in precisions}
    encoders = {p: bilm.runner.copies.token_encoder() for p, bilm in bilms.items()}
    token_ids = bilms[precisions[0]].network.token_encoder.token_ids
    ids = torch.from_numpy(token_ids.words_ids(words)).long()
    seconds: dict = {p: [] for p in precisions}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for p in precisions:
                start = time.perf_counter()
                for i in range(0, len(ids), args.chunk):
                    encoders[p](ids[i : i + args.chunk])
                seconds[p].append(round(time.perf_counter() - start, 3))
    result = {
        "size": args.size,
        "words": len(words),
        "seconds": seconds,
        "words_per_s": {p: round(len(words) / min(s)) for p, s in seconds.items()},
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
