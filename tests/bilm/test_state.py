"""State policies: "zero" and "warm" give a sentence the same vectors whatever surrounds it."""

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm

from ..helpers import FLOAT32_ATOL
from ..reference_bilm import TINY_OPTIONS, ReferenceBiLM, write_random_weights

# also run on MKL's compatible path and torch's default kernels (.ci/run)
pytestmark = pytest.mark.numeric

TARGET = "The bank raised its rates on Tuesday .".split()
OTHERS = [
    ["Short"],
    (
        "A much longer neighbour sentence that forces a lot of padding onto the target row in a "
        "batch ."
    ).split(),
    "Another one , of middling length .".split(),
    [],
    "x y z".split(),
]


@pytest.fixture(params=["zero", "warm"])
def bilm(request, fixture_dir):
    return load_bilm(fixture_dir, state=request.param)


def _target_output(bilm, batch, batch_size):
    outs = bilm.embed(batch, batch_size=batch_size)
    return outs[batch.index(TARGET)]


def test_independent_of_batch_size_neighbours_order_padding(bilm):
    alone = bilm.embed([TARGET], batch_size=1)[0]
    cases = [
        ([TARGET, *OTHERS], 64),
        ([*OTHERS, TARGET], 64),
        ([*OTHERS[::-1], TARGET], 2),
        ([OTHERS[1], TARGET, OTHERS[0]], 3),
        ([TARGET] + OTHERS * 20, 7),
    ]
    for batch, batch_size in cases:
        np.testing.assert_allclose(
            _target_output(bilm, batch, batch_size), alone, atol=FLOAT32_ATOL, rtol=0
        )
    streamed = list(bilm.embed_iter(iter([*OTHERS, TARGET, *OTHERS]), batch_size=2))
    np.testing.assert_allclose(streamed[len(OTHERS)], alone, atol=FLOAT32_ATOL, rtol=0)


def test_repeated_calls_are_deterministic(bilm):
    first = bilm.embed([TARGET, *OTHERS])
    second = bilm.embed([TARGET, *OTHERS])
    for a, b in zip(first, second):
        assert np.array_equal(a, b)


def test_warm_differs_from_zero_and_is_stored(fixture_dir):
    warm, zero = load_bilm(fixture_dir, state="warm"), load_bilm(fixture_dir, state="zero")
    assert float(warm.network.warm_h.abs().sum()) > 0
    assert np.abs(warm.embed([TARGET])[0][2] - zero.embed([TARGET])[0][2]).max() > 1e-3
    # the token layer does not depend on the state
    np.testing.assert_array_equal(warm.embed([TARGET])[0][0], zero.embed([TARGET])[0][0])


def test_carry_row_semantics(tmp_path):
    """Row i continues from row i of the previous call; rows beyond a smaller batch keep their
    state."""
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=1)
    ref = ReferenceBiLM(path / "options.json", path / "weights.hdf5")
    bilm = load_bilm(path, state="carry")
    a, b, c = TARGET, OTHERS[2], OTHERS[4]
    bilm.embed([a, b], batch_size=2)  # rows 0 and 1
    _, s_a = ref.run(a)
    _, s_b = ref.run(b)
    got = bilm.embed([c], batch_size=1)[0]  # row 0 continues after a
    np.testing.assert_allclose(got, ref.run(c, s_a)[0], atol=FLOAT32_ATOL)
    _, s_ac = ref.run(c, s_a)
    got = bilm.embed([a, c], batch_size=2)  # row 1 still continues after b
    np.testing.assert_allclose(got[0], ref.run(a, s_ac)[0], atol=FLOAT32_ATOL)
    np.testing.assert_allclose(got[1], ref.run(c, s_b)[0], atol=FLOAT32_ATOL)
    bilm.reset_state()
    np.testing.assert_allclose(bilm.embed([a])[0], ref.run(a)[0], atol=FLOAT32_ATOL)


def test_carried_rows_reach_only_carry_and_only_the_rows_they_have(tmp_path):
    """Under "carry" a batch larger than the one before starts its rows beyond from zeros; the
    start state of another policy (`initial_state(n, "zero")`) is its own, not the carried one."""
    path = write_random_weights(tmp_path, TINY_OPTIONS, seed=1)
    ref = ReferenceBiLM(path / "options.json", path / "weights.hdf5")
    bilm = load_bilm(path, state="carry")
    a, b, c = TARGET, OTHERS[2], OTHERS[4]
    bilm.embed([a], batch_size=1)
    _, s_a = ref.run(a)
    got = bilm.embed([b, c], batch_size=2)  # row 0 continues after a, row 1 starts from zeros
    np.testing.assert_allclose(got[0], ref.run(b, s_a)[0], atol=FLOAT32_ATOL)
    np.testing.assert_allclose(got[1], ref.run(c)[0], atol=FLOAT32_ATOL)
    h, c0 = bilm.initial_state(2, "zero")
    assert not h.any() and not c0.any()


def test_one_embedder_switched_between_warm_and_zero_gives_each_ones_vectors(fixture_dir):
    """The state after the sentence boundaries is kept per policy: switching `state_policy`
    between "warm" and "zero" on one embedder gives what an embedder of each gives."""
    bilm = load_bilm(fixture_dir, state="warm")
    for policy in ("warm", "zero", "warm"):
        bilm.state_policy = policy
        expected = load_bilm(fixture_dir, state=policy).embed([TARGET])[0]
        np.testing.assert_allclose(bilm.embed([TARGET])[0], expected, atol=FLOAT32_ATOL, rtol=0)


def test_unknown_policy_is_rejected(fixture_dir):
    with pytest.raises(ValueError, match="state policy"):
        load_bilm(fixture_dir, state="hot")
    bilm = load_bilm(fixture_dir)
    with pytest.raises(ValueError, match="state policy"):
        bilm.state_policy = "cold"


def test_derived_state_follows_the_weights(fixture_dir):
    """Caches and the warm state are dropped when weights, device or dtype change, and only then."""
    bilm = load_bilm(fixture_dir, state="warm")
    before = bilm.embed([TARGET])[0]
    assert len(bilm.token_cache.slots) > 0
    bilm.eval()  # no change of mode: the cache stays
    assert len(bilm.token_cache.slots) > 0
    as_double = bilm.double()
    np.testing.assert_allclose(as_double.embed([TARGET])[0], before, atol=FLOAT32_ATOL)
    bilm.float()
    with torch.no_grad():
        bilm.network.token_encoder.b_proj.add_(0.5)
    bilm.network.invalidate()
    after = bilm.embed([TARGET])[0]
    assert np.abs(after[0] - before[0]).max() > 0.4  # the token layer moved with the bias
    fresh = load_bilm(fixture_dir, state="warm")
    with torch.no_grad():
        fresh.network.token_encoder.b_proj.add_(0.5)
    fresh.network.invalidate()
    np.testing.assert_allclose(fresh.embed([TARGET])[0], after, atol=FLOAT32_ATOL)


def test_warm_state_and_fingerprint_do_not_depend_on_the_thread_count(fixture_dir):
    """The warm state is part of the model (saved with it, in its fingerprint): it must be the same
    bits whatever torch's thread count when it is computed, so that runs on 1 and on N threads
    (sharded or Ray embed runs, their resumes) agree on the model."""
    from spacy_elmo.bilm.threads import torch_threads

    states = []
    for threads in (1, 2):
        with torch_threads(threads):
            bilm = load_bilm(fixture_dir, state="warm")
            bilm.network.compute_warm_state()
            states.append(
                (bilm.network.warm_h.clone(), bilm.network.warm_c.clone(), bilm.fingerprint())
            )
    assert torch.equal(states[0][0], states[1][0]) and torch.equal(states[0][1], states[1][1])
    assert states[0][2] == states[1][2]


def test_embed_iter_leaves_the_callers_code_out_of_inference_mode(fixture_dir):
    """Between the arrays it yields, and when abandoned half way, `embed_iter` must not leave the
    caller in torch's inference mode (tensors made there cannot join autograd later)."""
    bilm = load_bilm(fixture_dir, state="warm")
    stream = bilm.embed_iter(([w] * 3 for w in "abcdefghij"), batch_size=1)
    next(stream)
    assert not torch.is_inference_mode_enabled()
    weight = torch.ones(2, requires_grad=True)
    (weight * 2).sum().backward()  # autograd works while the stream is open
    del stream
    assert not torch.is_inference_mode_enabled()
