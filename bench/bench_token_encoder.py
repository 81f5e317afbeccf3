"""The token encoder alone (character CNN, highways, projection), by precision: what each distinct
word costs before the LSTM.

    python bench/bench_token_encoder.py --size original [--precisions float32,int8] [--rounds 4]
        [--threads 1] [--conv-words 1000000,128]

The distinct words of the UD English-EWT test sentences (5,629), encoded as the runner encodes a
batch's new words (`encode_words`: sorted by length, in chunks). The precisions and the sizes of
the convolutions' runs of words (`--conv-words`: `encoder.CONV_WORDS`; one larger than the words is
one run) alternate round by round in one process, so that a host's load moves them alike. Prints
one JSON line: seconds per round per setting, words/s at the best round and the median, the host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from common import DATA, machine, read_conllu_sentences, weights_dir

from spacy_elmo import load_bilm
from spacy_elmo.bilm import encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="original", choices=["small", "medium", "original"])
    parser.add_argument("--precisions", default="float32,int8")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--conv-words", default=str(encoder.CONV_WORDS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    test = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz")
    words = sorted({w for sentence in test for w in sentence})
    runners = {
        p: load_bilm(weights_dir(args.size), precision=p).runner for p in args.precisions.split(",")
    }
    keys = {p: runner.network.token_keys([words])[0] for p, runner in runners.items()}
    settings = [(p, int(c)) for p in runners for c in args.conv_words.split(",")]
    seconds: dict = {f"{p}@{c}": [] for p, c in settings}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for p, conv_words in settings:
                encoder.CONV_WORDS = conv_words
                start = time.perf_counter()
                runners[p].encode_words(keys[p])
                seconds[f"{p}@{conv_words}"].append(round(time.perf_counter() - start, 3))
    result = {
        "size": args.size,
        "words": len(words),
        "threads": args.threads,
        "seconds": seconds,
        "words_per_s_best_median": {
            k: [round(len(words) / min(s)), round(len(words) / statistics.median(s))]
            for k, s in seconds.items()
        },
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
