"""The project's configs: the columns of `spacy train`'s table are scores their pipelines
produce."""

import pytest
import spacy
from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example

from ..helpers import fixture_config


@pytest.mark.parametrize(
    "name", ["tagger_base", "tagger_elmo", "ner_base", "ner_elmo", "pretrain_tok2vec"]
)
def test_every_score_column_is_a_score_the_pipeline_produces(name, fixture_dir):
    """`spacy train` shows a column for every score weight that is not null, 0.00 where the pipeline
    has no such score (a tagger that writes UPOS to Token.tag has no pos_acc)."""
    nlp = spacy.util.load_model_from_config(
        fixture_config(f"{name}.cfg", fixture_dir), auto_fill=True
    )
    gold = Doc(
        nlp.vocab,
        words=["Ann", "saw", "Paris", "."],
        tags=["PROPN", "VERB", "PROPN", "PUNCT"],
        ents=["B-PER", "O", "B-LOC", "O"],
    )
    scores = Scorer(nlp).score([Example(gold.copy(), gold)])
    columns = [
        key for key, weight in nlp.config["training"]["score_weights"].items() if weight is not None
    ]
    assert columns and [key for key in columns if key not in scores] == []
