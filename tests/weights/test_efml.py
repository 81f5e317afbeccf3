"""ELMoForManyLangs (EFML) models give EFML's own outputs: a small random model written by EFML's
classes (`tests/efml_models.py`), read by `load_bilm`, by the `elmo` component in German and Chinese
pipelines, after `convert` and `spacy.load`, compared per sentence with EFML's `Embedder` after
`reset_states`."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoConfigError, ElmoFileError, load_bilm, save_bilm
from spacy_elmo.weights.efml import PUBLISHED_ARCHITECTURE, PUBLISHED_CONFIGS, read_architecture

from ..efml_models import ARCHITECTURE, SENTENCES, efml_outputs, write_efml_model
from ..helpers import one_error_line, run_cli

# EFML and this package run the same network in another order of operations (the highway gate as 1 -
# g, the LSTM's products and bias additions grouped otherwise): 3.0e-7 is the worst seen in float32
# (five random models), 6.7e-16 in float64.
EFML_ATOL = 1e-5
pytestmark = pytest.mark.numeric


@pytest.fixture(scope="module")
def efml_dir(tmp_path_factory) -> Path:
    return write_efml_model(tmp_path_factory.mktemp("efml") / "de.model")


@pytest.fixture(scope="module")
def reference(efml_dir):
    return efml_outputs(efml_dir, SENTENCES)


def assert_close(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        assert float(np.abs(a - b).max()) <= EFML_ATOL


def legacy_gpu_copy(legacy: Path, directory: Path) -> Path:
    """`legacy` as a GPU run of old torch saves it: storages `torch.cuda.FloatStorage` at location
    `cuda:0`."""
    directory.mkdir()
    for f in legacy.iterdir():
        data = f.read_bytes()
        if f.suffix == ".pkl":
            data = data.replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n")
            data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            assert b"cuda:0" in data
        (directory / f.name).write_bytes(data)
    return directory


def test_load_bilm_gives_efml_outputs(efml_dir, reference, tmp_path):
    bilm = load_bilm(efml_dir)
    assert bilm.state_policy == "zero" and bilm.options.char_table and bilm.options.word_dim == 6
    ours = bilm.embed(SENTENCES)
    assert_close(ours, reference)
    legacy = write_efml_model(tmp_path / "legacy", legacy=True)
    assert (legacy / "encoder.pkl").read_bytes()[:2] != b"PK"  # torch's format before 1.6
    for copy in (legacy, legacy_gpu_copy(legacy, tmp_path / "gpu")):
        assert all(np.array_equal(a, b) for a, b in zip(load_bilm(copy).embed(SENTENCES), ours))


def test_the_algorithm_is_efml_s_in_float64(efml_dir):
    """In float64 only the order of operations differs: ~1e-16."""
    ours = list(load_bilm(efml_dir).double().embed_iter(SENTENCES, as_tensor=True))
    theirs = efml_outputs(efml_dir, SENTENCES, float64=True)
    assert ours[0].dtype == torch.float64 and theirs[0].dtype == np.float64
    assert max(float(np.abs(a.numpy() - b).max()) for a, b in zip(ours, theirs)) <= 1e-12


def test_characters_efml_reads_as_white_space(tmp_path):
    """EFML strips each char.dic line: a space's line becomes the entry of U+3000, and a space is
    unknown."""
    directory = write_efml_model(tmp_path / "vi.model", extra_chars=" ")
    assert "\n \t" in (directory / "char.dic").read_text(encoding="utf-8")
    sentences = [["Hà Nội", "Hund"], ["a\u3000b"]]
    assert_close(load_bilm(directory).embed(sentences), efml_outputs(directory, sentences))


@pytest.mark.parametrize(
    "lang, text",
    [("de", "Der Hund bellt laut. Die Giraffe schläft!"), ("zh", "我们喜欢北京。猫在睡觉。")],
)
def test_spacy_pipeline_gives_efml_outputs(efml_dir, tmp_path, lang, text):
    nlp = spacy.blank(lang)  # zh: spaCy's default segmenter, one token per character
    nlp.add_pipe("elmo", config={"weights": str(efml_dir)})
    doc = nlp(text)
    words = [t.text for t in doc]
    # the component embeds each sentence on its own
    cut = words.index("." if lang == "de" else "。") + 1
    expected = np.concatenate(efml_outputs(efml_dir, [words[:cut], words[cut:]]), axis=1)
    assert float(np.abs(doc._.elmo_layers - expected).max()) <= EFML_ATOL
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").bilm.state_policy == "zero"
    assert np.array_equal(loaded(text)._.elmo_layers, doc._.elmo_layers)
    # n_process
    assert np.array_equal(pickle.loads(pickle.dumps(nlp))(text)._.elmo_layers, doc._.elmo_layers)


def test_convert_round_trips(efml_dir, tmp_path, capsys):
    assert run_cli("convert", efml_dir, tmp_path / "own") == 0
    assert sorted(p.name for p in (tmp_path / "own").iterdir()) == [
        "bilm.json",
        "char_table.json",
        "weights.pt",
    ]
    original, converted = load_bilm(efml_dir), load_bilm(tmp_path / "own")
    assert converted.state_policy == "zero" and converted.fingerprint() == original.fingerprint()
    assert all(
        np.array_equal(a, b) for a, b in zip(converted.embed(SENTENCES), original.embed(SENTENCES))
    )
    capsys.readouterr()
    # the bilm-tf layout has no table
    assert run_cli("convert", tmp_path / "own", tmp_path / "back") == 1
    assert "no character table" in one_error_line(capsys.readouterr().err)


def test_warm_needs_a_warmup_text_in_the_language(efml_dir, tmp_path):
    with pytest.raises(ElmoConfigError, match="warm-up text in this model's language"):
        load_bilm(efml_dir, state="warm")
    bilm = load_bilm(efml_dir)
    save_bilm(bilm, tmp_path / "zero")
    with pytest.raises(ElmoConfigError, match="warm-up text"):
        load_bilm(tmp_path / "zero", state="warm")
    bilm.network.compute_warm_state(
        [["Die", "Katze", "schläft", "."], ["Der", "Hund", "bellt", "."]]
    )
    bilm.state_policy = "warm"
    warm = bilm.embed(SENTENCES)
    assert not np.allclose(warm[0], load_bilm(efml_dir).embed(SENTENCES)[0])
    save_bilm(bilm, tmp_path / "warm")
    again = load_bilm(tmp_path / "warm")
    assert again.state_policy == "warm"
    assert all(np.array_equal(a, b) for a, b in zip(again.embed(SENTENCES), warm))


def test_config_path_is_looked_for_where_efml_looks(tmp_path):
    import elmoformanylangs

    shipped = Path(elmoformanylangs.__file__).parent / "configs"
    for name in PUBLISHED_CONFIGS:  # the architecture EFML falls back to, under either name
        assert json.loads((shipped / name).read_text()) == PUBLISHED_ARCHITECTURE
    directory = tmp_path / "m"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({"config_path": f"/data/x/{PUBLISHED_CONFIGS[0]}"})
    )
    assert read_architecture(directory)[0] == PUBLISHED_ARCHITECTURE
    relative = write_efml_model(tmp_path / "relative", config_path="configs/tiny.json")
    (relative / "configs").mkdir()
    (relative / "tiny.json").rename(relative / "configs" / "tiny.json")
    assert read_architecture(relative)[0] == ARCHITECTURE
    absolute = write_efml_model(tmp_path / "absolute", config_path=str(tmp_path / "elsewhere.json"))
    # its file name, inside
    assert read_architecture(absolute)[1] == str(absolute / "elsewhere.json")
    (absolute / "elsewhere.json").rename(tmp_path / "elsewhere.json")
    with pytest.raises(ElmoFileError, match="was found neither in"):  # never read from outside
        read_architecture(absolute)


def test_info_lists_every_file(efml_dir, capsys):
    assert run_cli("info", efml_dir, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(Path(f["path"]).name for f in report["files"]) == [
        "char.dic",
        "cnn_tiny.json",
        "config.json",
        "encoder.pkl",
        "token_embedder.pkl",
        "word.dic",
    ]
    architecture = next(f for f in report["files"] if f["path"].endswith("cnn_tiny.json"))
    assert (
        architecture["sha256"]
        == hashlib.sha256((efml_dir / "cnn_tiny.json").read_bytes()).hexdigest()
    )
    assert report["state_policy"] == "zero" and report["parameters_by_part"]["word embedding"] > 0
