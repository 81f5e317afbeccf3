"""Small random ELMoForManyLangs (EFML) models written by EFML's own classes, and EFML's own outputs
for them: the reference of `tests/weights/test_efml.py` (the test-only package `elmoformanylangs`,
in the dev extra, with `overrides<5`; run on the CPU)."""

from __future__ import annotations

import codecs
import json
import logging
import warnings
from pathlib import Path
from typing import Dict, List, Sequence
from unittest import mock

import numpy as np
import torch

# A tiny architecture in EFML's layout (the published one: char_dim 50, 2048 filters, 2 highways,
# word_dim 100, LSTM 4096 / 512, 2 layers, clips 3).
ARCHITECTURE = {
    "encoder": {
        "name": "elmo",
        "projection_dim": 8,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 12,
        "n_layers": 2,
    },
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 4], [2, 4], [3, 8]],
        "n_highway": 2,
        "word_dim": 6,
        "char_dim": 5,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 4},
    "dropout": 0.1,
}
# config.json as EFML's trainer writes it (its arguments), naming the architecture by a path on
# another machine
FOREIGN_CONFIG = "/home/hit-scir/elmo/configs/cnn_tiny.json"
LONG = "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamten"  # 68 characters
# The training text the tables are built from, as EFML's trainer builds them (tokens cut to 48
# characters).
CORPUS = [
    "Der Hund bellt .",
    "Die Katze schläft , der Hund nicht !",
    f"{LONG} ist lang .",
    "我们 喜欢 北京 。",
    "Wir lesen Bücher über Hunde .",
]
# Each case EFML's reading must agree on: in- and out-of-vocabulary words (case-sensitive), a token
# cut at 48 characters (its cut form is in the vocabulary), CJK, characters missing from char.dic,
# EFML's boundary tokens and bilm-tf's given literally, one token.
SENTENCES = [
    ["Der", "Hund", "bellt", "."],
    ["Die", "Giraffe", "schläft", "hund", "Bücher", "?"],
    [LONG, "Hund", "x" * 60],
    ["我们", "喜欢", "北京", "。"],
    ["猫", "€", "Straße", "ñ"],
    ["<bos>", "Hund", "<eos>", "<S>", "</S>", "<pad>", "<oov>"],
    ["Hund"],
]


def efml_lexicons(corpus: Sequence[str], max_chars: int = 50, extra_chars: str = ""):
    """EFML's word and character tables for `corpus` (elmoformanylangs/biLM.py, `train`), with
    `extra_chars` (characters its CoNLL-U reader can meet inside tokens, such as a space) before the
    special ones."""
    tokens = [t[: max_chars - 2] for line in corpus for t in line.split()]
    words: Dict[str, int] = {}
    for special in ("<oov>", "<bos>", "<eos>", "<pad>"):
        words[special] = len(words)
    chars: Dict[str, int] = {}
    for token in tokens:
        words.setdefault(token, len(words))
        for c in token:
            chars.setdefault(c, len(chars))
    for c in extra_chars:
        chars.setdefault(c, len(chars))
    for special in ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"):
        chars.setdefault(special, len(chars))
    return words, chars


def write_efml_model(
    directory: Path,
    *,
    seed: int = 0,
    legacy: bool = False,
    architecture: dict = ARCHITECTURE,
    config_path: str = FOREIGN_CONFIG,
    extra_chars: str = "",
) -> Path:
    """A model written by EFML's classes (`biLM.Model.save_model`, or `torch.save` in the pre-1.6
    format with `legacy`), every parameter random (padding rows too), its tables written as EFML's
    trainer writes them, `config.json` naming `config_path`, and the architecture saved beside under
    that file name."""
    from elmoformanylangs.biLM import Model
    from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

    torch.manual_seed(seed)
    emb = architecture["token_embedder"]
    words, chars = efml_lexicons(CORPUS, emb["max_characters_per_token"], extra_chars)
    word_layer = EmbeddingLayer(emb["word_dim"], words, fix_emb=False) if emb["word_dim"] else None
    with warnings.catch_warnings():  # its softmax's loss takes an argument torch deprecated
        warnings.simplefilter("ignore", UserWarning)
        model = Model(
            architecture,
            word_layer,
            EmbeddingLayer(emb["char_dim"], chars, fix_emb=False),
            len(words),
        )
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    directory.mkdir(parents=True, exist_ok=True)
    if legacy:
        for name, part in (
            ("token_embedder.pkl", model.token_embedder),
            ("encoder.pkl", model.encoder),
        ):
            torch.save(part.state_dict(), directory / name, _use_new_zipfile_serialization=False)
    else:
        model.save_model(str(directory), False)
    for name, table in (("char.dic", chars), ("word.dic", words if emb["word_dim"] else None)):
        if table is not None:
            with codecs.open(str(directory / name), "w", encoding="utf-8") as fpo:
                for token, i in table.items():
                    print(f"{token}\t{i}", file=fpo)
    (directory / "config.json").write_text(
        json.dumps(
            {
                "config_path": config_path,
                "model": "/home/hit-scir/elmo/de",
                "seed": seed,
                "max_epoch": 10,
            }
        )
    )
    (directory / Path(config_path).name).write_text(json.dumps(architecture))
    return directory


def efml_outputs(
    directory: Path, sentences: Sequence[Sequence[str]], float64: bool = False
) -> List[np.ndarray]:
    """EFML's own layers `(n_layers + 1, n_tokens, 2P)` per sentence, each read after `reset_states`
    (zero states), on the CPU, in float32 (or float64)."""
    from elmoformanylangs import Embedder

    logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)
    with mock.patch("torch.cuda.is_available", return_value=False):
        embedder = Embedder(str(directory))
    if float64:
        embedder.model.double()
    out = []
    for sentence in sentences:
        embedder.model.encoder.reset_states()
        out.append(embedder.sents2elmo([list(sentence)], output_layer=-2)[0])
    return out
