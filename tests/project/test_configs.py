"""The project's configs: the columns of `spacy train`'s table are scores their pipelines
produce; the ELMo configs embed with the state policy of the weights they are given; each baseline
is its ELMo config less the features."""

import numpy as np
import pytest
import spacy
from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from spacy_elmo import load_bilm, save_bilm

from ..helpers import CONFIGS, FLOAT32_ATOL, fixture_config


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


ELMO_CONFIGS = sorted(path.name for path in CONFIGS.glob("*_elmo*.cfg"))


@pytest.fixture(scope="module")
def zero_policy_bilm(fixture_dir, tmp_path_factory):
    """The fixture biLM saved with the policy "zero", as `pretrain --training.scheme sentences`
    saves its model."""
    return save_bilm(load_bilm(fixture_dir), tmp_path_factory.mktemp("zero"), state="zero")


def test_every_elmo_config_is_shipped():
    assert len(ELMO_CONFIGS) == 8


@pytest.mark.parametrize("name", ELMO_CONFIGS)
def test_elmo_configs_embed_with_the_weights_own_state_policy(name, zero_policy_bilm):
    """`--paths.elmo MODEL` embeds as `load_bilm(MODEL)` does: the configs leave the state policy to
    the weights."""
    config = Config().from_disk(CONFIGS / name, interpolate=False)
    config["paths"]["elmo"] = str(zero_policy_bilm)
    config["system"]["gpu_allocator"] = None
    config["corpora"] = {}
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    words = ["The", "bank", "raised", "rates", "."]
    doc = nlp.get_pipe("elmo")(Doc(nlp.vocab, words=words))
    expected = load_bilm(zero_policy_bilm).embed([words])[0]
    assert not np.allclose(expected, load_bilm(zero_policy_bilm, state="warm").embed([words])[0])
    np.testing.assert_allclose(doc._.elmo_layers, expected, atol=FLOAT32_ATOL)


@pytest.mark.parametrize("task", ["tagger", "ner"])
def test_the_baseline_differs_from_the_elmo_config_only_in_the_features(task):
    """The README: `tagger_base.cfg` differs from `tagger_elmo.cfg` only in the features (`ner_*`
    likewise). Take the `elmo` component, its path, its annotating and its mix out of the ELMo
    config and the baseline is left, setting for setting."""
    base = Config().from_disk(CONFIGS / f"{task}_base.cfg", interpolate=False)
    elmo = Config().from_disk(CONFIGS / f"{task}_elmo.cfg", interpolate=False)
    assert elmo["paths"].pop("elmo") is None and elmo["components"].pop("elmo")
    assert elmo["nlp"]["pipeline"].pop(0) == "elmo"
    assert elmo["training"]["annotating_components"] == ["elmo"]
    elmo["training"]["annotating_components"] = []
    embed = elmo["components"]["tok2vec"]["model"]["embed"]
    assert embed.pop("elmo") and embed["@architectures"] == "spacy_elmo.ElmoMultiHashEmbed.v1"
    embed["@architectures"] = "spacy.MultiHashEmbed.v2"
    assert elmo == base
