"""`nlp.initialize` warns where an `elmo` component runs, components are trained and none reads ELMo
(the pipeline `spacy init config -p elmo,tagger` builds); a pipeline that trains nothing does not
warn."""

from __future__ import annotations

import warnings

import pytest
import spacy
from spacy.cli.init_config import init_config

from spacy_elmo import ElmoUnusedWarning

from ..helpers import fixture_config, tagged_examples

SENTENCES = [
    (["The", "cat", "sat", "."], ["DET", "NOUN", "VERB", "PUNCT"]),
    (["Dogs", "run"], ["NOUN", "VERB"]),
]


def own_embedding(width: int) -> dict:
    """A tok2vec without ELMo: spaCy's HashEmbedCNN of `width`."""
    return {
        "@architectures": "spacy.HashEmbedCNN.v2",
        "width": width,
        "depth": 1,
        "embed_size": 300,
        "window_size": 1,
        "maxout_pieces": 3,
        "subword_features": True,
        "pretrained_vectors": None,
    }


def test_spacy_init_config_with_elmo_warns(fixture_dir):
    config = init_config(lang="en", pipeline=["elmo", "tagger"], optimize="efficiency", gpu=False)
    config["components"]["elmo"]["weights"] = str(fixture_dir)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    assert nlp.pipe_names == ["tok2vec", "elmo", "tagger"]
    with pytest.warns(
        ElmoUnusedWarning,
        match=r"^'elmo' computes ELMo but no component reads it: 'tok2vec', "
        r"'tagger' train without it\..*python -m spacy_elmo init-config",
    ):
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))


def test_no_warning_where_ELMo_is_read_or_nothing_is_trained(fixture_dir):
    """The shipped tagger config reads ELMo; `elmo` alone, or beside a sentencizer, annotates
    Docs."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElmoUnusedWarning)
        nlp = spacy.util.load_model_from_config(
            fixture_config("tagger_elmo.cfg", fixture_dir), auto_fill=True
        )
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir)})
        nlp.initialize()
        nlp.add_pipe("sentencizer", before="elmo")
        nlp.initialize()
        assert nlp("The cat sat. It ran.")._.elmo.shape == (7, 32)


def test_elmo_read_only_by_a_tok2vec_no_component_listens_to_warns(fixture_dir):
    """A tagger with an embedding of its own beside a tok2vec that mixes ELMo (the README's
    snippet in a config whose tagger does not listen): the mix never trains, the tagger trains
    without ELMo, and nothing said so."""
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    config["components"]["tagger"]["model"]["tok2vec"] = own_embedding(32)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    with pytest.warns(ElmoUnusedWarning, match="'tok2vec', 'tagger' train without it"):
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))


@pytest.mark.parametrize("sourced,more", [(["tok2vec"], False), (["tok2vec", "tagger"], True)])
def test_no_warning_where_a_sourced_component_reads_elmo(fixture_dir, sourced, more):
    """`spacy train` initializes with the frozen and resumed (sourced) components disabled: a
    sourced tok2vec that mixes ELMo for its tagger was not seen, and the warning told the user to
    leave out `elmo`, which the tagger reads (`more`: a new tagger without ELMo trains beside the
    sourced ones)."""
    nlp = spacy.util.load_model_from_config(
        fixture_config("tagger_elmo.cfg", fixture_dir), auto_fill=True
    )
    nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    if more:
        nlp.add_pipe("tagger", name="tagger2")
    with nlp.select_pipes(disable=sourced), warnings.catch_warnings():
        warnings.simplefilter("error", ElmoUnusedWarning)
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    assert nlp.get_pipe("tok2vec").listening_components == ["tagger"]


@pytest.mark.parametrize("upstream,warns", [("*", True), ("tok2vec", False)])
def test_a_later_tok2vec_without_elmo_feeding_the_listener_warns(fixture_dir, upstream, warns):
    """A second tok2vec without ELMo between the one that mixes ELMo and the tagger: spaCy feeds a
    `"*"` listener the later tok2vec's output, so the tagger trains without ELMo; a listener that
    names the first still reads it."""
    config = fixture_config("tagger_elmo.cfg", fixture_dir)
    config["nlp"]["pipeline"] = ["elmo", "tok2vec", "tok2vec2", "tagger"]
    config["components"]["tok2vec2"] = {"factory": "tok2vec", "model": own_embedding(96)}
    config["components"]["tagger"]["model"]["tok2vec"]["upstream"] = upstream
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ElmoUnusedWarning)
        nlp.initialize(lambda: tagged_examples(nlp, SENTENCES))
    said = [w for w in caught if issubclass(w.category, ElmoUnusedWarning)]
    assert len(said) == warns, [str(w.message) for w in said]
    if warns:
        assert "'tok2vec', 'tok2vec2', 'tagger' train without it" in str(said[0].message)
