"""User journeys through spaCy's own command line and the package's: `spacy train` with the shipped
configs on biLMs of any size, `spacy evaluate`, `spacy package --build wheel` and `spacy.load` of
the installed wheel, `spacy init fill-config`, and the smaller steps a new user takes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from thinc.api import Config

from spacy_elmo import BiLMOptions, ElmoResourceError
from spacy_elmo.bilm import BiLM
from spacy_elmo.weights import export_hdf5

from .helpers import CONFIGS, data_path, read_conllu

# A random biLM of sizes no published model has: 1 LSTM layer of projection 20 -> 2 output layers of
# width 40.
RANDOM_OPTIONS = {
    "lstm": {
        "dim": 32,
        "projection_dim": 20,
        "n_layers": 1,
        "cell_clip": 3,
        "proj_clip": 3,
        "use_skip_connections": True,
    },
    "char_cnn": {
        "embedding": {"dim": 4},
        "filters": [[1, 8], [2, 8], [3, 16]],
        "n_highway": 1,
        "activation": "relu",
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}
# The published small model's sizes (3 output layers of width 256), as
# ../shared/tools/make_elmo_weights.py writes them.
SMALL_OPTIONS = {
    "lstm": {
        "dim": 1024,
        "projection_dim": 128,
        "n_layers": 2,
        "cell_clip": 3,
        "proj_clip": 3,
        "use_skip_connections": True,
    },
    "char_cnn": {
        "embedding": {"dim": 16},
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 1,
        "activation": "relu",
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}
OVERRIDE = "--components.tok2vec.model.embed.elmo.width"


def env(**extra) -> dict:
    """The test's environment for a child process: one torch thread (the models are tiny), no
    GPU."""
    out = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", COLUMNS="200")
    out.update(extra)
    return out


def run(*args, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=kwargs.pop("env", None) or env(),
        **kwargs,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train.spacy (40 UD EWT sentences) and dev.spacy (20), gold tags, no sentence boundaries."""
    folder = data_path("ud_english_ewt")
    out = tmp_path_factory.mktemp("corpus")
    nlp = spacy.blank("en")
    for name, file_name, n in (
        ("train", "en_ewt-ud-train.conllu.gz", 40),
        ("dev", "en_ewt-ud-dev.conllu.gz", 20),
    ):
        docs = [
            Doc(nlp.vocab, words=s.words, tags=s.tags) for s in read_conllu(folder / file_name, n)
        ]
        DocBin(docs=docs).to_disk(out / f"{name}.spacy")
    return out


def write_random_bilm(directory: Path, options: dict) -> Path:
    """A random biLM of these sizes in the bilm-tf / AllenNLP layout (options.json +
    weights.hdf5)."""
    import torch

    torch.manual_seed(0)
    export_hdf5(BiLM(BiLMOptions.from_dict(options)), directory)
    return directory


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory) -> Path:
    return write_random_bilm(tmp_path_factory.mktemp("random_bilm"), RANDOM_OPTIONS)


def spacy_train(
    config: Path, output: Path, corpus: Path, weights: Path, *overrides
) -> subprocess.CompletedProcess:
    return run(
        "-m",
        "spacy",
        "train",
        config,
        "--output",
        output,
        "--paths.train",
        corpus / "train.spacy",
        "--paths.dev",
        corpus / "dev.spacy",
        "--paths.elmo",
        weights,
        "--training.max_steps",
        4,
        "--training.eval_frequency",
        2,
        *overrides,
    )


def mix_sizes(nlp) -> tuple:
    node = next(n for n in nlp.get_pipe("tok2vec").model.walk() if n.name == "elmo_mix")
    return node.get_dim("nL"), node.get_dim("nO")


# ------------------------------------------------------------------------------ item: sizes from
# the biLM
def test_shipped_configs_take_the_sizes_from_the_biLM():
    def feature_blocks(section):
        for value in section.values():
            if isinstance(value, dict):
                if str(value.get("@architectures", "")).startswith("spacy_elmo.ElmoFeatures."):
                    yield value
                yield from feature_blocks(value)

    for path in sorted(CONFIGS.glob("*.cfg")):
        for block in feature_blocks(Config().from_disk(path, interpolate=False)["components"]):
            assert block["@architectures"] in (
                "spacy_elmo.ElmoFeatures.v2",
                "spacy_elmo.ElmoFeatures.v3",
            ), path
            assert block["n_layers"] is None and block["width"] is None, path


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("bilm,sizes", [("fixture", (3, 32)), ("small", (3, 256))])
def test_spacy_train_shipped_config_takes_the_biLM_sizes(
    fixture_dir, corpus, tmp_path, bilm, sizes
):
    """The shipped tagger config as it is, on the fixture biLM (width 32) and on random weights of
    the published small size (256): n_layers and width come from the biLM."""
    weights = (
        fixture_dir if bilm == "fixture" else write_random_bilm(tmp_path / "small", SMALL_OPTIONS)
    )
    result = spacy_train(CONFIGS / "tagger_elmo.cfg", tmp_path / "out", corpus, weights)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert mix_sizes(nlp) == sizes
    assert all(t.tag_ for t in nlp("The cat sat on the mat ."))


@pytest.mark.timeout(120)
def test_spacy_train_size_that_disagrees_fails_in_initialize(fixture_dir, corpus, tmp_path):
    """A width set by the user that the biLM does not have: one line naming both sizes and the
    override, before any training (no model-last)."""
    result = spacy_train(
        CONFIGS / "tagger_elmo.cfg", tmp_path / "out", corpus, fixture_dir, OVERRIDE, 256
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "256" in last and "32" in last and f"{OVERRIDE} 32" in last and "null" in last, last
    assert not (tmp_path / "out" / "model-last").exists()


# ------------------------------------------------------------------------------ item: the packaging
# journey
LOAD_AND_TAG = """
import json, sys
import spacy

nlp = spacy.load(sys.argv[1])
doc = nlp("The cat sat on the mat .")
tags, shape = [t.tag_ for t in doc], list(doc._.elmo.shape)
print(json.dumps({"file": nlp.path and str(nlp.path), "tags": tags, "elmo": shape}))
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_evaluate_package_install_load(random_weights, corpus, tmp_path):
    """`spacy train` (the shipped tagger config on a biLM of 2 layers of width 40), `spacy
    evaluate`, `spacy package --build wheel`, the wheel installed into a directory, then
    `spacy.load(name)` in a fresh process with that directory on PYTHONPATH and the original weights
    moved away."""
    weights = tmp_path / "weights"
    shutil.copytree(random_weights, weights)
    trained = spacy_train(CONFIGS / "tagger_elmo.cfg", tmp_path / "out", corpus, weights)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    model = tmp_path / "out" / "model-last"
    assert mix_sizes(spacy.load(model)) == (2, 40)

    evaluated = run(
        "-m",
        "spacy",
        "evaluate",
        model,
        corpus / "dev.spacy",
        "--output",
        tmp_path / "metrics.json",
    )
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
    assert 0.0 <= json.loads((tmp_path / "metrics.json").read_text())["tag_acc"] <= 1.0

    (tmp_path / "packages").mkdir()
    packaged = run(
        "-m",
        "spacy",
        "package",
        model,
        tmp_path / "packages",
        "--name",
        "elmo_journey",
        "--version",
        "0.0.1",
        "--build",
        "wheel",
        timeout=180,
    )
    assert packaged.returncode == 0, packaged.stdout[-3000:] + packaged.stderr[-3000:]
    wheels = list((tmp_path / "packages").glob("*/dist/*.whl"))
    assert len(wheels) == 1, packaged.stdout[-3000:]
    target = tmp_path / "site"
    installed = run(
        "-m", "pip", "install", "--no-deps", "--no-index", "--target", target, wheels[0]
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    weights.rename(tmp_path / "weights_moved_away")
    loaded = run(
        "-c", LOAD_AND_TAG, "en_elmo_journey", cwd=tmp_path, env=env(PYTHONPATH=str(target))
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    out = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(target))
    assert out["elmo"] == [7, 40] and len(out["tags"]) == 7 and all(out["tags"])


# ------------------------------------------------------------------------------ item: smaller steps
FILL_ME = """
[nlp]
lang = "en"
pipeline = ["elmo", "tok2vec"]

[components]

[components.elmo]
factory = "elmo"

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.Tok2Vec.v2"

[components.tok2vec.model.embed]
@architectures = "spacy_elmo.ElmoMultiHashEmbed.v1"
width = 64
attrs = ["NORM"]
rows = [1000]
include_static_vectors = false

[components.tok2vec.model.embed.elmo]
@architectures = "spacy_elmo.ElmoFeatures.v2"

[components.tok2vec.model.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = 64
depth = 1
window_size = 1
maxout_pieces = 3
"""


@pytest.mark.timeout(60)
def test_fill_config_writes_the_recommended_defaults(tmp_path):
    (tmp_path / "base.cfg").write_text(FILL_ME)
    result = run(
        "-m", "spacy", "init", "fill-config", tmp_path / "base.cfg", tmp_path / "filled.cfg"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    filled = Config().from_disk(tmp_path / "filled.cfg", interpolate=False)["components"][
        "tok2vec"
    ]["model"]["embed"]
    assert {k: filled["elmo"][k] for k in ("n_layers", "width", "dropout", "l2")} == {
        "n_layers": None,
        "width": None,
        "dropout": 0.2,
        "l2": 0.001,
    }


def test_convert_help_shows_the_file_names():
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["convert", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0
    assert "elmo_<stem>_options.json" in result.output, result.output


def test_a_bad_weights_path_is_one_error_at_initialize_or_first_use(
    fixture_dir, tmp_path, monkeypatch
):
    """The weights setting is read when the biLM is first needed (a pipeline's own biLM, from
    `spacy.load` or `from_bytes`, never reads it): one error naming the setting and the path."""
    from spacy_elmo import ElmoFileError
    from spacy_elmo.layers import get_embedder

    missing = tmp_path / "no_such_weights"
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    for weights, expected in ((missing, str(missing)), ("small", "spacy_elmo download small")):
        for first_use in (lambda nlp: nlp.initialize(), lambda nlp: nlp("A cat .")):
            nlp = spacy.blank("en")
            nlp.add_pipe("elmo", config={"weights": str(weights)})
            with pytest.raises(ElmoFileError, match=r"\[components.elmo\] weights: ") as err:
                first_use(nlp)
            assert expected in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists()  # nothing downloaded
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    assert get_embedder(elmo.model) is None  # loaded on first use
    assert nlp("A cat .")._.elmo.shape == (3, 32)


@pytest.mark.parametrize("keep_layers", [True, False])
def test_float16_storage_is_what_the_views_give(fixture_dir, keep_layers):
    texts = ["The cat sat on the mat .", "Colorless green ideas sleep furiously ."]
    views = {}
    for store in ("float32", "float16"):
        nlp = spacy.blank("en")
        nlp.add_pipe(
            "elmo", config={"weights": str(fixture_dir), "store": store, "keep_layers": keep_layers}
        )
        docs = list(nlp.pipe(texts))
        views[store] = [(d._.elmo, d[1]._.elmo, d[1:4]._.elmo, d[2:2]._.elmo) for d in docs]
    for v32, v16 in zip(views["float32"], views["float16"]):
        for a, b in zip(v32, v16):
            assert a.dtype == np.float32 and b.dtype == np.float16
            np.testing.assert_allclose(b.astype(np.float32), a, atol=3e-3, rtol=3e-3)


def test_a_failed_download_leaves_no_empty_directory(tmp_path, monkeypatch, capsys):
    import urllib.error

    from spacy_elmo.cli import main
    from spacy_elmo.weights import download as download_module

    def unreachable(url, target, *args):
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(download_module, "_fetch", unreachable)
    with pytest.raises(SystemExit) as exit_info:
        main(["download", "small", "--no-progress"])
    assert exit_info.value.code == 1 and "could not reach" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "small").exists()

    def partial(url, target, *args):  # what a resumed download continues from is kept
        target.with_name(target.name + ".part").write_bytes(b"partial")
        raise ElmoResourceError(f"{url}: incomplete")

    monkeypatch.setattr(download_module, "_fetch", partial)
    with pytest.raises(SystemExit):
        main(["download", "small", "--no-progress"])
    assert [p.name for p in (tmp_path / "cache" / "small").iterdir()] == [
        "elmo_2x1024_128_2048cnn_1xhighway_options.json.part"
    ]


def test_float16_similarity_is_summed_in_float32(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo", config={"weights": str(fixture_dir), "store": "float16", "vector_hooks": True}
    )
    doc = nlp("The cat sat on the mat .")
    data = doc._.elmo_data
    # squares beyond float16's 65504 when summed
    big = (data.layers.astype(np.float32) * 200).astype(np.float16)
    doc._.elmo_data = type(data)(
        layers=big, mixed=None, mix_weights=data.mix_weights, spans=data.spans
    )
    assert doc[1].similarity(doc[1]) == pytest.approx(1.0, abs=1e-3)
