"""Layer probe (Peters et al. 2018, sec. 5.3): a linear POS classifier on one frozen biLM layer.

    python -m project.scripts.layer_probe --scale full [--bilm PATH]

For each output layer j (0: token layer, 1 and 2: LSTM layers) a softmax classifier is trained on
that layer alone, and one on the learned mix `gamma * sum_j softmax(s)_j h_j`, all with the same
full-batch L-BFGS budget. Training tokens: the first `probe_sentences` sentences of the UD train
split; scores: UPOS accuracy on the UD test split. The biLM that the `tune` step tuned on the
whole UD train split (from this biLM) is probed the same way, on the same tokens, under "tuned"
(or "tuned": {"skipped": why}). Writes <metrics>/probe.json, again where the biLM or that tuning
changed.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from spacy_elmo.files import write_atomic

from .run_study import Study
from .study import SCALES, read_json, shown, tunable_model

L2 = 1e-4
LBFGS_STEPS = 100


def read_tagged(path, limit: Optional[int]) -> Tuple[List[List[str]], List[List[str]]]:
    import spacy
    from spacy.tokens import DocBin

    docs = list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))[: limit or None]
    return [[t.text for t in d] for d in docs], [[t.tag_ for t in d] for d in docs]


def features(bilm, sentences: List[List[str]]) -> torch.Tensor:
    """All layers of every token: `(n_layers + 1, n_tokens, dim)`."""
    layers = [a for a in bilm.embed(sentences, batch_size=64) if a.shape[1]]
    return torch.from_numpy(np.concatenate(layers, axis=1))


def fit(
    X: torch.Tensor, y: torch.Tensor, n_classes: int, mix: bool
) -> Tuple[torch.nn.Module, Dict]:
    """A linear classifier on X `(n_tokens, dim)`, or on the learned mix of X `(n_layers, n_tokens,
    dim)`."""
    torch.manual_seed(0)
    dim = X.shape[-1]
    linear = torch.nn.Linear(dim, n_classes)
    s = torch.nn.Parameter(torch.zeros(X.shape[0] if mix else 1))
    gamma = torch.nn.Parameter(torch.ones(1))
    params = list(linear.parameters()) + ([s, gamma] if mix else [])

    def logits(features: torch.Tensor) -> torch.Tensor:
        if mix:
            features = gamma * torch.einsum("l,lnd->nd", torch.softmax(s, 0), features)
        return linear(features)

    optimizer = torch.optim.LBFGS(
        params, max_iter=LBFGS_STEPS, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits(X), y) + L2 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    extra = (
        {
            "mix_weights": [float(w) for w in torch.softmax(s.detach(), 0)],
            "gamma": float(gamma.detach()),
        }
        if mix
        else {}
    )
    return logits, extra


class Tokens(NamedTuple):
    """The probe's training and test sentences (words) and their UPOS tags as class indices."""

    train_words: List[List[str]]
    test_words: List[List[str]]
    y_train: torch.Tensor
    y_test: torch.Tensor
    n_classes: int


def probe_bilm(bilm, tokens: Tokens, name: str) -> Dict:
    """A classifier on each layer of `bilm` and one on the learned mix -> test accuracy per layer,
    and the mix's accuracy, weights and gamma."""
    start = time.perf_counter()
    X_train, X_test = features(bilm, tokens.train_words), features(bilm, tokens.test_words)
    print(
        f"{name}: features of {X_train.shape[1]} train / {X_test.shape[1]} test tokens, "
        f"{time.perf_counter() - start:.0f} s"
    )

    def accuracy(predict, X: torch.Tensor) -> float:
        with torch.no_grad():
            return float((predict(X).argmax(-1) == tokens.y_test).float().mean())

    layers = {}
    for j in range(X_train.shape[0]):
        predict, _ = fit(X_train[j], tokens.y_train, tokens.n_classes, mix=False)
        layers[str(j)] = accuracy(predict, X_test[j])
        print(f"{name}, layer {j}: test accuracy {layers[str(j)]:.4f}", flush=True)
    predict, extra = fit(X_train, tokens.y_train, tokens.n_classes, mix=True)
    mix = {"accuracy": accuracy(predict, X_test), **extra}
    print(
        f"{name}, learned mix: test accuracy {mix['accuracy']:.4f}, weights {extra['mix_weights']}"
    )
    return {"layers": layers, "mix": mix}


def probe_step(study: Study) -> None:
    """Probe the biLM, and the biLM tuned on the POS training split where the `tune` step made it
    from this biLM, into <metrics>/probe.json; skipped where it holds the probes of both already."""
    from spacy_elmo import load_bilm

    target = study.metrics / "probe.json"
    pos = study.tasks[0]
    tuned_path, tuned = study.tuned_bilm(pos, 1.0, 0), study.tuned_fingerprint(pos, 1.0, 0)
    old = read_json(target)
    if (
        old is not None
        and not study.other_bilm(old)
        and old.get("tuned", {}).get("fingerprint") == tuned
    ):
        print(f"{target} exists (made with this biLM and its tuning)")
        return
    train_words, train_tags = read_tagged(study.split(pos, "train"), study.scale.probe_sentences)
    test_words, test_tags = read_tagged(study.split(pos, "test"), None)
    labels = sorted({t for tags in train_tags + test_tags for t in tags})
    index = {t: i for i, t in enumerate(labels)}
    tokens = Tokens(
        train_words,
        test_words,
        torch.tensor([index[t] for tags in train_tags for t in tags]),
        torch.tensor([index[t] for tags in test_tags for t in tags]),
        len(labels),
    )
    bilm = load_bilm(study.bilm)
    result = {
        "task": "pos",
        "train_tokens": len(tokens.y_train),
        "test_tokens": len(tokens.y_test),
        "state_policy": bilm.state_policy,
        "bilm_fingerprint": study.bilm_info[2],
        **probe_bilm(bilm, tokens, "biLM"),
    }
    if tuned is None:
        reason = tunable_model(study.bilm)[1] or (
            f"the `tune` step has not tuned this biLM on the POS training split "
            f"({shown(tuned_path)})"
        )
        result["tuned"] = {"skipped": reason}
        print(f"tuned biLM not probed: {reason}")
    else:
        result["tuned"] = {
            "path": shown(tuned_path),
            "fingerprint": tuned,
            **probe_bilm(load_bilm(str(tuned_path)), tokens, "tuned biLM"),
        }
    study.metrics.mkdir(parents=True, exist_ok=True)
    write_atomic(target, json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {shown(target)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--bilm", default="")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    probe_step(Study(SCALES[args.scale], args.bilm, "uner", tasks=["pos"]))


if __name__ == "__main__":
    main()
