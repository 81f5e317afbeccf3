"""`python -m spacy_elmo init-config`: the config it writes trains with `spacy train`, every
component learns its own ELMo mix, spaCy validates it, and bad input ends with one error line."""

from __future__ import annotations

import gzip
import subprocess
import sys
import warnings

import numpy as np
import pytest
import spacy
from spacy.cli.debug_config import debug_config
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.training.converters import conllu_to_docs
from thinc.api import Config

from spacy_elmo import ElmoConfigError, ElmoUnusedWarning
from spacy_elmo.cli.init_config import SUPPORTED

from ..helpers import ENV, REPO, data_path, one_error_line, run_cli


@pytest.fixture(scope="module")
def ud():
    """60 UD EWT sentences, one a Doc, with every annotation a supported component learns: tags,
    POS, morphs and trees from UD, entities on proper nouns, categories by length."""
    with gzip.open(
        data_path("ud_english_ewt") / "en_ewt-ud-train.conllu.gz", "rt", encoding="utf-8"
    ) as f:
        text = "\n\n".join(f.read().split("\n\n")[:60]) + "\n"
    docs = list(conllu_to_docs(text, n_sents=1, no_print=True))
    for doc in docs:
        doc.ents = [doc[i : i + 1] for i, token in enumerate(doc) if token.pos_ == "PROPN"]
        doc.cats = {"LONG": float(len(doc) > 12), "SHORT": float(len(doc) <= 12)}
    return docs


def examples(nlp, docs):
    return [Example(nlp.make_doc(doc.text), doc) for doc in docs]


def mixes(nlp) -> dict:
    """`{component: [s of each elmo_mix in its model]}`."""
    return {
        name: [node.get_param("s") for node in proc.model.walk() if node.name == "elmo_mix"]
        for name, proc in nlp.pipeline
        if name != "elmo"
    }


def write(tmp_path, *args) -> Config:
    path = tmp_path / "config.cfg"
    assert run_cli("init-config", path, *args) == 0
    return spacy.util.load_config(path)


# ------------------------------------------------------------------------------ spacy train on the
# config
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "optimize,readers", [("efficiency", {"tok2vec"}), ("accuracy", {"tagger", "ner"})]
)
def test_spacy_train_on_the_written_config_learns_ELMo_mixes(
    fixture_dir, ud, tmp_path, optimize, readers
):
    """init-config, then the real `python -m spacy train`: no warning, and the components that read
    ELMo (the shared tok2vec, or each component its own) end with learned mix weights."""
    for name, part in (("train", ud[:24]), ("dev", ud[24:36])):
        DocBin(docs=part).to_disk(tmp_path / f"{name}.spacy")
    config = tmp_path / "config.cfg"
    assert (
        run_cli(
            "init-config",
            config,
            "--pipeline",
            "tagger,ner",
            "--weights",
            fixture_dir,
            "--optimize",
            optimize,
        )
        == 0
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(config),
            "--output",
            str(tmp_path / "out"),
            "--paths.train",
            str(tmp_path / "train.spacy"),
            "--paths.dev",
            str(tmp_path / "dev.spacy"),
            "--training.max_steps",
            "4",
            "--training.eval_frequency",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        env={**ENV, "CUDA_VISIBLE_DEVICES": ""},
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ElmoUnusedWarning" not in result.stderr and "no component reads it" not in result.stderr
    trained = spacy.load(tmp_path / "out" / "model-last")
    learned = {name: s for name, s in mixes(trained).items() if s}
    assert set(learned) == readers
    for name, (s,) in learned.items():
        # the mix logits start at 0: ELMo was read and trained
        assert np.abs(s).max() > 1e-4, (
            name,
            s,
        )
    doc = trained("The cat sat on the mat .")
    assert doc._.elmo.shape == (7, 32) and all(t.tag_ for t in doc)


# ------------------------------------------------------------------------------ every component,
# validated
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "optimize", ["efficiency", pytest.param("accuracy", marks=pytest.mark.slow)]
)
def test_every_supported_component_reads_ELMo(fixture_dir, ud, tmp_path, optimize):
    """All supported components in one config: `spacy debug config` accepts it, spaCy's auto-fill
    has nothing to add, and after a few updates every component's ELMo mix (or the shared one) has
    moved."""
    DocBin(docs=ud[:4]).to_disk(tmp_path / "tiny.spacy")
    config = write(tmp_path, "-p", ",".join(SUPPORTED), "-w", fixture_dir, "-o", optimize)
    tiny = str(tmp_path / "tiny.spacy")
    debug_config(tmp_path / "config.cfg", overrides={"paths.train": tiny, "paths.dev": tiny})
    nlp = spacy.util.load_model_from_config(config, auto_fill=False, validate=True)
    assert (
        nlp.config.to_str()
        == spacy.util.load_model_from_config(config, auto_fill=True).config.to_str()
    )
    assert nlp.pipe_names == [
        "elmo",
        *(["tok2vec"] if optimize == "efficiency" else []),
        *SUPPORTED,
    ]
    assert config["training"]["annotating_components"] == ["elmo"]
    train = examples(nlp, ud[:8])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoUnusedWarning)
        optimizer = nlp.initialize(lambda: train)
    for _ in range(2):
        nlp.update(train, sgd=optimizer, annotates=["elmo"])
    found = mixes(nlp)
    readers = ["tok2vec"] if optimize == "efficiency" else list(SUPPORTED)
    for name, found_mixes in found.items():
        assert len(found_mixes) == (name in readers), (name, found_mixes)
        for s in found_mixes:
            assert np.abs(s).max() > 0, name


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "elmo_at,optimize,expected",
    [
        # the shared tok2vec reads no ELMo; each head its own
        (
            "output",
            "efficiency",
            {"tagger": [3], "ner": [3]},
        ),
        ("both", "efficiency", {"tok2vec": [3], "tagger": [3], "ner": [3]}),
        # each component: input and output, two mixes
        (
            "both",
            "accuracy",
            {"tagger": [3, 3], "ner": [3, 3]},
        ),
    ],
)
def test_elmo_at_the_output_gives_each_component_its_own_mix(
    fixture_dir, ud, tmp_path, elmo_at, optimize, expected
):
    """`--elmo-at output|both` wraps each component's tok2vec in ElmoAtOutput.v1 ([h_k; ELMo_k]);
    the config initializes without the unused-ELMo warning and every mix learns."""
    config = write(
        tmp_path, "-p", "tagger,ner", "-w", fixture_dir, "-o", optimize, "--elmo-at", elmo_at
    )
    for name in ("tagger", "ner"):
        assert (
            config["components"][name]["model"]["tok2vec"]["@architectures"]
            == "spacy_elmo.ElmoAtOutput.v1"
        )
    nlp = spacy.util.load_model_from_config(config, auto_fill=False, validate=True)
    train = examples(nlp, ud[:8])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoUnusedWarning)
        optimizer = nlp.initialize(lambda: train)
    # the heads' output layers start at zero: the encoder's gradient arrives from the 2nd
    for _ in range(3):
        nlp.update(train, sgd=optimizer, annotates=["elmo"])
    found = {name: sorted(len(s) for s in found) for name, found in mixes(nlp).items() if found}
    assert found == expected
    assert all(np.abs(s).max() > 0 for found in mixes(nlp).values() for s in found), mixes(nlp)


@pytest.mark.timeout(120)
def test_elmo_layers_go_to_every_mix(fixture_dir, ud, tmp_path):
    """`--elmo-layers 0,1` (Reimers and Gurevych 2019): every mix the config writes reads layers 0
    and 1 only, and learns."""
    config = write(
        tmp_path,
        "-p",
        "tagger,ner",
        "-w",
        fixture_dir,
        "--elmo-at",
        "both",
        "--elmo-layers",
        "0, 1",
    )
    assert config["components"]["tok2vec"]["model"]["embed"]["elmo"]["layers"] == [0, 1]
    for name in ("tagger", "ner"):
        assert config["components"][name]["model"]["tok2vec"]["elmo"]["layers"] == [0, 1]
    nlp = spacy.util.load_model_from_config(config, auto_fill=False, validate=True)
    train = examples(nlp, ud[:8])
    optimizer = nlp.initialize(lambda: train)
    for _ in range(3):
        nlp.update(train, sgd=optimizer, annotates=["elmo"])
    found = mixes(nlp)
    assert {name: len(s) for name, s in found.items()} == {"tok2vec": 1, "tagger": 1, "ner": 1}
    for name, (s,) in found.items():
        assert s.shape == (2,) and np.abs(s).max() > 0, (name, s)
    edited = write(tmp_path, "-p", "tagger", "-w", fixture_dir, "--elmo-layers", "0,1", "--force")
    # by hand: init-config refuses 0,3
    edited["components"]["tok2vec"]["model"]["embed"]["elmo"]["layers"] = [
        0,
        3,
    ]
    beyond = spacy.util.load_model_from_config(edited, auto_fill=False)
    with pytest.raises(
        ElmoConfigError,
        match=r"layers = \[0, 3\], but the biLM has layers 0 to 2 .*: set "
        r"--components\.tok2vec\.model\.embed\.elmo\.layers to indices below 3",
    ):
        # checked against the biLM when training starts
        beyond.initialize(lambda: examples(beyond, ud[:2]))


def test_options(fixture_dir, tmp_path, capsys):
    """--lang, --gpu (spacy-transformers' convention), the weights as given in [paths] elmo, and -
    for stdout."""
    config = write(tmp_path, "-p", "ner", "-w", fixture_dir, "--lang", "de", "--gpu")
    assert config["nlp"]["lang"] == "de" and config["system"]["gpu_allocator"] == "pytorch"
    assert config["paths"]["elmo"] == str(fixture_dir)
    assert config.interpolate()["components"]["elmo"]["weights"] == str(fixture_dir)
    assert config["nlp"]["pipeline"] == ["elmo", "tok2vec", "ner"]
    assert "spacy train" in capsys.readouterr().out
    # elmo, tok2vec: added
    assert run_cli("init-config", "-", "-p", "elmo,tok2vec,tagger", "-w", fixture_dir) == 0
    out = capsys.readouterr().out
    printed = Config().from_str(out, interpolate=False)
    assert (
        printed["nlp"]["pipeline"] == ["elmo", "tok2vec", "tagger"]
        and printed["system"]["gpu_allocator"] is None
    )
    assert out.startswith("[paths]")


def test_defaults_and_sizes_are_the_ones_the_help_gives(fixture_dir, tmp_path):
    """With --weights alone: tagger, parser and ner in English, one shared tok2vec of width 96 and
    depth 4 whose embedding holds the only ELMo mix, of every layer (--optimize efficiency,
    --elmo-at input); --optimize accuracy: each component its own encoder of width 256 and depth 8
    and its own mix."""
    config = write(tmp_path, "-w", fixture_dir)
    assert config["nlp"]["lang"] == "en"
    assert config["nlp"]["pipeline"] == ["elmo", "tok2vec", "tagger", "parser", "ner"]
    tok2vec = config["components"]["tok2vec"]["model"]
    assert (tok2vec["encode"]["width"], tok2vec["encode"]["depth"]) == (96, 4)
    assert tok2vec["embed"]["elmo"]["layers"] is None
    assert "ElmoAtOutput" not in config.to_str()
    assert config.to_str().count("[components.tok2vec.model.embed.elmo]") == 1
    config = write(tmp_path, "-w", fixture_dir, "-o", "accuracy", "--force")
    for name in ("tagger", "parser", "ner"):
        model = config["components"][name]["model"]["tok2vec"]
        assert (model["encode"]["width"], model["encode"]["depth"]) == (256, 8), name
        assert "elmo" in model["embed"], name


# ------------------------------------------------------------------------------ bad input: one
# error line
@pytest.mark.parametrize(
    "args,expected",
    [
        (["-p", "tagger,srl"], "unsupported component 'srl'; supported: " + ", ".join(SUPPORTED)),
        (["-p", "elmo"], "no component"),
        (["-p", "tagger,tagger"], "a component named twice"),
        (["-o", "fast"], "--optimize must be efficiency or accuracy, got 'fast'"),
        (["--elmo-at", "middle"], "--elmo-at must be input, output or both, got 'middle'"),
        (
            ["--elmo-layers", "0,x"],
            "--elmo-layers '0,x': give distinct layer indices from 0, comma-separated, e.g. 0,1",
        ),
        (["--elmo-layers", "1,1"], "--elmo-layers '1,1': give distinct layer indices from 0"),
        (["--elmo-layers", "1,-1"], "--elmo-layers '1,-1': give distinct layer indices from 0"),
        (
            ["--elmo-layers", "0,5"],
            "--elmo-layers '0,5': the biLM has layers 0 to 2 (0: the token layer)",
        ),
        (["--lang", "xx_nope"], "--lang 'xx_nope': spaCy has no such language"),
    ],
)
def test_bad_settings_are_one_error_line(fixture_dir, tmp_path, capsys, args, expected):
    assert run_cli("init-config", tmp_path / "config.cfg", "-w", fixture_dir, *args) == 1
    assert expected in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "config.cfg").exists()


def test_unknown_weights_fail_at_config_time(tmp_path, capsys):
    assert (
        run_cli("init-config", tmp_path / "config.cfg", "-p", "tagger", "-w", tmp_path / "typo")
        == 1
    )
    line = one_error_line(capsys.readouterr().err)
    assert "--weights" in line and "not found" in line and str(tmp_path / "typo") in line
    assert not (tmp_path / "config.cfg").exists()


def test_an_existing_output_is_kept_unless_forced(fixture_dir, tmp_path, capsys):
    output = tmp_path / "config.cfg"
    output.write_text("mine\n", encoding="utf-8")
    assert run_cli("init-config", output, "-p", "tagger", "-w", fixture_dir) == 1
    assert f"{output} exists: pass --force to overwrite it" in one_error_line(
        capsys.readouterr().err
    )
    assert output.read_text(encoding="utf-8") == "mine\n"
    assert run_cli("init-config", output, "-p", "tagger", "-w", fixture_dir, "--force") == 0
    assert spacy.util.load_config(output)["nlp"]["pipeline"] == ["elmo", "tok2vec", "tagger"]
    assert run_cli("init-config", tmp_path, "-p", "tagger", "-w", fixture_dir, "--force") == 1
    assert "is a directory" in one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------ spacy debug model
@pytest.mark.timeout(180)
def test_spacy_debug_model_analyses_the_elmo_component(fixture_dir, ud, tmp_path):
    """`spacy debug model CONFIG elmo` updates the component (nothing to learn) and predicts with
    its model from Docs: the layers of each Doc's tokens, as token texts give them."""
    DocBin(docs=ud[:4]).to_disk(tmp_path / "tiny.spacy")
    write(tmp_path, "-p", "tagger", "-w", fixture_dir)
    tiny = str(tmp_path / "tiny.spacy")
    done = subprocess.run(
        [sys.executable, "-m", "spacy", "debug", "model", "config.cfg", "elmo", "-P3"]
        + ["--paths.train", tiny, "--paths.dev", tiny],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "model looks good" in done.stdout
    nlp = spacy.util.load_model_from_config(spacy.util.load_config(tmp_path / "config.cfg"))
    nlp.initialize(lambda: [Example(doc, doc) for doc in ud[:4]])
    model = nlp.get_pipe("elmo").model
    from_docs = model.predict(ud[:2])
    from_texts = model.predict([[t.text for t in doc] for doc in ud[:2]])
    assert [a.shape for a in from_docs] == [(3, len(doc), 32) for doc in ud[:2]]
    for a, b in zip(from_docs, from_texts):
        np.testing.assert_array_equal(a, b)
