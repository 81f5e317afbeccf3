"""Non-finite results are errors (issue 32 item 4): weights are checked after their cast to the
dtype that computes, and what the biLM returns is checked once per batch, in every precision."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import ElmoConfigError, ElmoError, ElmoFileError, load_bilm

from ..helpers import one_error_line, run_cli, write_lines
from ..model_files import W_0, hdf5_model, own_model

SENTENCES = [["The", "cat", "sat", "."], ["Hello", "world"], ["ZZZZZ", "run"]]


def hdf5_copy(fixture_dir, directory, edit):
    """The fixture as options.json + weights.hdf5 in `directory`, `edit(h5py.File)` applied."""
    hdf5_model(fixture_dir, directory)
    with h5py.File(directory / "weights.hdf5", "r+") as f:
        edit(f)
    return directory


def scaled(factor):
    def edit(f):
        f.visititems(
            lambda name, obj: (
                obj.write_direct(obj[...] * np.float32(factor))
                if isinstance(obj, h5py.Dataset)
                else None
            )
        )

    return edit


def huge_z(f):
    """The character 'Z' has an embedding that overflows the token layer of a word of five."""
    rows = f["char_embed"][...]
    rows[ord("Z")] = 3e38  # id ord('Z') + 1, minus the padding row the file does not store
    f["char_embed"][...] = rows


def big_z(f):
    """The character 'Z' makes the token layer of a word of five about 1.5e5: finite in float32,
    beyond float16."""
    rows = f["char_embed"][...]
    rows[ord("Z")] = 1e5
    f["char_embed"][...] = rows


def test_a_float64_weight_that_overflows_float32_is_refused_at_load(fixture_dir, tmp_path):
    directory = own_model(fixture_dir, tmp_path / "m")
    state = {
        k: v.double() for k, v in torch.load(directory / "weights.pt", weights_only=True).items()
    }
    state["lstm.layers.0.w_hidden"][1, 2, 3] = 1e300
    torch.save(state, directory / "weights.pt")
    with pytest.raises(
        ElmoFileError, match="weights.pt.*lstm.layers.0.w_hidden.*float32.*NaN or infinite"
    ):
        load_bilm(directory)


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8"])
def test_weights_that_overflow_when_computed_are_one_error_in_every_precision(
    fixture_dir, tmp_path, precision, native_bf16
):
    directory = hdf5_copy(fixture_dir, tmp_path / "m", scaled(1e30))
    with pytest.raises(ElmoFileError, match=r"weights.hdf5.*NaN or infinite"):
        bilm = load_bilm(directory, precision=precision)
        bilm.embed(SENTENCES)


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8"])
def test_the_error_names_the_first_sentence_with_non_finite_vectors(
    fixture_dir, tmp_path, precision, native_bf16
):
    bilm = load_bilm(hdf5_copy(fixture_dir, tmp_path / "m", huge_z), precision=precision)
    assert all(np.isfinite(a).all() for a in bilm.embed(SENTENCES[:2]))
    with pytest.raises(ElmoFileError, match="sentence 2 ") as err:
        bilm.embed(SENTENCES)
    assert err.value.sentence == 2
    with pytest.raises(ElmoFileError, match="sentence 6 "):
        list(bilm.embed_iter(SENTENCES[:2] * 2 + SENTENCES, batch_size=1))


@pytest.mark.parametrize("batch_size", [64, 1])
def test_of_several_bad_sentences_the_error_names_the_first(fixture_dir, batch_size):
    """Batches go longest first: the error named a later bad sentence where a longer one came
    first (in one batch, or in an earlier one)."""
    bilm = load_bilm(fixture_dir, state="zero")
    with torch.no_grad():
        bilm.network.token_encoder.char_embedding.weight[ord("Q") + 1] = float("nan")
    bilm.network.invalidate()
    sentences = [["Q"], ["fine"], ["Q", "and", "more", "words", "here"]]
    with pytest.raises(ElmoFileError, match="sentence 0 ") as err:
        bilm.embed(sentences, batch_size=batch_size)
    assert err.value.sentence == 0


@pytest.mark.parametrize(
    "sentences",
    [
        [["Q"]] + [["fine", "words"]] * 8 + [["Q", "and", "more", "words", "here"]],
        [["Q"] + ["w"] * 300, ["fine"], ["Q"]],
    ],
    ids=["in-a-later-batch", "a-long-one-in-windows"],
)
def test_a_bad_sentence_computed_after_another_bad_one_is_still_the_one_named(
    fixture_dir, sentences
):
    """The first bad sentence is in a later batch than a longer bad one, or is a long one computed
    in windows after a short bad one's batch failed: the error names it all the same."""
    bilm = load_bilm(fixture_dir, state="zero")
    with torch.no_grad():
        bilm.network.token_encoder.char_embedding.weight[ord("Q") + 1] = float("nan")
    bilm.network.invalidate()
    with pytest.raises(ElmoFileError, match="sentence 0 ") as err:
        bilm.embed(sentences, batch_size=1)
    assert err.value.sentence == 0


def test_int8_products_whose_range_overflows_float32_are_refused_at_load(fixture_dir, tmp_path):
    def edit(f):
        w = f[W_0][...]
        # the hidden product: 16 inputs of up to proj_clip 3 -> 1.4e39, beyond float32
        w[16:] = 3e37
        f[W_0][...] = w

    directory = hdf5_copy(fixture_dir, tmp_path / "m", edit)
    with pytest.raises(ElmoFileError, match="weights.hdf5.*int8.*float32"):
        load_bilm(directory, precision="int8")


def test_a_refused_precision_leaves_the_one_before_it(fixture_dir, tmp_path):
    def edit(f):
        w = f[W_0][...]
        w[16:] = 3e37  # the hidden product overflows float32 in int8 only
        f[W_0][...] = w

    bilm = load_bilm(hdf5_copy(fixture_dir, tmp_path / "m", edit))
    expected = bilm.embed(SENTENCES)
    with pytest.raises(ElmoFileError, match="int8"):
        bilm.precision = "int8"
    assert bilm.precision == "float32" and bilm.precision_reason == "as asked"
    for a, b in zip(expected, bilm.embed(SENTENCES)):
        np.testing.assert_array_equal(a, b)


def test_a_weight_that_overflows_bfloat16_is_refused_at_load(fixture_dir, tmp_path, native_bf16):
    def edit(f):
        w = f["CNN_proj/W_proj"][...]
        w[3, 4] = 3.4e38  # float32's largest finite values round to inf in bfloat16
        f["CNN_proj/W_proj"][...] = w

    directory = hdf5_copy(fixture_dir, tmp_path / "m", edit)
    load_bilm(directory)  # finite in float32
    with pytest.raises(ElmoFileError, match="weights.hdf5.*bfloat16.*NaN or infinite"):
        load_bilm(directory, precision="bfloat16")


# sharded: the shards hold lines 1-2 and 3-5, line 4 the second block of its shard
@pytest.mark.parametrize("block", [[], ["--flush-every", "1", "--shards", "2"]])
def test_embed_names_the_line_and_writes_nothing(fixture_dir, tmp_path, capsys, block):
    directory = hdf5_copy(fixture_dir, tmp_path / "m", huge_z)
    text = write_lines(
        tmp_path / "in.txt", ["The cat sat .", "Hello world", "a b c", "ZZZZZ run", "ok"]
    )
    out = tmp_path / "out.hdf5"
    args = ("-w", directory, "--whitespace", "--no-progress", *block)
    assert run_cli("embed", text, out, *args) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "line 4" in line and "weights.hdf5" in line and "NaN or infinite" in line, line
    assert not (out / "shard-00001.hdf5").exists() if block else not out.exists()


def test_the_component_refuses_non_finite_vectors(fixture_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(hdf5_copy(fixture_dir, tmp_path / "m", huge_z))})
    nlp.initialize()
    assert np.isfinite(nlp("The cat sat .")._.elmo).all()
    with pytest.raises(ElmoError, match="weights.hdf5.*NaN or infinite"):
        nlp("ZZZZZ run .")


def test_embed_float16_names_the_line_beyond_its_range_and_writes_nothing(
    fixture_dir, tmp_path, capsys
):
    directory = hdf5_copy(fixture_dir, tmp_path / "m", big_z)
    text = write_lines(tmp_path / "in.txt", ["The cat sat .", "ZZZZZ run", "ok"])
    out = tmp_path / "out.hdf5"
    options = ("-w", directory, "--whitespace", "--no-progress")
    assert run_cli("embed", text, out, *options, "--dtype", "float16") == 1
    line = one_error_line(capsys.readouterr().err)
    assert "line 2" in line and "float16's range" in line and "float32" in line, line
    assert not out.exists()
    assert run_cli("embed", text, tmp_path / "out32.hdf5", *options) == 0  # float32 holds them


@pytest.mark.parametrize("keep_layers", [True, False])
def test_the_component_refuses_float16_storage_beyond_its_range(fixture_dir, tmp_path, keep_layers):
    weights = str(hdf5_copy(fixture_dir, tmp_path / "m", big_z))
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo", config={"weights": weights, "store": "float16", "keep_layers": keep_layers}
    )
    assert np.isfinite(nlp("The cat sat .")._.elmo).all()
    with pytest.raises(ElmoError, match=r"store='float16'.*float16's range.*use float32"):
        nlp("ZZZZZ run .")


@pytest.mark.parametrize("mix", [[1e308] * 3, [-1e300, 0.5, 0.5], [1e39, 0.0, 0.0]])
def test_a_mix_that_overflows_float32_is_refused_at_config_check(fixture_dir, mix):
    nlp = spacy.blank("en")
    with pytest.raises(ElmoConfigError, match="mix"):
        nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "mix": mix})


def nan_bos(f):
    """`<S>` (character 256 + 1) has an embedding that makes its token layer NaN: a state no output
    shows."""
    rows = f["char_embed"][...]
    rows[256] = [3e38, -3e38, 3e38, -3e38]
    f["char_embed"][...] = rows
    f["CNN_proj/W_proj"][...] = f["CNN_proj/W_proj"][...] * 100


@pytest.mark.parametrize("state", ["zero", "warm"])
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_a_non_finite_state_after_the_boundaries_is_one_error_in_every_precision(
    fixture_dir, tmp_path, state, precision
):
    """int8's fixed grid turned the NaN state after `<S>` into finite inputs and returned finite
    vectors silently; float32 blamed sentence 0 for it. Under "warm" the warm-up text reads `<S>`
    too, so the warm state is the first to hold NaN."""
    bilm = load_bilm(hdf5_copy(fixture_dir, tmp_path / "m", nan_bos), state="zero")
    bilm.state_policy, bilm.precision = state, precision
    first = "the warm start state" if state == "warm" else "the LSTM state after the sentence bou"
    with pytest.raises(ElmoFileError, match=f"weights.hdf5: {first}.* holds NaN"):
        bilm.embed(SENTENCES)


def test_a_non_finite_warm_state_is_one_error(fixture_dir):
    bilm = load_bilm(fixture_dir, state="warm", precision="int8")
    with torch.no_grad():
        bilm.network.warm_c[0, 0, 3] = float("nan")
    with pytest.raises(ElmoFileError, match="the warm start state holds NaN"):
        bilm.embed(SENTENCES)
