"""The biLM's low-precision products: int8 and bfloat16 against float32 on the trained fixture
(relative error per layer, `||low - fp32|| / ||fp32||`, over real sentences), "auto", the fallbacks
and errors, and each route that takes a precision (load_bilm, the elmo component, embed
--precision)."""

from __future__ import annotations

import json
import pickle
import platform
import shutil

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoConfigError, load_bilm, save_bilm
from spacy_elmo.bilm import encoder as encoder_module
from spacy_elmo.bilm import int8
from spacy_elmo.bilm import precision as precision_module
from spacy_elmo.bilm import runner as runner_module
from spacy_elmo.layers import get_embedder

from ..helpers import data_path, one_error_line, read_conllu, read_output, run_cli, write_lines

# The accuracy bars on trained weights: bfloat16 within 1e-2, int8 within 3e-2 (per layer).
BAR = {"bfloat16": 1e-2, "int8": 3e-2}


@pytest.fixture(scope="module")
def sentences():
    return [
        s.words for s in read_conllu(data_path("ud_english_ewt", "en_ewt-ud-dev.conllu.gz"), 150)
    ]


@pytest.fixture(scope="module")
def float32_layers(fixture_dir, sentences):
    return load_bilm(fixture_dir, precision="float32").embed(sentences)


def relative_errors(low, ref) -> list:
    """Per layer `||low - ref|| / ||ref||` over every token of every sentence."""
    return [
        float(
            np.linalg.norm(
                np.concatenate([x[k] for x in low]) - np.concatenate([x[k] for x in ref])
            )
            / np.linalg.norm(np.concatenate([x[k] for x in ref]))
        )
        for k in range(ref[0].shape[0])
    ]


@pytest.fixture()
def no_native_bf16(monkeypatch):
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: False)


@pytest.mark.numeric
@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_low_precision_is_within_the_bar_per_layer_and_really_low(
    fixture_dir, sentences, float32_layers, precision, monkeypatch
):
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: True)
    bilm = load_bilm(fixture_dir, precision=precision)
    assert bilm.precision == precision
    errors = relative_errors(bilm.embed(sentences), float32_layers)
    for err in errors:  # the token layer too (int8: its highway and projection)
        assert 1e-5 < err <= BAR[precision], errors  # not float32 in disguise, and within the bar
    out = bilm.embed(sentences[:3])
    assert all(a.dtype == np.float32 for a in out)


@pytest.mark.numeric
def test_int8_stays_within_the_bar_where_the_token_encoder_has_outlier_features(
    fixture_dir, sentences, tmp_path
):
    """Trained biLMs keep a few highway features far larger than the rest (the study's own biLM: the
    largest near 60 where most stay under 2.3). A product whose inputs are scaled per row onto the
    7-bit grid rounds every other feature of such a row to a step or two, so the projection into the
    token layer runs as a `BalancedInt8Product` under int8; the same model with 4 features lifted to
    about 40 (their projection weights divided by 40, so the token layer keeps its scale) stays
    within the bar."""
    bilm = load_bilm(fixture_dir)
    encoder = bilm.network.token_encoder
    with torch.no_grad():
        encoder.highways[-1].b_carry[:4] = 20.0  # the gate passes the transform
        encoder.highways[-1].b_transform[:4] = 40.0
        encoder.w_proj[:4] /= 40.0
    save_bilm(bilm, tmp_path / "outliers")
    reference = load_bilm(tmp_path / "outliers").embed(sentences)
    int8 = load_bilm(tmp_path / "outliers", precision="int8")
    errors = relative_errors(int8.embed(sentences), reference)
    assert max(errors) <= BAR["int8"], errors


@pytest.mark.numeric
@pytest.mark.parametrize("proj_clip", [None, 100.0])
def test_int8_stays_within_the_bar_under_a_loose_or_no_projection_clip(
    fixture_dir, sentences, tmp_path, proj_clip
):
    """The fixed grid spans +-proj_clip: options without one (allowed: no clip) put the hidden state
    on the grid of [-1, 1] (the step cut it off at the grid's ends), and a loose one on a grid too
    coarse for the values the network takes; both scale each row onto the grid instead."""
    weights = tmp_path / "weights"
    weights.mkdir()
    options = json.loads((fixture_dir / "options.json").read_text(encoding="utf-8"))
    if proj_clip is None:
        del options["lstm"]["proj_clip"]
    else:
        options["lstm"]["proj_clip"] = proj_clip
    (weights / "options.json").write_text(json.dumps(options), encoding="utf-8")
    shutil.copy(fixture_dir / "lm_weights.hdf5", weights / "weights.hdf5")
    reference = load_bilm(weights).embed(sentences)
    errors = relative_errors(load_bilm(weights, precision="int8").embed(sentences), reference)
    assert max(errors) <= BAR["int8"], errors


@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_a_sentence_gets_the_same_low_precision_vectors_in_any_batch(
    fixture_dir, sentences, precision, native_bf16
):
    """int8 inputs sit on a fixed grid (not one fitted to each call's range), so rows do not affect
    each other: not in the LSTM, and not in the token encoder, which a fresh biLM (an empty token
    cache) runs over one, two or three distinct words alone (matrix libraries take other kernels
    for so few rows): every sentence, bit for bit. bfloat16's products take other kernels by row
    count on some CPUs (an AVX512-BF16 host moved some sentences by a bfloat16 step): no
    bit-for-bit claim, each sentence within bfloat16's bar of itself in the batch."""
    batch = sentences[:40] + [["Zyx"], ["Zyx", "qwv"], ["Zyx", "qwv", "Zyx", "vvq"]]
    together = load_bilm(fixture_dir, precision=precision).embed(batch)
    alone = [load_bilm(fixture_dir, precision=precision).embed([s])[0] for s in batch]
    if precision == "int8":
        for a, b in zip(alone, together):
            np.testing.assert_array_equal(a, b)
    else:
        assert max(relative_errors(alone, together)) <= BAR["bfloat16"]


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_token_layers_are_the_same_in_any_run_of_words(fixture_dir, monkeypatch, precision):
    """On a CPU the convolutions run over runs of `CONV_WORDS` words, each up to its own longest
    word: a word's token layer is the same alone, in a run of short words, beside a word longer
    than the model's character limit, and in one run of all: bit for bit under int8 (its inputs on
    a fixed grid), within float32 rounding in float32 (the convolution's kernel may differ by
    length)."""
    words = [w * k for w in ("a", "Zy", "qwv\u00e9", "\u4e2d") for k in range(1, 30, 4)] + [
        "x" * 60
    ]
    runner = load_bilm(fixture_dir, precision=precision).runner
    keys = runner.network.token_keys([words])[0]
    with torch.inference_mode():
        alone = torch.cat([runner.encode_words([key]) for key in keys])
        for run in (3, 7, len(words)):
            monkeypatch.setattr(encoder_module, "CONV_WORDS", run)
            together = runner.encode_words(keys)
            if precision == "int8":
                assert torch.equal(together, alone), run
            else:
                torch.testing.assert_close(together, alone, rtol=1e-6, atol=1e-6)


def test_bfloat16_without_native_support_says_so_and_runs_float32(
    fixture_dir, sentences, float32_layers, no_native_bf16
):
    with pytest.warns(RuntimeWarning, match="no native bfloat16"):
        bilm = load_bilm(fixture_dir, precision="bfloat16")
    assert bilm.precision == "float32"
    for a, b in zip(bilm.embed(sentences), float32_layers):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU flags")
@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx2", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni"}, "int8"),  # Xeon, AMX
        ({"avx2", "avx512_bf16", "avx512_vnni"}, "int8"),  # AMD Zen 4: int8 the faster
        ({"avx2", "fma"}, "int8"),  # AVX2 only: bfloat16 emulated
    ],
)
def test_auto_takes_the_path_measured_fastest_on_each_kind_of_host(
    fixture_dir, monkeypatch, flags, expected
):
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    bilm = load_bilm(fixture_dir, precision="auto")
    assert bilm.precision == expected
    assert (
        bilm.precision_reason.startswith("auto: ") and "measured fastest" in bilm.precision_reason
    )
    assert load_bilm(fixture_dir, precision="float32").precision_reason == "as asked"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU flags")
def test_auto_on_a_kind_not_measured_takes_native_bfloat16(fixture_dir, monkeypatch):
    """AVX512-BF16 without VNNI (as Arm BF16): bfloat16, saying that no int8 path was measured
    faster there."""
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    bilm = load_bilm(fixture_dir, precision="auto")
    assert bilm.precision == "bfloat16" and "no int8 kernel faster measured" in (
        bilm.precision_reason
    )


def test_auto_on_a_kind_not_measured_without_native_bfloat16_runs_float32(monkeypatch):
    """Arm without BF16 has an int8 kernel (qnnpack) that no one measured against float32: "auto"
    runs float32 there, as the README says."""
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"asimd", "asimddp"}))
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: False)
    monkeypatch.setattr(precision_module, "int8_kernel", lambda: "qnnpack")
    chosen = precision_module.choose_auto(torch.device("cpu"))
    assert chosen.precision == "float32" and "no int8 path measured faster" in chosen.reason


def test_auto_on_a_gpu_embeds_in_float32_and_trains_in_bfloat16(monkeypatch):
    """On an H200 bfloat16 embedded no faster than float32 (bench/README.md), so "auto" embeds in
    float32 there (exact); pretraining's autocast keeps bfloat16 where native."""
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: True)
    cuda = torch.device("cuda")
    chosen = precision_module.choose_auto(cuda)
    assert chosen.precision == "float32" and "measured" in chosen.reason
    assert precision_module.choose_auto(cuda, training=True).precision == "bfloat16"
    assert precision_module.resolve_precision("auto", cuda) == "float32"
    assert precision_module.resolve_precision("auto", cuda, training=True) == "bfloat16"


def test_auto_without_native_bfloat16_or_int8_runs_float32(fixture_dir, monkeypatch):
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: False)
    monkeypatch.setattr(precision_module, "int8_kernel", lambda: None)
    assert load_bilm(fixture_dir, precision="auto").precision == "float32"
    with pytest.raises(ElmoConfigError, match="precision 'int8' runs on x86 CPUs"):
        load_bilm(fixture_dir, precision="int8")


def test_an_unknown_precision_is_one_error(fixture_dir):
    with pytest.raises(
        ElmoConfigError, match="precision must be one of float32, bfloat16, int8, auto; got 'fp16'"
    ):
        load_bilm(fixture_dir, precision="fp16")


def test_int8_products_pickle_and_follow_new_weights(fixture_dir, sentences):
    bilm = load_bilm(fixture_dir, precision="int8")
    before = bilm.embed(sentences[:20])
    copy = pickle.loads(pickle.dumps(bilm))
    assert copy.precision == "int8"
    for a, b in zip(copy.embed(sentences[:20]), before):
        np.testing.assert_array_equal(a, b)
    # new weights: the int8 copies are made again from them (not the old weights' products)
    state = {
        k: v * 0.5 if k.startswith("lstm.") and v.dim() == 3 else v
        for k, v in bilm.network.state_dict().items()
    }
    bilm.network.load_state_dict(state)
    fresh = load_bilm(fixture_dir, precision="int8")
    fresh.network.load_state_dict(state)
    for a, b in zip(bilm.embed(sentences[:20]), fresh.embed(sentences[:20])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_the_copies_made_at_load_are_the_ones_the_first_call_uses(
    fixture_dir, sentences, precision, native_bf16
):
    """The weights in low precision are made once, by `load_bilm` (which also checks them), not
    again by the first call: that would cost a one-shot `embed` seconds at the published size."""
    bilm = load_bilm(fixture_dir, precision=precision)
    copies = bilm.runner.copies
    made = (copies._products, copies._encoder)
    assert made[0] is not None and made[1] is not None
    bilm.embed(sentences[:5])
    assert copies._products is made[0] and copies._encoder is made[1]


def test_changing_the_precision_recomputes_the_token_layers(fixture_dir, sentences, native_bf16):
    """bfloat16 runs the token encoder in bfloat16 too, so the token layers cached in another
    precision (and the boundary states made from them) are dropped when the precision changes."""
    bilm = load_bilm(fixture_dir)
    bilm.embed(sentences[:30])  # fills the token cache in float32
    bilm.precision = "bfloat16"
    for a, b in zip(
        bilm.embed(sentences[:30]),
        load_bilm(fixture_dir, precision="bfloat16").embed(sentences[:30]),
    ):
        np.testing.assert_array_equal(a, b)
    bilm.precision = "float32"
    for a, b in zip(bilm.embed(sentences[:30]), load_bilm(fixture_dir).embed(sentences[:30])):
        np.testing.assert_array_equal(a, b)


def test_the_elmo_component_takes_a_precision_and_keeps_it_through_spacy_load(
    fixture_dir, sentences, tmp_path
):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "model": {"precision": "int8"}})
    nlp.initialize()
    texts = [" ".join(s) for s in sentences[:10]]
    docs = list(nlp.pipe(texts))
    assert get_embedder(nlp.get_pipe("elmo").model).precision == "int8"
    nlp.to_disk(tmp_path / "nlp")
    for doc, again in zip(docs, spacy.load(tmp_path / "nlp").pipe(texts)):
        np.testing.assert_array_equal(again._.elmo_layers, doc._.elmo_layers)
    float32 = spacy.load(
        tmp_path / "nlp", config={"components": {"elmo": {"model": {"precision": "float32"}}}}
    )
    assert get_embedder(float32.get_pipe("elmo").model).precision == "float32"
    errors = relative_errors(
        [d._.elmo_layers for d in docs], [d._.elmo_layers for d in float32.pipe(texts)]
    )
    assert all(1e-5 < err <= BAR["int8"] for err in errors[1:]), errors


@pytest.mark.parametrize(
    "precision, auto_picks", [("int8", None), ("auto", "int8"), ("auto", "bfloat16")]
)
def test_the_carry_policy_says_it_runs_float32(
    fixture_dir, sentences, precision, auto_picks, native_bf16, monkeypatch
):
    """The "carry" policy runs float32 whatever precision is set: `precision` says what runs, the
    reason why, and the set one applies again under another policy. "auto" as it picks on an
    AVX512-BF16 or AVX2 host (int8) and on an AMX host (bfloat16)."""
    if auto_picks:
        choice = precision_module.AutoChoice(auto_picks, "picked by the test")
        monkeypatch.setattr(runner_module, "choose_auto", lambda device: choice)
    bilm = load_bilm(fixture_dir, state="carry", precision=precision)
    assert bilm.precision == "float32" and "carry policy runs float32" in bilm.precision_reason
    exact = load_bilm(fixture_dir, state="carry").embed(sentences[:5])
    for a, b in zip(bilm.embed(sentences[:5]), exact):
        np.testing.assert_array_equal(a, b)
    bilm.state_policy = "warm"
    assert bilm.precision == (auto_picks or precision) and "carry" not in bilm.precision_reason


def test_embed_cli_precision_is_used_recorded_and_checked_on_resume(
    fixture_dir, sentences, tmp_path, capsys
):
    text = write_lines(tmp_path / "in.txt", [" ".join(s) for s in sentences[:12]])
    out = tmp_path / "out.hdf5"
    assert (
        run_cli(
            "embed",
            text,
            out,
            "--weights",
            fixture_dir,
            "--whitespace",
            "--precision",
            "int8",
            "--no-progress",
        )
        == 0
    )
    arrays, _, attrs = read_output(out)
    expected = load_bilm(fixture_dir, precision="int8").embed([s for s in sentences[:12]])
    for i, layers in enumerate(expected):
        np.testing.assert_array_equal(arrays[str(i)], layers)
    assert json.loads(attrs["spacy_elmo.settings"])["precision"] == "int8"
    capsys.readouterr()
    # continuing it in another precision would mix two precisions in one output: refused, naming the
    # flag
    assert (
        run_cli(
            "embed",
            text,
            out,
            "--weights",
            fixture_dir,
            "--whitespace",
            "--resume",
            "--no-progress",
        )
        == 1
    )
    assert "--precision int8" in one_error_line(capsys.readouterr().err)
    capsys.readouterr()
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "bad.hdf5",
            "--weights",
            fixture_dir,
            "--precision",
            "fp8",
            "--no-progress",
        )
        == 1
    )
    assert "precision must be one of" in one_error_line(capsys.readouterr().err)


def test_precision_does_not_change_the_float32_path(fixture_dir, sentences, float32_layers):
    """float32 goes through the same products as before: bit for bit what a default load gives."""
    assert load_bilm(fixture_dir).precision == "float32"
    with torch.inference_mode():
        for a, b in zip(load_bilm(fixture_dir).embed(sentences), float32_layers):
            np.testing.assert_array_equal(a, b)


@pytest.mark.numeric
@pytest.mark.skipif(
    int8.int8_engine() is None or not int8.has_onednn_linear(),
    reason="this torch lacks oneDNN's quantized linear or a quantized engine",
)
def test_each_int8_kernel_embeds_within_the_bar(
    fixture_dir, sentences, float32_layers, monkeypatch
):
    for kernel in ("onednn", int8.int8_engine()):
        monkeypatch.setattr(int8, "int8_kernel", lambda kernel=kernel: kernel)
        bilm = load_bilm(fixture_dir, precision="int8")
        assert {p.kernel for d in bilm.runner.copies.lstm_products()[0] for p in d} == {kernel}
        errors = relative_errors(bilm.embed(sentences), float32_layers)
        assert max(errors) <= BAR["int8"] and errors[1] > 1e-4, (kernel, errors)
