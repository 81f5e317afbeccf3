"""ElmoFeatures.v1 and ElmoMultiHashEmbed.v1: values, gradients, shapes and errors."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Config, set_dropout_rate

from spacy_elmo import ElmoConfigError
from spacy_elmo.architectures import ElmoFeatures, ElmoMultiHashEmbed
from spacy_elmo.doc_data import ElmoDocData
from spacy_elmo.extensions import install_extensions
from spacy_elmo.layers import learned_mix, set_sizes
from spacy_elmo.layers.dropout import DROPOUT_NAME

from ..helpers import N_LAYERS, WIDTH, docs_with_layers, mix_layer


def test_mix_values():
    docs = docs_with_layers([4, 0, 6])
    model = ElmoFeatures(N_LAYERS, WIDTH)
    model.initialize(X=docs)
    mix = mix_layer(model)
    mix.set_param("s", np.array([1.0, -1.0, 0.5], dtype="f"))
    mix.set_param("gamma", np.array([2.0], dtype="f"))
    w = np.exp([1.0, -1.0, 0.5]) / np.exp([1.0, -1.0, 0.5]).sum()
    Y = model.predict(docs)
    assert [y.shape for y in Y] == [(4, WIDTH), (0, WIDTH), (6, WIDTH)]
    for doc, y in zip(docs, Y):
        np.testing.assert_allclose(
            y, 2.0 * np.tensordot(w, doc._.elmo_data.layers, 1), rtol=1e-5, atol=1e-6
        )
    np.testing.assert_allclose(learned_mix(model), w, rtol=1e-6)


def loss_and_grads(model, docs, target):
    Y, backprop = model.begin_update(docs)
    dY = [y - t for y, t in zip(Y, target)]
    backprop(dY)
    mix = mix_layer(model)
    loss = sum(float(((y - t) ** 2).sum()) / 2 for y, t in zip(Y, target)) + mix.attrs[
        "l2"
    ] * float((mix.get_param("s") ** 2).sum())
    return loss, mix.get_grad("s").copy(), mix.get_grad("gamma").copy()


@pytest.mark.parametrize("l2, gamma", [(0.0, 1.0), (0.5, 1.0), (0.5, 1.5)])
def test_gradients_match_finite_differences(l2, gamma):
    """Also at gamma other than its initial 1, where `gamma * mixed` and `mixed` differ."""
    docs = docs_with_layers([5, 3], seed=1)
    target = [np.random.default_rng(2).normal(size=(len(d), WIDTH)).astype("f") for d in docs]
    model = ElmoFeatures(N_LAYERS, WIDTH, l2=l2)
    model.initialize(X=docs)
    mix = mix_layer(model)
    s0 = np.array([0.3, -0.2, 0.1], dtype="f")
    mix.set_param("s", s0.copy())
    mix.set_param("gamma", np.array([gamma], dtype="f"))
    _, d_s, d_gamma = loss_and_grads(model, docs, target)
    eps = 1e-3
    for j in range(N_LAYERS):
        losses = []
        for sign in (1, -1):
            s = s0.copy()
            s[j] += sign * eps
            mix.set_param("s", s)
            mix.set_grad("s", np.zeros_like(s))
            losses.append(loss_and_grads(model, docs, target)[0])
        assert d_s[j] == pytest.approx((losses[0] - losses[1]) / (2 * eps), rel=2e-2, abs=2e-3)
    mix.set_param("s", s0)
    losses = []
    for g in (gamma + eps, gamma - eps):
        mix.set_param("gamma", np.array([g], dtype="f"))
        losses.append(loss_and_grads(model, docs, target)[0])
    assert d_gamma[0] == pytest.approx((losses[0] - losses[1]) / (2 * eps), rel=2e-2)


def test_layer_norm_projection_and_dropout():
    docs = docs_with_layers([4, 5], dtype=np.float16)
    model = ElmoFeatures(N_LAYERS, WIDTH, layer_norm=True, projection=4, dropout=0.5)
    model.initialize(X=docs)
    assert model.get_dim("nO") == 4
    Y = model.predict(docs)
    assert [y.shape for y in Y] == [(4, 4), (5, 4)]
    mix = mix_layer(model)
    normed = ElmoFeatures(N_LAYERS, WIDTH, layer_norm=True)
    normed.initialize(X=docs)
    out = normed.predict(docs)[0]
    layers = docs[0]._.elmo_data.layers.astype("f")
    z = (layers - layers.mean(-1, keepdims=True)) / np.sqrt(layers.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, z.mean(0), rtol=1e-4, atol=1e-5)
    Y1, _ = model.begin_update(docs)
    Y2, _ = model.begin_update(docs)
    assert not np.allclose(Y1[0], Y2[0])  # dropout in training
    assert mix.get_dim("nO") == WIDTH


def test_dropout_is_on_the_output_after_the_projection():
    """`dropout` zeroes values of the features' output: about `rate` of them exactly 0 in training,
    even with a projection (dropout before it would leave none 0)."""
    docs = docs_with_layers([40, 30], seed=3)
    model = ElmoFeatures(N_LAYERS, WIDTH, projection=4, dropout=0.5)
    model.initialize(X=docs)
    Y, _ = model.begin_update(docs)
    zeros = sum(int((y == 0).sum()) for y in Y) / sum(y.size for y in Y)
    assert 0.35 < zeros < 0.65
    assert not any((y == 0).any() for y in model.predict(docs))


def test_dropout_masks_the_gradient_as_the_output():
    """The gradient reaching the mix goes through the same mask as the output: with dY all ones,
    d_gamma is the sum of the dropped-out output over gamma."""
    docs = docs_with_layers([40, 30], seed=4)
    model = ElmoFeatures(N_LAYERS, WIDTH, dropout=0.5)
    model.initialize(X=docs)
    mix = mix_layer(model)
    mix.set_param("gamma", np.array([1.5], dtype="f"))
    Y, backprop = model.begin_update(docs)
    backprop([np.ones_like(y) for y in Y])
    expected = sum(float(y.astype(np.float64).sum()) for y in Y) / 1.5
    assert mix.get_grad("gamma")[0] == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_missing_features_raise_except_during_shape_inference():
    nlp = spacy.blank("en")
    install_extensions()
    model = ElmoFeatures(N_LAYERS, WIDTH)
    init_docs = [Doc(nlp.vocab, words=["a", "b"])]
    model.initialize(X=init_docs)
    assert model.predict(init_docs)[0].shape == (2, WIDTH)  # shape inference: zeros allowed
    assert not model.predict(init_docs)[0].any()
    # never in training; `spacy pretrain` and `spacy debug model` run no annotating component,
    # where the advice to list 'elmo' in annotating_components cannot help
    with pytest.raises(
        ValueError, match="annotating_components.*`spacy pretrain` and `spacy debug"
    ):
        model.begin_update(init_docs)
    with pytest.raises(ValueError, match="the 'elmo' component must run before"):
        model.predict([Doc(nlp.vocab, words=["c"])])  # nor at inference


def test_wrong_sizes_and_mix_only_raise():
    docs = docs_with_layers([3])
    model = ElmoFeatures(N_LAYERS, WIDTH * 2)
    model.initialize()
    with pytest.raises(
        ValueError, match="biLM of n_layers 3, width 16, but this Doc's are n_layers 3, width 8"
    ):
        model.predict(docs)
    docs[0]._.elmo_data = ElmoDocData(
        None, np.zeros((3, WIDTH), "f"), np.ones(3, "f") / 3, docs[0]._.elmo_data.spans
    )
    with pytest.raises(ValueError, match="keep_layers = true"):
        ElmoFeatures(N_LAYERS, WIDTH).predict(docs)


def test_multihash_embed_concatenates_and_reduces():
    docs = docs_with_layers([4, 7])
    model = ElmoMultiHashEmbed(
        width=16,
        attrs=["NORM", "SHAPE"],
        rows=[100, 50],
        include_static_vectors=False,
        elmo=ElmoFeatures(N_LAYERS, WIDTH, projection=6),
    )
    model.initialize(X=docs)
    Y, backprop = model.begin_update(docs)
    assert [y.shape for y in Y] == [(4, 16), (7, 16)]
    backprop([np.ones_like(y) for y in Y])
    assert np.abs(mix_layer(model).get_grad("gamma")).sum() > 0


def test_architectures_resolve_from_config():
    config = Config().from_str("""
[model]
@architectures = "spacy.Tok2Vec.v2"

[model.embed]
@architectures = "spacy_elmo.ElmoMultiHashEmbed.v1"
width = 32
attrs = ["NORM"]
rows = [100]
include_static_vectors = false

[model.embed.elmo]
@architectures = "spacy_elmo.ElmoFeatures.v1"
n_layers = 3
width = 8
dropout = 0.1
l2 = 0.01
layer_norm = true
projection = 4

[model.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = 32
depth = 1
window_size = 1
maxout_pieces = 2
""")
    model = registry.resolve(config)["model"]
    docs = docs_with_layers([3, 2])
    model.initialize(X=docs)
    assert [y.shape for y in model.predict(docs)] == [(3, 32), (2, 32)]


@pytest.mark.parametrize("projection,dropout", [(None, 0.0), (None, 0.2), (5, 0.0)])
def test_null_sizes_are_taken_from_the_docs_layers(projection, dropout):
    docs = docs_with_layers([4, 3])
    model = ElmoMultiHashEmbed(
        width=16,
        attrs=["NORM"],
        rows=[100],
        include_static_vectors=False,
        elmo=registry.get("architectures", "spacy_elmo.ElmoFeatures.v1")(
            None, None, projection=projection, dropout=dropout
        ),
    )
    model.initialize(X=docs)
    mix = mix_layer(model)
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (N_LAYERS, WIDTH)
    assert [y.shape for y in model.predict(docs)] == [(4, 16), (3, 16)]


def test_set_sizes_that_disagree_fail_at_initialize():
    model = ElmoFeatures(N_LAYERS + 1, WIDTH * 2)
    with pytest.raises(
        ValueError, match=r"n_layers = 4, width = 16, but .* has n_layers 3, width 8"
    ):
        model.initialize(X=docs_with_layers([2]))


def test_null_sizes_without_a_biLM_are_an_error():
    install_extensions()
    with pytest.raises(ValueError, match="n_layers or width null and nothing to take them from"):
        ElmoFeatures(None, None).initialize(X=[Doc(spacy.blank("en").vocab, words=["a"])])


def test_v2_has_the_recommended_defaults_and_v1_keeps_its_own():
    config = Config().from_str("""
[v1]
@architectures = "spacy_elmo.ElmoFeatures.v1"
n_layers = 3
width = 8

[v2]
@architectures = "spacy_elmo.ElmoFeatures.v2"
""")
    filled = registry.fill(config)
    assert {k: filled["v1"][k] for k in ("dropout", "l2")} == {"dropout": 0.0, "l2": 0.0}
    assert {k: filled["v2"][k] for k in ("n_layers", "width", "dropout", "l2")} == {
        "n_layers": None,
        "width": None,
        "dropout": 0.2,
        "l2": 0.001,
    }
    v2 = registry.resolve(config)["v2"]
    assert [node.attrs["rate"] for node in v2.walk() if node.name == DROPOUT_NAME] == [0.2]
    assert mix_layer(v2).attrs["l2"] == 0.001


def test_the_configured_dropout_survives_spacys_training_dropout():
    """spaCy sets every layer's `dropout_rate` to `[training] dropout` at each update
    (`thinc.api.set_dropout_rate`): an ElmoFeatures' own `dropout` (0.2 recommended) was
    replaced, so every rate but 0 trained alike. The configured rate is kept, and applied."""
    docs = docs_with_layers([300, 200])
    model = ElmoFeatures(N_LAYERS, WIDTH, dropout=0.9)
    model.initialize(X=docs)
    set_dropout_rate(model, 0.1)  # what a tagger's update does
    Y, backprop = model.begin_update(docs)
    zeros = sum(int((y == 0).sum()) for y in Y) / sum(y.size for y in Y)
    assert 0.85 < zeros < 0.95, zeros
    backprop([np.ones_like(y) for y in Y])  # the mix's gradient, through the same masks
    assert not any((y == 0).all() for y in model.predict(docs))  # none in prediction


@pytest.mark.parametrize(
    "setting,value",
    [
        ("dropout", -0.5),
        ("dropout", 1.0),
        ("dropout", 1.5),
        ("dropout", "0.2"),
        ("projection", 0),
        ("projection", -3),
        ("projection", 2.5),
        ("l2", -1.0),
        ("l2", float("inf")),
        ("l2", float("nan")),
    ],
)
def test_feature_settings_out_of_range_are_one_error_naming_them(setting, value):
    """A negative projection failed deep in thinc's initializer, 0 meant none, and a negative l2 or
    a dropout outside [0, 1) trained without a word."""
    with pytest.raises(ElmoConfigError, match=f"ElmoFeatures: {setting} must be"):
        ElmoFeatures(N_LAYERS, WIDTH, **{setting: value})


def test_a_trained_mix_that_meets_another_biLM_says_to_give_it_its_own():
    """A sourced (trained) component's mix has the sizes of its weights: the error suggested a
    config override that spaCy refuses ('not a section value that can be overridden')."""
    model = ElmoFeatures(None, None)
    model.initialize(X=docs_with_layers([2]))
    path = "components.tok2vec.model.embed.elmo"
    with pytest.raises(ElmoConfigError, match="reads width 8, but the biLM has width 16") as err:
        set_sizes(mix_layer(model), N_LAYERS, 2 * WIDTH, "the biLM", [path])
    assert "give it that biLM, or train the component again" in str(err.value)
    assert f"--{path}" not in str(err.value)
