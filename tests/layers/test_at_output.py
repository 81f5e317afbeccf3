"""ElmoFeatures.v3 (`layers`: a subset of the biLM's layers) and ElmoAtOutput.v1 (`[h_k; ELMo_k]`,
ELMo at the task encoder's output beside ELMo at its input): values, training with two mixes, a
round trip, errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import spacy
from spacy.util import registry

from spacy_elmo import ElmoConfigError
from spacy_elmo.architectures import ElmoAtOutput, ElmoFeaturesLayers
from spacy_elmo.layers import MIX_NAME, learned_mix

from ..helpers import (
    FIXTURE_WIDTH,
    N_LAYERS,
    data_path,
    docs_with_layers,
    mix_layer,
    read_conllu,
    tagged_examples,
)


def features_v3(**settings):
    return registry.resolve({"x": {"@architectures": "spacy_elmo.ElmoFeatures.v3", **settings}})[
        "x"
    ]


@pytest.mark.parametrize("layer", range(N_LAYERS))
def test_one_layer_is_gamma_times_that_layer_exactly(layer):
    docs = docs_with_layers([5, 0, 3])
    model = features_v3(n_layers=N_LAYERS, width=8, dropout=0.0, layers=[layer])
    model.initialize(X=docs)
    mix_layer(model).set_param("gamma", np.array([1.75], dtype="f"))
    for doc, y in zip(docs, model.predict(docs)):
        np.testing.assert_array_equal(y, np.float32(1.75) * doc._.elmo_data.layers[layer])


def test_a_subset_mixes_only_its_layers():
    docs = docs_with_layers([4, 6])
    model = features_v3(n_layers=N_LAYERS, width=8, dropout=0.0, layers=[1, 0])
    model.initialize(X=docs)
    mix = mix_layer(model)
    assert mix.get_param("s").shape == (2,)
    # layers sorted: s[0] for layer 0, s[1] for layer 1
    mix.set_param("s", np.array([0.3, -0.2], dtype="f"))
    w = np.exp([0.3, -0.2]) / np.exp([0.3, -0.2]).sum()
    for doc, y in zip(docs, model.predict(docs)):
        layers = doc._.elmo_data.layers
        np.testing.assert_allclose(y, w[0] * layers[0] + w[1] * layers[1], rtol=1e-5, atol=1e-6)
    before = model.predict(docs[:1])[0]
    data = docs[0]._.elmo_data
    layers = data.layers.copy()
    layers[2] += 100.0  # a layer outside the subset changes nothing
    docs[0]._.elmo_data = replace(data, layers=layers)
    np.testing.assert_array_equal(model.predict(docs[:1])[0], before)


@pytest.mark.parametrize("layers", [[], [0, 0], [1.5], "top"])
def test_bad_layer_lists_are_one_config_error(layers):
    with pytest.raises(
        ElmoConfigError, match="layers must be a non-empty list of distinct layer indices"
    ):
        # from Python; a config's types are checked by spaCy first
        ElmoFeaturesLayers(layers=layers)


def test_a_layer_the_biLM_lacks_is_named_at_initialize():
    model = features_v3(n_layers=N_LAYERS, width=8, layers=[0, 3])
    with pytest.raises(ElmoConfigError, match=r"layers = \[0, 3\], but the biLM has layers 0 to 2"):
        model.initialize(X=docs_with_layers([3]))


def at_output_tagger(fixture_dir, output_layers=(1, 2)):
    """elmo + a tagger whose tok2vec is ElmoAtOutput.v1 over an encoder that reads ELMo at its input
    (.v3, all layers), beside ELMo at its output (.v3, `output_layers`): two mixes of one
    component."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
    encoder = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {
            "@architectures": "spacy_elmo.ElmoMultiHashEmbed.v1",
            "width": 24,
            "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
            "rows": [1000, 500, 500, 500],
            "include_static_vectors": False,
            "elmo": {"@architectures": "spacy_elmo.ElmoFeatures.v3"},
        },
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": 24,
            "depth": 1,
            "window_size": 1,
            "maxout_pieces": 3,
        },
    }
    nlp.add_pipe(
        "tagger",
        config={
            "model": {
                "@architectures": "spacy.Tagger.v2",
                "nO": None,
                "normalize": False,
                "tok2vec": {
                    "@architectures": "spacy_elmo.ElmoAtOutput.v1",
                    "tok2vec": encoder,
                    "elmo": {
                        "@architectures": "spacy_elmo.ElmoFeatures.v3",
                        "layers": list(output_layers),
                        "dropout": 0.0,
                    },
                },
            }
        },
    )
    return nlp


def test_a_tagger_with_elmo_at_input_and_output_trains_and_round_trips(fixture_dir, tmp_path):
    nlp = at_output_tagger(fixture_dir)
    train = [
        (s.words, s.tags)
        for s in read_conllu(data_path("ud_english_ewt", "en_ewt-ud-dev.conllu.gz"), 60)
    ]
    examples = tagged_examples(nlp, train)
    spacy.util.fix_random_seed(0)
    optimizer = nlp.initialize(lambda: examples)
    tok2vec = nlp.get_pipe("tagger").model.get_ref("tok2vec")
    assert tok2vec.get_dim("nO") == 24 + FIXTURE_WIDTH  # encoder + ELMo
    mixes = [node for node in tok2vec.walk() if node.name == MIX_NAME]
    # output: layers [1, 2]; input: all
    assert sorted(m.get_param("s").shape for m in mixes) == [
        (2,),
        (3,),
    ]
    elmo = nlp.get_pipe("elmo")
    assert set(elmo.listening_components) == {"tagger"}
    # each mix listens, with its sizes from elmo
    assert sorted(map(id, elmo.listeners)) == sorted(map(id, mixes))
    assert all((m.get_dim("nL"), m.get_dim("nO")) == (N_LAYERS, FIXTURE_WIDTH) for m in mixes)
    before = [m.get_param("s").copy() for m in mixes]
    for _ in range(3):
        for batch in spacy.util.minibatch(examples, 8):
            nlp.update(batch, sgd=optimizer, annotates=["elmo"])
    after = [m.get_param("s") for m in mixes]
    # both mixes learn, separately
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(after, before))
    texts = [" ".join(words) for words, _ in train[:10]]
    expected = [[t.tag_ for t in doc] for doc in nlp.pipe(texts)]
    scores = nlp.get_pipe("tagger").predict(
        list(nlp.get_pipe("elmo").pipe(nlp.make_doc(t) for t in texts))
    )
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert [[t.tag_ for t in doc] for doc in loaded.pipe(texts)] == expected
    loaded_scores = loaded.get_pipe("tagger").predict(
        list(loaded.get_pipe("elmo").pipe(loaded.make_doc(t) for t in texts))
    )
    for a, b in zip(loaded_scores, scores):
        np.testing.assert_array_equal(a, b)
    loaded_mixes = [n for n in loaded.get_pipe("tagger").model.walk() if n.name == MIX_NAME]
    assert sorted(map(id, loaded.get_pipe("elmo").listeners)) == sorted(map(id, loaded_mixes))
    for a, b in zip(loaded_mixes, mixes):
        np.testing.assert_array_equal(a.get_param("s"), b.get_param("s"))
        assert a.attrs["layers"] == b.attrs["layers"]


def test_a_layer_the_biLM_lacks_names_the_override(fixture_dir):
    """In a pipeline the error names the component's settings as `spacy train` takes them (its two
    ElmoFeatures both), in one line."""
    nlp = at_output_tagger(fixture_dir, output_layers=[1, 3])
    examples = tagged_examples(nlp, [(["Hello", "there", "."], ["INTJ", "ADV", "PUNCT"])])
    with pytest.raises(ElmoConfigError) as err:
        nlp.initialize(lambda: examples)
    assert str(err.value) == (
        "ElmoFeatures: layers = [1, 3], but the biLM has layers 0 to 2 (0: the token layer): set "
        "--components.tagger.model.tok2vec.tok2vec.embed.elmo.layers or "
        "--components.tagger.model.tok2vec.elmo.layers "
        "to indices below 3 (or null: all layers)"
    )


def test_learned_mix_gives_every_layer_its_weight():
    """A subset's weights at their layers' places, 0 for a layer it leaves out: one shape for any
    subset."""
    docs = docs_with_layers([3])
    model = features_v3(n_layers=N_LAYERS, width=8, layers=[0, 2])
    model.initialize(X=docs)
    mix_layer(model).set_param("s", np.array([0.5, -0.5], dtype="f"))
    w = np.exp([0.5, -0.5]) / np.exp([0.5, -0.5]).sum()
    np.testing.assert_allclose(learned_mix(model), [w[0], 0.0, w[1]], rtol=1e-6)


def test_at_output_nests():
    """An ElmoAtOutput as the encoder of another: three mixes side by side, widths summed."""
    docs = docs_with_layers([4, 2])
    inner = ElmoAtOutput(
        features_v3(n_layers=N_LAYERS, width=8), features_v3(n_layers=N_LAYERS, width=8, layers=[0])
    )
    outer = ElmoAtOutput(inner, features_v3(n_layers=N_LAYERS, width=8, projection=5))
    outer.initialize(X=docs)
    assert (inner.get_dim("nO"), outer.get_dim("nO")) == (16, 21)
    assert [y.shape for y in outer.predict(docs)] == [(4, 21), (2, 21)]
    assert len([n for n in outer.walk() if n.name == MIX_NAME]) == 3


def test_every_architecture_has_its_entry_point():
    """setup.cfg names each registered architecture, so a config resolves it before spacy_elmo is
    imported."""
    from importlib.metadata import entry_points

    points = {
        p.name: p
        for p in entry_points(group="spacy_architectures")
        if p.name.startswith("spacy_elmo.")
    }
    registered = {
        name for name in registry.architectures.get_all() if name.startswith("spacy_elmo.")
    }
    assert {"spacy_elmo.ElmoFeatures.v3", "spacy_elmo.ElmoAtOutput.v1"} <= set(points) == registered
    for name, point in points.items():
        assert point.load() is registry.architectures.get(name), name
