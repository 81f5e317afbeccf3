"""Pipeline surgery on pipelines holding `elmo`: two `elmo` components, each read by the components
after it until the next one."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoConfigError, ElmoUnusedWarning, load_bilm

from ..helpers import FIXTURE_WIDTH, FLOAT32_ATOL, fixture_config, mix_layer, tagged_examples
from ..reference_bilm import TINY_OPTIONS, write_random_weights

SENTENCES = [
    (["The", "cat", "sat", "."], ["DT", "NN", "VBD", "."]),
    (["A", "dog", "ran", "."], ["DT", "NN", "VBD", "."]),
]


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """Random weights of TINY_OPTIONS: layers 16 wide, the fixture's 32."""
    return write_random_weights(tmp_path_factory.mktemp("narrow"), TINY_OPTIONS, seed=11)


def two_bilm_pipeline(fixture_dir, other):
    """`elmo` (the fixture) read by `tok2vec` / `tagger`, then `elmo2` (`other`) read by
    `tok2vec2` / `tagger2`; the mixes' sizes null (taken from the biLM)."""
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    components = config["components"]
    components["tok2vec"]["model"]["embed"]["elmo"]["width"] = None
    components["elmo2"] = {**copy.deepcopy(dict(components["elmo"])), "weights": str(other)}
    components["tok2vec2"] = copy.deepcopy(dict(components["tok2vec"]))
    components["tagger2"] = copy.deepcopy(dict(components["tagger"]))
    components["tagger2"]["model"]["tok2vec"]["upstream"] = "tok2vec2"
    config["nlp"]["pipeline"] = ["elmo", "tok2vec", "tagger", "elmo2", "tok2vec2", "tagger2"]
    config["training"]["annotating_components"] = ["elmo", "elmo2"]
    return spacy.util.load_model_from_config(config, auto_fill=True)


def test_two_bilms_each_feed_the_components_up_to_the_next(fixture_dir, narrow):
    """A mix reads the layers of the last `elmo` before it (the later one replaces
    `doc._.elmo_data`): only that one lists it and hands it its sizes."""
    nlp = two_bilm_pipeline(fixture_dir, narrow)
    assert nlp.get_pipe("elmo").listening_components == ["tok2vec"]
    assert nlp.get_pipe("elmo2").listening_components == ["tok2vec2"]
    nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    assert mix_layer(nlp.get_pipe("tok2vec").model).get_dim("nO") == FIXTURE_WIDTH
    assert mix_layer(nlp.get_pipe("tok2vec2").model).get_dim("nO") == 16
    for _ in range(2):
        nlp.update(tagged_examples(nlp, SENTENCES), annotates=["elmo", "elmo2"])
    doc = nlp("The cat sat .")
    expected = load_bilm(narrow).embed([["The", "cat", "sat", "."]])[0]
    np.testing.assert_allclose(doc._.elmo_layers, expected, atol=FLOAT32_ATOL)
    assert [t.tag_ for t in doc] != [""] * 4


def test_an_elmo_whose_layers_the_next_replaces_unread_warns(fixture_dir, narrow):
    """`elmo2` added right after `elmo` (the shipped config's annotating_components list `elmo`
    only): the tagger trains on `elmo`'s layers and predicts on `elmo2`'s, which replace them on
    every Doc; `nlp.initialize` says so."""
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    config["components"]["tok2vec"]["model"]["embed"]["elmo"]["width"] = None
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    nlp.add_pipe("elmo", name="elmo2", after="elmo", config={"weights": str(fixture_dir)})
    assert nlp.get_pipe("elmo").listening_components == []
    with pytest.warns(ElmoUnusedWarning, match=r"^'elmo' computes ELMo but 'elmo2' after it "):
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    with warnings.catch_warnings():  # where a component between them mixes elmo's layers: none
        warnings.simplefilter("error", ElmoUnusedWarning)
        nlp = two_bilm_pipeline(fixture_dir, narrow)
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))


def test_a_trained_reader_given_another_biLMs_layers_says_so(fixture_dir, narrow, tmp_path):
    """`spacy.load(..., exclude=["elmo2"])`: `tagger2`, trained on `elmo2`'s 16-wide layers, now
    reads `elmo`'s, 32 wide: one error that says so, not advice to reconfigure a trained mix."""
    nlp = two_bilm_pipeline(fixture_dir, narrow)
    nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    nlp.to_disk(tmp_path / "two")
    loaded = spacy.load(tmp_path / "two", exclude=["elmo2"])
    match = (
        r"^ElmoFeatures reads the layers of a biLM of n_layers 3, width 16, but this Doc's are "
        r"n_layers 3, width 32: .*the biLM it was initialized and trained with"
    )
    with pytest.raises(ElmoConfigError, match=match):
        loaded("The cat sat .")
