"""Throughput of `bilm.embed` over the UD English-EWT test sentences (issue 2's benchmark).

Fresh process, cold token cache, one timed pass of `embed` at `--batch-size` over all test
sentences; tokens/s counts real tokens only. Random weights at a published size come from
`../shared/tools/make_elmo_weights.py`. Prints a JSON line with the figures.

    python bench/bench_embed.py --size small
    python bench/bench_embed.py --size original
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Tuple

import numpy as np
import torch
from common import DATA, machine, matmul_gflops, read_conllu_sentences, weights_dir


def lstm_flops_per_position(opts) -> float:
    P, D = opts.projection_dim, opts.lstm_dim
    per_layer_dir = 2 * (P * 4 * D + P * 4 * D + D * P) + 12 * D
    return 2 * opts.n_layers * per_layer_dir


def stepped_positions(sentences, batch_size: int):
    """LSTM steps per direction that `embed` computes: each compute batch (`embed`'s regrouping
    by length) steps every distinct prefix of its sentences once, in each reading order."""
    from spacy_elmo.bilm.schedule import batches_by_length, direction_trees, word_index

    steps = np.zeros(2, dtype=np.int64)
    for batch in batches_by_length(sentences, batch_size):
        _, index = word_index([sentences[i] for i in batch])
        trees, _ = direction_trees(index, np.array([len(sentences[i]) for i in batch]))
        steps += [sum(tree.batch_sizes) for tree in trees]
    return int(steps[0]), int(steps[1])


def encoder_flops_per_token(opts) -> float:
    C, E, F, P = opts.max_characters_per_token, opts.char_dim, opts.n_filters, opts.projection_dim
    conv = sum(2 * (C - w + 1) * w * E * n for w, n in opts.filters)
    return conv + opts.n_highway * 2 * (2 * F * F) + 2 * F * P


def exact_outputs(bilm, sentences, dtype=np.float32):
    """One sentence at a time through `forward` on char ids, boundaries included: no cache, no
    regrouping."""
    from spacy_elmo.bilm import batch_char_ids

    out = []
    with torch.inference_mode():
        for s in sentences:
            ids = torch.from_numpy(batch_char_ids([s]))
            layers = bilm.network(ids, initial_state=bilm.initial_state(1)).layers
            out.append(layers[:, 0, 1:-1].numpy().astype(dtype))
    return out


def noise_floor(bilm, sentences) -> float:
    """Largest change of the exact path's float32 output when a sentence shares a padded batch."""
    from spacy_elmo.bilm import batch_char_ids

    alone = exact_outputs(bilm, sentences)
    longest = max(sentences, key=len)
    worst = 0.0
    with torch.inference_mode():
        for s, a in zip(sentences, alone):
            ids = torch.from_numpy(batch_char_ids([s, longest + ["."]]))
            layers = bilm.network(ids, initial_state=bilm.initial_state(2)).layers[
                :, 0, 1 : len(s) + 1
            ]
            worst = max(worst, float(np.abs(layers.numpy() - a).max()) if a.size else 0.0)
    return worst


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="small")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--state", default="warm", choices=["warm", "zero"])
    parser.add_argument(
        "--check", type=int, default=200, help="sentences checked against the exact path"
    )
    return parser.parse_args()


def agreement(bilm, sentences, outputs, args) -> Tuple[float, float, float]:
    """The timed outputs against the exact path on `args.check` sentences drawn at random: the
    largest float32 difference, float32's own noise floor, and the largest difference in
    float64."""
    from spacy_elmo import load_bilm

    rng = np.random.default_rng(0)
    idx = rng.choice(len(sentences), size=min(args.check, len(sentences)), replace=False)
    checked = [sentences[i] for i in idx]
    # float32: the timed outputs against one-sentence-at-a-time forward on char ids ...
    exact = exact_outputs(bilm, checked)
    max_diff = max(float(np.abs(outputs[i] - e).max()) for i, e in zip(idx, exact) if e.size)
    # ... whose own noise floor is what padding one sentence next to another changes (float32
    # rounding, amplified through time where random weights make the recurrence chaotic) ...
    noise = noise_floor(bilm, checked)
    # ... so the algorithm itself (regrouping, cache, skipped boundary steps) is held to 1e-5 in
    # float64
    bilm64 = load_bilm(weights_dir(args.size), state=args.state).double()
    fast64 = list(bilm64.embed_iter(checked, batch_size=args.batch_size, as_tensor=True))
    max_diff64 = max(
        float((f - torch.from_numpy(e).double()).abs().max()) if e.size else 0.0
        for f, e in zip(fast64, exact_outputs(bilm64, checked, np.float64))
    )
    return max_diff, noise, max_diff64


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    assert torch.get_num_threads() == args.threads
    from spacy_elmo import load_bilm

    sentences = read_conllu_sentences(DATA / "ud_english_ewt" / "en_ewt-ud-test.conllu.gz")
    n_tokens = sum(len(s) for s in sentences)
    bilm = load_bilm(weights_dir(args.size), state=args.state)
    bilm.token_cache.reset_stats()
    start = time.perf_counter()
    outputs = bilm.embed(sentences, batch_size=args.batch_size)
    seconds = time.perf_counter() - start

    opts = bilm.options
    # packed rows, boundary steps computed once, shared prefixes stepped once: fewer steps than
    # tokens
    forward_steps, backward_steps = stepped_positions(sentences, args.batch_size)
    misses = bilm.token_cache.lookups - bilm.token_cache.hits
    lstm_flops = (forward_steps + backward_steps) / 2 * lstm_flops_per_position(opts)
    peak = matmul_gflops()
    max_diff, noise, max_diff64 = agreement(bilm, sentences, outputs, args)
    result = {
        "size": args.size,
        "state": args.state,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "sentences": len(sentences),
        "tokens": n_tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(n_tokens / seconds, 1),
        # token occurrences whose token layer came from the cache (each distinct word is computed
        # once)
        "cache_hit_rate": round(1 - misses / n_tokens, 3),
        "token_layers_computed": misses,
        "stepped_positions": [forward_steps, backward_steps],
        # the LSTM's arithmetic over the whole wall time: a lower bound on the rate reached
        "lstm_gflop_per_s": round(lstm_flops / seconds / 1e9, 1),
        # this host's rate on one large matrix product (2048^3) at the same thread count, for scale
        "matmul_gflop_per_s": round(peak, 1),
        # what a char CNN run for every token would cost per token, for scale
        "encoder_mflop_per_token": round(encoder_flops_per_token(opts) / 1e6, 1),
        "max_abs_diff_vs_exact_fp32": max_diff,
        "fp32_noise_floor": noise,
        "max_abs_diff_vs_exact_fp64": max_diff64,
        "machine": machine(),
    }
    print(json.dumps(result))
    if max_diff64 > 1e-5 or max_diff > max(1e-5, 2 * noise):
        sys.exit(f"fast path differs from the exact path: {max_diff} (fp32), {max_diff64} (fp64)")


if __name__ == "__main__":
    main()
