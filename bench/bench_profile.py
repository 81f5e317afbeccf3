"""Where one pass of `bilm.embed` spends its time, by part, per precision.

    python bench/bench_profile.py --size original [--precisions float32,int8] [--sentences 1000]

One torch thread, so that the two LSTM directions run one after the other and the parts add up
to the pass (with 2 threads each direction runs on its own thread: the same parts, side by side).
After a warm-up pass, a fresh biLM (cold token cache) embeds the first `--sentences` UD English-EWT
test sentences once, with its parts timed:

- `token_encoder`: the character CNN, highway and projection of each distinct word;
- `input_first_layer`: the first LSTM layer's input product, once per distinct word (under int8
  each row scaled onto the grid: its input, the token layer, has no bound);
- `input_later_layers`: the input products of the later layers, in chunks of positions;
- `hidden`: each step's hidden product added to its gate inputs (int8: the hidden state
  quantized on its fixed grid, the int8 product, the float32 result added);
- `elementwise`: each step's gate non-linearities, cell update and clips;
- `projection`: each step's cell projection;
- `rest`: everything else (batches, prefix trees, gathers, the outputs).

Prints one JSON line: seconds and share of each part, tokens/s, the host.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import torch
from common import DATA, machine, read_conllu_sentences, weights_dir

from spacy_elmo import load_bilm
from spacy_elmo.bilm.lstm import ProjectedLSTMLayer
from spacy_elmo.bilm.precision import LayerProducts, PrecisionCopies
from spacy_elmo.bilm.runner import PackedRunner


class Timed:
    """A matrix product whose calls add their seconds to `seconds[part]`."""

    def __init__(self, product, part: str, seconds: Counter):
        self.product, self.part, self.seconds = product, part, seconds

    def _timed(self, f, *args):
        start = time.perf_counter()
        out = f(*args)
        self.seconds[self.part] += time.perf_counter() - start
        return out

    def __call__(self, x):
        return self._timed(self.product, x)

    def gates(self, xw, x):
        return self._timed(self.product.gates, xw, x)

    def into(self, out, x):
        return self._timed(self.product.into, out, x)


@contextmanager
def timing(seconds: Counter) -> Iterator[None]:
    """Time the parts of every pass run inside the block (patches, undone after it)."""
    lstm_products = PrecisionCopies.lstm_products
    encode_words = PackedRunner.encode_words
    cell = ProjectedLSTMLayer.cell

    def timed_products(self):
        return [
            [
                LayerProducts(
                    Timed(
                        p.input, "input_first_layer" if n == 0 else "input_later_layers", seconds
                    ),
                    Timed(p.hidden, "hidden", seconds),
                    Timed(p.proj, "projection", seconds),
                )
                for p in layer
            ]
            for n, layer in enumerate(lstm_products(self))
        ]

    def timed_encode(self, words):
        start = time.perf_counter()
        out = encode_words(self, words)
        seconds["token_encoder"] += time.perf_counter() - start
        return out

    def timed_cell(self, gates, c_prev, project, in_place):
        before, start = seconds["projection"], time.perf_counter()
        out = cell(self, gates, c_prev, project, in_place)
        inside = seconds["projection"] - before
        seconds["elementwise"] += time.perf_counter() - start - inside
        return out

    PrecisionCopies.lstm_products = timed_products
    PackedRunner.encode_words = timed_encode
    ProjectedLSTMLayer.cell = timed_cell
    try:
        yield
    finally:
        PrecisionCopies.lstm_products = lstm_products
        PackedRunner.encode_words = encode_words
        ProjectedLSTMLayer.cell = cell


def profile(size: str, precision: str, sentences, batch_size: int) -> dict:
    weights = weights_dir(size)
    load_bilm(weights, precision=precision).embed(sentences[:50], batch_size=batch_size)
    bilm = load_bilm(weights, precision=precision)
    seconds: Counter = Counter()
    with timing(seconds):
        start = time.perf_counter()
        bilm.embed(sentences, batch_size=batch_size)
        total = time.perf_counter() - start
    seconds["rest"] = total - sum(seconds.values())
    tokens = sum(map(len, sentences))
    return {
        "resolved": bilm.precision,
        "tokens_per_s": round(tokens / total),
        "seconds": round(total, 2),
        "parts_s": {k: round(v, 2) for k, v in seconds.most_common()},
        "parts_share": {k: round(v / total, 3) for k, v in seconds.most_common()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="original")
    parser.add_argument("--precisions", default="float32,int8")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = DATA / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz"
    sentences = read_conllu_sentences(path)[: args.sentences]
    result = {
        "size": args.size,
        "threads": 1,
        "sentences": len(sentences),
        "tokens": sum(map(len, sentences)),
        "precisions": {
            p: profile(args.size, p, sentences, args.batch_size) for p in args.precisions.split(",")
        },
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
