"""Layer probe (Peters et al. 2018, sec. 5.3): a linear POS classifier on one frozen biLM layer.

    python -m project.scripts.layer_probe --scale full [--bilm PATH]

For each output layer j (0: token layer, 1 and 2: LSTM layers) a softmax classifier is trained on
that layer alone, and one on the learned mix `gamma * sum_j softmax(s)_j h_j`, all with the same
full-batch L-BFGS budget. Training tokens: the first `probe_sentences` sentences of the UD train
split; scores: UPOS accuracy on the UD test split. Writes <metrics>/probe.json.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from .run_study import Study
from .study import ROOT, SCALES

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--bilm", default="")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    scale = SCALES[args.scale]
    study = Study(scale, args.bilm, "uner", tasks=["pos"])
    target = study.metrics / "probe.json"
    if target.exists() and not study.other_bilm(json.loads(target.read_text(encoding="utf-8"))):
        print(f"{target} exists (made with this biLM)")
        return
    from spacy_elmo import load_bilm

    pos = study.tasks[0]
    train_words, train_tags = read_tagged(study.split(pos, "train"), scale.probe_sentences)
    test_words, test_tags = read_tagged(study.split(pos, "test"), None)
    labels = sorted({t for tags in train_tags + test_tags for t in tags})
    index = {t: i for i, t in enumerate(labels)}
    y_train = torch.tensor([index[t] for tags in train_tags for t in tags])
    y_test = torch.tensor([index[t] for tags in test_tags for t in tags])
    start = time.perf_counter()
    bilm = load_bilm(study.bilm)
    X_train, X_test = features(bilm, train_words), features(bilm, test_words)
    print(
        f"features: {X_train.shape[1]} train / {X_test.shape[1]} test tokens, "
        f"{time.perf_counter() - start:.0f} s"
    )
    result = {
        "task": "pos",
        "train_tokens": int(X_train.shape[1]),
        "test_tokens": int(X_test.shape[1]),
        "state_policy": bilm.state_policy,
        "bilm_fingerprint": study.bilm_info[2],
        "layers": {},
    }
    for j in range(X_train.shape[0]):
        predict, _ = fit(X_train[j], y_train, len(labels), mix=False)
        with torch.no_grad():
            acc = float((predict(X_test[j]).argmax(-1) == y_test).float().mean())
        result["layers"][str(j)] = acc
        print(f"layer {j}: test accuracy {acc:.4f}", flush=True)
    predict, extra = fit(X_train, y_train, len(labels), mix=True)
    with torch.no_grad():
        result["mix"] = {
            "accuracy": float((predict(X_test).argmax(-1) == y_test).float().mean()),
            **extra,
        }
    print(
        f"learned mix: test accuracy {result['mix']['accuracy']:.4f}, weights "
        f"{extra['mix_weights']}"
    )
    study.metrics.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
