"""Training with task-specific ELMo features: the features matter, the wiring is checked, and
`spacy train` runs the shipped tagger config."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import spacy
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_elmo import ElmoConfigError
from spacy_elmo.doc_data import ElmoDocData

from ..helpers import CONFIGS, data_path, fixture_config, read_conllu, tagged_examples


@pytest.fixture(scope="module")
def ud(fixture_dir):

    folder = data_path("ud_english_ewt")
    return tuple(
        [(s.words, s.tags) for s in read_conllu(folder / name, limit)]
        for name, limit in (("en_ewt-ud-train.conllu.gz", 300), ("en_ewt-ud-dev.conllu.gz", 100))
    )


def build(fixture_dir, **overrides):
    return spacy.util.load_model_from_config(
        fixture_config("tagger_elmo.cfg", fixture_dir, **overrides), auto_fill=True, validate=True
    )


def mix_param(nlp, name):
    node = next(n for n in nlp.get_pipe("tok2vec").model.walk() if n.name == "elmo_mix")
    return node.get_param(name).copy()


def tag_accuracy(nlp, sentences, change_layers=None):
    """Tag accuracy on gold sentences; `change_layers(layers) -> layers` alters each Doc's ELMo
    layers first."""
    docs = list(nlp.get_pipe("elmo").pipe(Doc(nlp.vocab, words=w) for w, _ in sentences))
    if change_layers is not None:
        for doc in docs:
            data = doc._.elmo_data
            doc._.elmo_data = ElmoDocData(
                change_layers(data.layers), None, data.mix_weights, data.spans
            )
    for name in ("tok2vec", "tagger"):
        docs = list(nlp.get_pipe(name).pipe(docs))
    pairs = [(t.tag_, g) for doc, (_, tags) in zip(docs, sentences) for t, g in zip(doc, tags)]
    return sum(p == g for p, g in pairs) / len(pairs)


def test_features_matter(fixture_dir, ud):
    """The fixture biLM is tiny, so the hash embedding is cut to NORM alone: the tagger has to lean
    on ELMo."""
    train, dev = ud
    spacy.util.fix_random_seed(0)
    nlp = build(
        fixture_dir,
        **{
            "training.optimizer.learn_rate": 0.003,
            "components.tok2vec.model.embed.attrs": ["NORM"],
            "components.tok2vec.model.embed.rows": [1000],
        },
    )
    examples = tagged_examples(nlp, train)
    optimizer = nlp.initialize(lambda: examples)
    s0 = mix_param(nlp, "s")
    rng = random.Random(0)
    for _ in range(5):
        rng.shuffle(examples)
        for batch in spacy.util.minibatch(examples, 8):
            nlp.update(batch, sgd=optimizer, annotates=["elmo"])
    acc = tag_accuracy(nlp, dev)
    zeroed = tag_accuracy(nlp, dev, np.zeros_like)
    perm = np.random.default_rng(0)
    shuffled = tag_accuracy(nlp, dev, lambda layers: layers[:, perm.permutation(layers.shape[1])])
    print(
        f"tag accuracy {acc:.3f}, layers zeroed {zeroed:.3f}, shuffled {shuffled:.3f}; s "
        f"{mix_param(nlp, 's')}"
    )
    assert acc > 0.75
    assert zeroed < acc - 0.03 and shuffled < acc - 0.03
    assert np.abs(mix_param(nlp, "s") - s0).max() > 0.05


def test_training_without_elmo_annotating_raises(fixture_dir, ud):
    nlp = build(fixture_dir)
    examples = tagged_examples(nlp, ud[0][:10])
    optimizer = nlp.initialize(lambda: examples)  # shape inference: zeros are fine here
    with pytest.raises(ValueError, match="annotating_components"):
        nlp.update(examples, sgd=optimizer)  # elmo not in `annotates`


class Probe(Pipe):
    """Records the ELMo layers that a Doc has when the next component trains on it and when it is
    evaluated."""

    def __init__(self, name):
        self.name, self.train_seen, self.eval_seen = name, {}, {}

    def initialize(self, get_examples=None, *, nlp=None):
        pass

    def update(self, examples, *, drop=0.0, sgd=None, losses=None):
        for eg in examples:
            self.train_seen[eg.predicted.text] = eg.predicted._.elmo_layers.copy()
        return losses

    def __call__(self, doc):
        self.eval_seen[doc.text] = doc._.elmo_layers.copy()
        return doc


@Language.factory("elmo_test_probe")
def make_probe(nlp, name):
    return Probe(name)


def test_features_are_the_same_in_training_and_evaluation(fixture_dir, ud):
    """Training Docs hold several sentences and no boundaries, as `spacy train` makes them."""
    nlp = build(fixture_dir, **{"components.elmo.max_length": 16})
    nlp.add_pipe("elmo_test_probe", after="elmo")
    train = ud[0][:12]
    groups = [train[i : i + 3] for i in range(0, 12, 3)]
    examples = []
    for group in groups:
        words = [w for ws, _ in group for w in ws]
        tags = [t for _, ts in group for t in ts]
        examples.append(
            Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words, tags=tags))
        )
    optimizer = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=optimizer, annotates=["elmo"])
    nlp.evaluate(examples)
    probe = nlp.get_pipe("elmo_test_probe")
    assert set(probe.train_seen) == set(probe.eval_seen) and len(probe.train_seen) == 4
    for text, layers in probe.train_seen.items():
        np.testing.assert_array_equal(layers, probe.eval_seen[text])


@pytest.mark.parametrize("setter", ["sentencizer", "senter"])  # senter: token.is_sent_start only
def test_sentence_setter_before_elmo_must_annotate(fixture_dir, setter):
    nlp = build(fixture_dir)
    nlp.add_pipe(setter, before="elmo")
    with pytest.raises(ValueError, match=f"'{setter}' sets sentence boundaries before 'elmo'"):
        nlp.initialize()


def test_a_sentence_setter_after_elmo_need_not_annotate(fixture_dir):
    """Only a setter before `elmo` changes the sentences it reads."""
    nlp = build(fixture_dir)
    nlp.add_pipe("sentencizer", after="elmo")
    nlp.get_pipe("tagger").add_label("NN")
    nlp.initialize()
    assert nlp.get_pipe("elmo").caching


def test_a_listened_to_elmo_that_keeps_only_the_mix_is_refused_at_initialize(fixture_dir, ud):
    """The mix of a listening component reads every layer: `keep_layers = false` is one error
    before training starts, not at its first update."""
    nlp = build(fixture_dir, **{"components.elmo.keep_layers": False})
    with pytest.raises(ElmoConfigError, match="'tok2vec' mixes its layers.*keep_layers = true"):
        nlp.initialize(lambda: tagged_examples(nlp, ud[0][:4]))


def features_alone(fixture_dir, projection):
    """A pipeline whose tagger embeds with ElmoFeatures alone (spaCy's Tok2Vec.v2, an encoder of
    width 96)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    embed = {"@architectures": "spacy_elmo.ElmoFeatures.v2", "projection": projection}
    encode = {
        "@architectures": "spacy.MaxoutWindowEncoder.v2",
        **{"width": 96, "depth": 1, "window_size": 1, "maxout_pieces": 2},
    }
    tok2vec = {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode}
    nlp.add_pipe(
        "tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}}
    )
    return nlp


def test_elmo_features_alone_of_another_width_than_the_encoder_is_one_error(fixture_dir, ud):
    """spaCy's encoders take `width` wide input: a mix of the biLM's width before one is named,
    with its fix, at initialize (not thinc's 'Attempt to change dimension' from inside)."""
    nlp = features_alone(fixture_dir, None)
    with pytest.raises(
        ElmoConfigError, match=r"'tagger'.*\(32, the biLM's\).*encoder.*96.*projection = 96"
    ):
        nlp.initialize(lambda: tagged_examples(nlp, ud[0][:4]))
    nlp = features_alone(fixture_dir, 96)
    nlp.initialize(lambda: tagged_examples(nlp, ud[0][:4]))
    assert nlp("A test .")[0].tag_


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [False, True])
def test_spacy_train_with_shipped_config(fixture_dir, ud, tmp_path, frozen):
    from spacy.cli.train import train as spacy_train

    nlp = spacy.blank("en")
    for name, sents in (("train", ud[0][:40]), ("dev", ud[1][:20])):
        db = DocBin(docs=[Doc(nlp.vocab, words=w, tags=t) for w, t in sents])
        db.to_disk(tmp_path / f"{name}.spacy")
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    config_path = tmp_path / "config.cfg"
    config.to_disk(config_path)
    overrides = {
        "paths.train": str(tmp_path / "train.spacy"),
        "paths.dev": str(tmp_path / "dev.spacy"),
        "training.max_steps": 12,
        "training.eval_frequency": 6,
        "training.frozen_components": ["elmo"] if frozen else [],
    }
    spacy_train(config_path, tmp_path / "out", overrides=overrides)
    trained = spacy.load(tmp_path / "out" / "model-last")
    doc = trained("The cat sat on the mat .")
    assert doc._.elmo.shape == (7, 32) and all(t.tag_ for t in doc)


def test_tagger_and_ner_learn_their_own_mix(fixture_dir, ud):
    """Two components in one pipeline, each with its own ElmoFeatures: their mixes move apart."""
    nlp = build(fixture_dir, **{"training.optimizer.learn_rate": 0.01})
    tok2vec = nlp.config.interpolate()["components"]["tok2vec"]["model"]
    nlp.add_pipe(
        "ner",
        config={
            "model": {
                "@architectures": "spacy.TransitionBasedParser.v2",
                "state_type": "ner",
                "extra_state_tokens": False,
                "hidden_width": 32,
                "maxout_pieces": 2,
                "use_upper": True,
                "nO": None,
                "tok2vec": tok2vec,
            }
        },
    )
    examples = []
    for words, tags in ud[0][:60]:
        ents = ["B-NAME" if t == "PROPN" else "O" for t in tags]
        examples.append(
            Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words, tags=tags, ents=ents))
        )
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        for batch in spacy.util.minibatch(examples, 8):
            nlp.update(batch, sgd=optimizer, annotates=["elmo"])
    mixes = [
        n.get_param("s")
        for name in ("tok2vec", "ner")
        for n in nlp.get_pipe(name).model.walk()
        if n.name == "elmo_mix"
    ]
    assert len(mixes) == 2
    assert np.abs(mixes[0]).max() > 0.01 and np.abs(mixes[1]).max() > 0.01
    assert not np.allclose(mixes[0], mixes[1], atol=1e-3)


@pytest.mark.parametrize(
    "name,frozen", [("tagger_elmo.cfg", False), ("ner_elmo.cfg", False), ("tagger_elmo.cfg", True)]
)
def test_shipped_configs_take_the_sizes_from_the_biLM(fixture_dir, ud, name, frozen):
    """The shipped configs as they are (n_layers and width null) on the fixture biLM (3 layers of
    32); with `elmo` frozen, `nlp.initialize` skips it and ElmoFeatures loads its weights."""
    from thinc.api import Config

    config = Config().from_disk(CONFIGS / name, interpolate=False)
    config["paths"]["elmo"] = str(fixture_dir)
    config["system"]["gpu_allocator"] = None
    config["training"]["frozen_components"] = ["elmo"] if frozen else []
    config["corpora"] = {}
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    ents = {"ner_elmo.cfg": lambda tags: ["B-PER" if t == "PROPN" else "O" for t in tags]}.get(name)
    examples = [
        Example(
            Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, tags=t, ents=ents(t) if ents else None)
        )
        for w, t in ud[0][:8]
    ]
    with nlp.select_pipes(disable=config["training"]["frozen_components"]):
        optimizer = nlp.initialize(lambda: examples)
    node = next(n for n in nlp.get_pipe("tok2vec").model.walk() if n.name == "elmo_mix")
    assert (node.get_dim("nL"), node.get_dim("nO")) == (3, 32)
    nlp.update(examples, sgd=optimizer, annotates=["elmo"])


def test_size_that_disagrees_names_its_override(fixture_dir, ud):
    """A tagger with its own tok2vec: the error names that component's setting, as `spacy train`
    takes it."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    embed = {
        "@architectures": "spacy_elmo.ElmoMultiHashEmbed.v1",
        "width": 32,
        "attrs": ["NORM"],
        "rows": [500],
        "include_static_vectors": False,
        "elmo": {"@architectures": "spacy_elmo.ElmoFeatures.v2", "width": 64},
    }
    encode = {
        "@architectures": "spacy.MaxoutWindowEncoder.v2",
        "width": 32,
        "depth": 1,
        "window_size": 1,
        "maxout_pieces": 2,
    }
    nlp.add_pipe(
        "tagger",
        config={
            "model": {
                "@architectures": "spacy.Tagger.v2",
                "tok2vec": {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode},
            }
        },
    )
    examples = tagged_examples(nlp, ud[0][:4])
    with pytest.raises(ValueError) as err:
        nlp.initialize(lambda: examples)
    message = str(err.value)
    assert "width = 64" in message and "width 32" in message and "\n" not in message
    assert "--components.tagger.model.tok2vec.embed.elmo.width 32" in message


def tiny_corpora(ud, folder):
    """train.spacy (20 UD sentences) and dev.spacy (6) in `folder` -> their overrides."""
    vocab = spacy.blank("en").vocab
    for name, sents in (("train", ud[0][:20]), ("dev", ud[1][:6])):
        DocBin(docs=[Doc(vocab, words=w, tags=t) for w, t in sents]).to_disk(
            folder / f"{name}.spacy"
        )
    return {"paths.train": str(folder / "train.spacy"), "paths.dev": str(folder / "dev.spacy")}


def train_as_spacy_does(config, **overrides):
    """`spacy train`'s steps (init_nlp, then its loop, quiet) on `config` -> the pipeline."""
    from spacy.training.initialize import init_nlp
    from spacy.training.loop import train

    config = spacy.util.load_config_from_str(config.to_str(), overrides=overrides)
    nlp = init_nlp(config)
    train(nlp, None, stdout=io.StringIO(), stderr=io.StringIO())
    return nlp


TWO_EPOCHS = {"training.max_epochs": 2, "training.max_steps": 0, "training.eval_frequency": 1000}


def test_frozen_elmo_caches_the_training_features(fixture_dir, ud, tmp_path):
    """spaCy skips `initialize` for a frozen `elmo`: the cache turns on at the first update (the
    first batch was embedded already), so the second epoch of 20 sentences is read from it."""
    nlp = train_as_spacy_does(
        fixture_config("tagger_elmo.cfg", fixture_dir),
        **tiny_corpora(ud, tmp_path),
        **TWO_EPOCHS,
        **{"training.frozen_components": ["elmo"]},
    )
    elmo = nlp.get_pipe("elmo")
    assert elmo.caching and len(elmo.cache) >= 20 and elmo.cache.hits >= 15


def test_sourced_elmo_caches_the_training_features(fixture_dir, ud, tmp_path):
    """An `elmo` sourced from a saved pipeline and trained on (resumed) caches too; it cannot see
    the pipeline that trains it, so a warning says that its sentence wiring is not checked."""
    overrides = tiny_corpora(ud, tmp_path)
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    spacy.util.load_model_from_config(config, auto_fill=True).to_disk(tmp_path / "saved")
    config["components"]["elmo"] = {"source": str(tmp_path / "saved")}
    with pytest.warns(UserWarning, match="its sentence wiring is not checked"):
        nlp = train_as_spacy_does(config, **overrides, **TWO_EPOCHS)
    elmo = nlp.get_pipe("elmo")
    assert elmo.caching and len(elmo.cache) >= 20 and elmo.cache.hits >= 15


def test_an_elmo_taken_out_of_its_pipeline_is_not_checked_against_it(fixture_dir):
    """A mix reading an `elmo` in training checks its wiring against the pipeline whose factory
    made it only while that pipeline holds it: one taken out says its wiring is not checked, not
    that the sentencizer of a pipeline it left must annotate."""
    nlp = spacy.blank("en", config={"training": {"annotating_components": ["elmo"]}})
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    _, elmo = nlp.remove_pipe("elmo")
    with pytest.warns(UserWarning, match="its sentence wiring is not checked"):
        elmo.read_in_training()
    assert elmo.caching


def with_sentencizer_first(config):
    config["nlp"]["pipeline"] = ["sentencizer", *config["nlp"]["pipeline"]]
    config["components"]["sentencizer"] = {"factory": "sentencizer"}
    return config


def test_frozen_elmo_after_a_sentence_setter_that_does_not_annotate_stops_training(
    fixture_dir, ud, tmp_path
):
    """As without freezing: training Docs would reach `elmo` unsplit, evaluation Docs split."""
    config = with_sentencizer_first(fixture_config("tagger_elmo.cfg", fixture_dir))
    with pytest.raises(ElmoConfigError, match="'sentencizer' sets sentence boundaries before"):
        train_as_spacy_does(
            config, **tiny_corpora(ud, tmp_path), **{"training.frozen_components": ["elmo"]}
        )


def test_frozen_elmo_after_a_sentence_setter_that_annotates_trains(fixture_dir, ud, tmp_path):
    config = with_sentencizer_first(fixture_config("tagger_elmo.cfg", fixture_dir))
    nlp = train_as_spacy_does(
        config,
        **tiny_corpora(ud, tmp_path),
        **{
            "training.frozen_components": ["elmo"],
            "training.annotating_components": ["sentencizer", "elmo"],
            "training.max_steps": 2,
        },
    )
    assert nlp.get_pipe("elmo").caching
