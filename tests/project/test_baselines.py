"""The `baselines` step's two baselines at smoke scale: each is done once its record is written
(its last file), and a directory that a killed step left without it is redone."""

import gzip
import json
from itertools import islice

import pytest

from project.scripts.baselines import floret_vectors, spacy_pretrain
from project.scripts.study import SCALES

from ..helpers import data_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    """The smoke scale's slice of the pretraining text, as `raw_text_jsonl` writes it."""
    with gzip.open(data_path("wikitext2", "train.txt.gz"), "rt", encoding="utf-8") as src:
        lines = [" ".join(line.split()) for line in islice(src, 400) if line.split()]
    path = tmp_path_factory.mktemp("text") / "raw_text.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    return path


def test_floret_vectors_cut_off_after_config_cfg_are_redone(jsonl, tmp_path):
    """`spacy init vectors` writes vectors/config.cfg before the vocabulary and the vectors: a
    step killed there is not done, and the rerun redoes it rather than fail on floret.json."""
    out = tmp_path / "floret"
    (out / "vectors").mkdir(parents=True)
    (out / "vectors" / "config.cfg").write_text('[nlp]\nlang = "en"\n')
    floret_vectors(SCALES["smoke"], jsonl, out, threads=1)
    record = json.loads((out / "floret.json").read_text())
    assert record["dim"] == 100 and record["seconds"] > 0
    assert (out / "vectors" / "vocab" / "vectors").is_file()
    # done: a rerun leaves it as it is
    stamp = (out / "floret.json").stat().st_mtime_ns
    floret_vectors(SCALES["smoke"], jsonl, out, threads=1)
    assert (out / "floret.json").stat().st_mtime_ns == stamp


def test_spacy_pretrain_cut_off_after_model_last_is_redone(jsonl, tmp_path):
    """model-last.bin is written before pretrain.json, the record the step reads: a step killed
    between them is redone."""
    out = tmp_path / "tok2vec"
    out.mkdir()
    (out / "model-last.bin").write_bytes(b"cut off")
    spacy_pretrain(SCALES["smoke"], jsonl, out)
    record = json.loads((out / "pretrain.json").read_text())
    assert record["seconds"] > 0 and record["text"] == str(jsonl)
    assert (out / "model-last.bin").read_bytes() != b"cut off"
    stamp = (out / "pretrain.json").stat().st_mtime_ns
    spacy_pretrain(SCALES["smoke"], jsonl, out)
    assert (out / "pretrain.json").stat().st_mtime_ns == stamp
