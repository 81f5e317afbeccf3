"""The study's configs for where ELMo goes (project/configs/*_elmo_{output,both,layers01}.cfg):
`spacy debug config` accepts each, its mixes sit where its name says and listen to `elmo`, and it
trains."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
from spacy.cli.debug_config import debug_config
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import Config

from spacy_elmo.layers import MIX_NAME

from ..helpers import CONFIGS, FIXTURE_LAYERS, FIXTURE_WIDTH, data_path, read_conllu

STUDY_CONFIGS = {  # config: {component: the `layers` of each of its mixes (None: all)}
    "tagger_elmo_output.cfg": {"tok2vec": [], "tagger": [None]},
    "ner_elmo_output.cfg": {"tok2vec": [], "ner": [None]},
    "tagger_elmo_both.cfg": {"tok2vec": [None], "tagger": [None]},
    "ner_elmo_both.cfg": {"tok2vec": [None], "ner": [None]},
    "tagger_elmo_layers01.cfg": {"tok2vec": [[0, 1]], "tagger": []},
    "ner_elmo_layers01.cfg": {"tok2vec": [[0, 1]], "ner": []},
}


@pytest.fixture(scope="module")
def gold_docs():
    """8 UD sentences with tags, and proper nouns as PER entities."""
    vocab = spacy.blank("en").vocab
    sentences = read_conllu(data_path("ud_english_ewt") / "en_ewt-ud-train.conllu.gz", 8)
    return [
        Doc(
            vocab,
            words=s.words,
            tags=s.tags,
            ents=["B-PER" if t == "PROPN" else "O" for t in s.tags],
        )
        for s in sentences
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(STUDY_CONFIGS))
def test_study_config_validates_and_trains(fixture_dir, gold_docs, tmp_path, name):
    DocBin(docs=gold_docs[:4]).to_disk(tmp_path / "tiny.spacy")
    tiny = str(tmp_path / "tiny.spacy")
    debug_config(
        CONFIGS / name,
        overrides={
            "paths.train": tiny,
            "paths.dev": tiny,
            "paths.elmo": str(fixture_dir),
            "system.gpu_allocator": None,
        },
    )
    config = Config().from_disk(CONFIGS / name, interpolate=False)
    config["paths"]["elmo"] = str(fixture_dir)
    config["system"]["gpu_allocator"] = None
    config["corpora"] = {}
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    found = {
        component: [n for n in nlp.get_pipe(component).model.walk() if n.name == MIX_NAME]
        for component in STUDY_CONFIGS[name]
    }
    assert {c: [m.attrs["layers"] for m in mixes] for c, mixes in found.items()} == STUDY_CONFIGS[
        name
    ]
    mixes = [m for component_mixes in found.values() for m in component_mixes]
    assert sorted(map(id, nlp.get_pipe("elmo").listeners)) == sorted(map(id, mixes))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in doc]), doc) for doc in gold_docs]
    optimizer = nlp.initialize(lambda: examples)
    # a shared tok2vec's mix first gets a gradient in the third update (heads start at 0)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer, annotates=["elmo"])
    for mix in mixes:
        assert (mix.get_dim("nL"), mix.get_dim("nO")) == (FIXTURE_LAYERS, FIXTURE_WIDTH)
        # s starts at 0, where weight decay leaves it: trained
        assert np.abs(mix.get_param("s")).max() > 0
