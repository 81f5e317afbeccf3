"""The `baselines` step's two baselines at smoke scale: each is done once its record is written
(its last file), and a directory that a killed step left without it is redone, as is one made from
other text or settings."""

import gzip
import hashlib
import json
from itertools import islice

import pytest

from project.scripts.baselines import floret_vectors, raw_text_jsonl, spacy_pretrain
from project.scripts.study import CONFIGS, SCALES

from ..helpers import data_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    """The smoke scale's slice of the pretraining text, as `raw_text_jsonl` writes it."""
    with gzip.open(data_path("wikitext2", "train.txt.gz"), "rt", encoding="utf-8") as src:
        lines = [" ".join(line.split()) for line in islice(src, 100) if line.split()]
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


def test_the_raw_text_is_written_again_where_the_text_changed(tmp_path, capsys):
    """raw_text.jsonl follows the pretraining text: unchanged text leaves it as it is, new text
    (a new release of the raw text, say) writes it again and says so."""
    texts = [tmp_path / "a.txt", tmp_path / "b.txt"]
    texts[0].write_text("The cat  sat .\n\nA dog ran .\n")
    texts[1].write_text("News text .\n")
    jsonl = raw_text_jsonl(texts, tmp_path / "raw_text.jsonl")
    lines = [json.loads(line)["text"] for line in jsonl.read_text().splitlines()]
    assert lines == ["The cat sat .", "A dog ran .", "News text ."]
    stamp = jsonl.stat().st_mtime_ns
    raw_text_jsonl(texts, jsonl)
    assert jsonl.stat().st_mtime_ns == stamp and "changed" not in capsys.readouterr().out
    texts[0].write_text("THE cat sat .\n")
    raw_text_jsonl(texts, jsonl)
    assert json.loads(jsonl.read_text().splitlines()[0])["text"] == "THE cat sat ."
    assert "the pretraining text changed: written again" in capsys.readouterr().out


def test_a_baseline_made_from_other_text_is_made_again(jsonl, tmp_path, capsys):
    """The floret vectors record the sha256 of the text they were trained on: on other text they
    are trained again (and the step says why), on the same text they are kept."""
    out = tmp_path / "floret"
    floret_vectors(SCALES["smoke"], jsonl, out, threads=1)
    vectors = (out / "vectors" / "vocab" / "vectors").read_bytes()
    other = tmp_path / "other.jsonl"
    lines = jsonl.read_text().splitlines()
    other.write_text("\n".join(lines[len(lines) // 2 :]) + "\n")
    capsys.readouterr()
    floret_vectors(SCALES["smoke"], other, out, threads=1)
    assert "was made from another text_sha256: made again" in capsys.readouterr().out
    assert (out / "vectors" / "vocab" / "vectors").read_bytes() != vectors
    record = json.loads((out / "floret.json").read_text())
    assert record["made_from"]["text_sha256"] == hashlib.sha256(other.read_bytes()).hexdigest()
    stamp = (out / "floret.json").stat().st_mtime_ns
    floret_vectors(SCALES["smoke"], other, out, threads=1)
    assert (out / "floret.json").stat().st_mtime_ns == stamp


def test_spacy_pretrain_with_another_config_is_made_again(jsonl, tmp_path, capsys):
    """An edited pretrain_tok2vec.cfg (its dropout here) pretrains the tok2vec again: the weights
    are not kept from the earlier config while the runs record the new one's sha256."""
    config = tmp_path / "pretrain_tok2vec.cfg"
    config.write_text((CONFIGS / "pretrain_tok2vec.cfg").read_text())
    out = tmp_path / "tok2vec"
    spacy_pretrain(SCALES["smoke"], jsonl, out, config)
    weights = (out / "model-last.bin").read_bytes()
    text = config.read_text()
    assert "\ndropout = 0.2\n" in text
    config.write_text(text.replace("\ndropout = 0.2\n", "\ndropout = 0.5\n"))
    capsys.readouterr()
    spacy_pretrain(SCALES["smoke"], jsonl, out, config)
    assert "was made from another config_sha256: made again" in capsys.readouterr().out
    assert (out / "model-last.bin").read_bytes() != weights
    record = json.loads((out / "pretrain.json").read_text())
    assert record["made_from"]["config_sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
