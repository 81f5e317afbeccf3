"""A plain numpy ELMo biLM, written from the bilm-tf conventions and read straight from the
hdf5 arrays, one time step at a time. The tests hold the package's fast path to it; it shares
no code with the package."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def char_ids(token: str, max_chars: int = 50) -> np.ndarray:
    if token == "<S>":
        body = [256]
    elif token == "</S>":
        body = [257]
    else:
        body = list(token.encode("utf-8", "ignore")[: max_chars - 2])
    ids = [258, *body, 259] + [260] * (max_chars - len(body) - 2)
    return np.array(ids) + 1


def write_random_weights(directory: Path, options: dict, seed: int = 0) -> Path:
    """A bilm-tf layout options.json + weights.hdf5 with random values (small scales, like trained
    ones)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def r(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    cnn, lstm = options["char_cnn"], options["lstm"]
    E, F = cnn["embedding"]["dim"], sum(n for _, n in cnn["filters"])
    P, D = lstm["projection_dim"], lstm["dim"]
    with h5py.File(directory / "weights.hdf5", "w") as f:
        f["char_embed"] = r(261, E, scale=1.0)
        for i, (w, n) in enumerate(cnn["filters"]):
            f[f"CNN/W_cnn_{i}"] = r(1, w, E, n)
            f[f"CNN/b_cnn_{i}"] = r(n, scale=0.1)
        for k in range(cnn["n_highway"]):
            for m in ("transform", "carry"):
                f[f"CNN_high_{k}/W_{m}"] = r(F, F, scale=1 / np.sqrt(F))
                f[f"CNN_high_{k}/b_{m}"] = r(F, scale=0.1)
        f["CNN_proj/W_proj"] = r(F, P, scale=1 / np.sqrt(F))
        f["CNN_proj/b_proj"] = r(P, scale=0.1)
        for d in range(2):
            for l in range(lstm["n_layers"]):
                g = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
                f[f"{g}/W_0"] = r(2 * P, 4 * D, scale=1 / np.sqrt(P))
                f[f"{g}/B"] = r(4 * D, scale=0.2)
                f[f"{g}/W_P_0"] = r(D, P, scale=2 / np.sqrt(D))
    (directory / "options.json").write_text(json.dumps(options))
    return directory


TINY_OPTIONS = {
    "lstm": {
        "dim": 24,
        "projection_dim": 8,
        "n_layers": 2,
        "cell_clip": 1,
        "proj_clip": 0.8,
        "use_skip_connections": True,
    },
    "char_cnn": {
        "embedding": {"dim": 4},
        "filters": [[1, 4], [2, 6], [3, 6]],
        "n_highway": 1,
        "activation": "tanh",
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}


class ReferenceBiLM:
    """Reads `options.json` + hdf5 weights; `token_layer(words)` and `run(sentences, state)` in
    float64."""

    def __init__(self, options_path: Path, weights_path: Path):
        self.opts = json.loads(Path(options_path).read_text())
        with h5py.File(weights_path, "r") as f:
            self.w = {}
            f.visititems(
                lambda n, o: (
                    self.w.__setitem__(n, o[...].astype(np.float64))
                    if isinstance(o, h5py.Dataset)
                    else None
                )
            )
        self.n_layers = self.opts["lstm"]["n_layers"]
        self.P = self.opts["lstm"]["projection_dim"]
        self.D = self.opts["lstm"]["dim"]

    def token_layer(self, words) -> np.ndarray:
        cnn = self.opts["char_cnn"]
        act = np.tanh if cnn.get("activation", "relu") == "tanh" else (lambda v: np.maximum(v, 0))
        table = np.concatenate([np.zeros((1, cnn["embedding"]["dim"])), self.w["char_embed"]])
        out = []
        for word in words:
            e = table[char_ids(word)]  # (50, E)
            feats = []
            for i, (width, _) in enumerate(cnn["filters"]):
                W, b = self.w[f"CNN/W_cnn_{i}"][0], self.w[f"CNN/b_cnn_{i}"]  # (width, E, n)
                conv = (
                    np.stack(
                        [np.einsum("we,wen->n", e[p : p + width], W) for p in range(50 - width + 1)]
                    )
                    + b
                )
                feats.append(act(conv.max(axis=0)))
            x = np.concatenate(feats)
            for k in range(cnn["n_highway"]):
                g = f"CNN_high_{k}"
                t = sigmoid(x @ self.w[f"{g}/W_carry"] + self.w[f"{g}/b_carry"])
                h = np.maximum(x @ self.w[f"{g}/W_transform"] + self.w[f"{g}/b_transform"], 0)
                x = t * h + (1 - t) * x
            out.append(x @ self.w["CNN_proj/W_proj"] + self.w["CNN_proj/b_proj"])
        return np.array(out)

    def zero_state(self):
        return [
            [(np.zeros(self.P), np.zeros(self.D)) for _ in range(2)] for _ in range(self.n_layers)
        ]

    def step(self, d: int, l: int, x, h, c):
        g = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
        z = np.concatenate([x, h]) @ self.w[f"{g}/W_0"] + self.w[f"{g}/B"]
        D = self.D
        i, j, f, o = z[:D], z[D : 2 * D], z[2 * D : 3 * D], z[3 * D :]
        clip_c = self.opts["lstm"].get("cell_clip") or np.inf
        clip_p = self.opts["lstm"].get("proj_clip") or np.inf
        c = np.clip(sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j), -clip_c, clip_c)
        h = np.clip((sigmoid(o) * np.tanh(c)) @ self.w[f"{g}/W_P_0"], -clip_p, clip_p)
        return h, c

    def run(self, tokens, state=None):
        """One sentence (no boundaries) -> layers `(n_layers + 1, n, 2P)` and the final state."""
        state = state or self.zero_state()
        x = self.token_layer(["<S>", *tokens, "</S>"])
        T = len(x)
        layers = [np.concatenate([x, x], axis=1)]
        new_state = [[None, None] for _ in range(self.n_layers)]
        inputs = [x, x[::-1]]
        for l in range(self.n_layers):
            outs = []
            for d in range(2):
                h, c = state[l][d]
                hs = []
                for t in range(T):
                    h, c = self.step(d, l, inputs[d][t], h, c)
                    hs.append(h)
                hs = np.array(hs)
                new_state[l][d] = (h, c)
                if l > 0 and self.opts["lstm"].get("use_skip_connections"):
                    hs = hs + inputs[d]
                outs.append(hs)
            inputs = outs
            layers.append(np.concatenate([outs[0], outs[1][::-1]], axis=1))
        return np.stack(layers)[:, 1:-1], new_state
