"""The int8 kernels: which one a CPU gets, that both compute the same products, and that oneDNN's
adds the LSTM's hidden product into the gate inputs without a temporary."""

from __future__ import annotations

import pytest
import torch

from spacy_elmo import ElmoConfigError, load_bilm
from spacy_elmo.bilm import int8

from ..helpers import data_path

ENGINE = int8.int8_engine()
needs_both = pytest.mark.skipif(
    ENGINE is None or not int8.has_onednn_linear(),
    reason="this torch lacks oneDNN's quantized linear or a quantized engine",
)


@pytest.mark.parametrize(
    "machine, flags, onednn",
    [
        ("x86_64", {"avx2", "avx512_vnni"}, True),  # AVX512-VNNI (Zen 4, Xeon)
        ("x86_64", {"avx2", "avx_vnni"}, True),  # AVX-VNNI
        ("x86_64", {"avx2", "amx_int8"}, True),
        ("x86_64", {"avx2", "fma"}, False),  # AVX2 only: fbgemm, measured there
        ("aarch64", {"asimddp"}, False),  # Arm: qnnpack
    ],
)
def test_the_int8_kernel_is_chosen_by_the_cpu(monkeypatch, machine, flags, onednn):
    monkeypatch.setattr(int8.platform, "machine", lambda: machine)
    monkeypatch.setattr(int8, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(int8, "has_onednn_linear", lambda: True)
    monkeypatch.setattr(int8, "int8_engine", lambda: "engine")
    assert int8.int8_kernel() == ("onednn" if onednn else "engine")


def test_without_onednn_or_an_engine_there_is_no_int8_kernel(monkeypatch):
    monkeypatch.setattr(int8, "cpu_flags", lambda: frozenset({"avx512_vnni"}))
    monkeypatch.setattr(int8, "has_onednn_linear", lambda: False)
    monkeypatch.setattr(int8, "int8_engine", lambda: None)
    assert int8.int8_kernel() is None


def off_grid_ties(rows: int, cols: int, step: float, seed: int) -> torch.Tensor:
    """Inputs a quarter step off the grid (no kernel's rounding can differ), within 63 steps."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-63, 63, (rows, cols), generator=g) + 0.25) * step


@needs_both
@pytest.mark.parametrize("bias", [False, True])
def test_both_kernels_compute_the_same_products(bias):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 300, generator=g) * 0.1
    b = torch.randn(300, generator=g) if bias else None
    one, other = (int8.Int8Product(w, b, bound=3.0, kernel=k) for k in ("onednn", ENGINE))
    x = off_grid_ties(37, 48, one.input_scale, 1)
    xw = torch.randn(37, 300, generator=g)
    for a, c in [
        (one(x), other(x)),
        (one.gates(xw.clone(), x), other.gates(xw.clone(), x)),
        (one.into(torch.empty(37, 300), x), other.into(torch.empty(37, 300), x)),
    ]:
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-5)
    # the exact product on the grid, in float64
    exact = (torch.round(x / one.input_scale) * one.input_scale).double() @ (
        torch.round(w / one.weight_scale.unsqueeze(0)) * one.weight_scale.unsqueeze(0)
    ).double() + (0 if b is None else b.double())
    torch.testing.assert_close(one(x).double(), exact, rtol=1e-6, atol=1e-5)


@pytest.mark.skipif(
    not int8.has_onednn_linear(), reason="this torch lacks oneDNN's quantized linear"
)
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_onednn_multiplies_each_int32_sum_by_one_float32_scale(rows):
    """Each result is the row's exact int32 sum times one float32 number per column, rounded once,
    so a row's bits do not depend on the kernel its batch's row count selects. The grid's step and
    the weights' scale given to oneDNN apart took other bits at 1 to 43 rows than in a batch on an
    AMX host (every sentence of test_precision's batch test, up to 4.8e-7)."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(96, 200, generator=g) * 0.1
    product = int8.Int8Product(w, bound=3.0, kernel="onednn")
    step = product.input_scale
    x = off_grid_ties(rows, 96, step, 4)
    weight_scale = (w.abs().amax(dim=0) / 127).double()  # (200,)
    sums = torch.round(x / step).double() @ torch.round(w / weight_scale.float()).double()
    expected = (sums * (weight_scale * step).float().double()).float()
    assert torch.equal(product(x), expected)


@needs_both
def test_both_kernels_scale_rows_and_balance_alike():
    g = torch.Generator().manual_seed(2)
    w, b = torch.randn(64, 200, generator=g) * 0.1, torch.randn(200, generator=g)
    x = torch.randn(25, 64, generator=g) * 40
    for make in (int8.RowScaledInt8Product, int8.BalancedInt8Product):
        one, other = (make(w, b, kernel=k) for k in ("onednn", ENGINE))
        # a row's grid comes from its largest |x|: rounding may differ by a step where the two
        # kernels' divisions round a tie apart, which the bound below allows
        torch.testing.assert_close(one(x), other(x), rtol=1e-3, atol=1e-2)
        assert torch.allclose(one(x), x @ w + b, rtol=0.05, atol=0.05 * float((x @ w).abs().max()))


def largest_allocation(f) -> int:
    """Bytes of the largest allocation while `f()` runs (torch's profiler)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as profile:
        f()
    return max([e.cpu_memory_usage for e in profile.events()] + [0])


@needs_both
def test_onednn_adds_the_hidden_product_in_place_without_a_temporary():
    """Each LSTM step adds the hidden product into its gate inputs `(n, 4D)`: on oneDNN in place
    (a fresh `(n, 4D)` float32 temporary per step was the cost under glibc's default allocator);
    the engine's kernel makes one, which shows that the measure sees it."""
    w = torch.randn(64, 1024) * 0.1
    x, xw = off_grid_ties(100, 64, 6 / 127, 3), torch.randn(100, 1024)
    temporary = xw.numel() * 4
    onednn = int8.Int8Product(w, bound=3.0, kernel="onednn")
    assert onednn.gates(xw, x).data_ptr() == xw.data_ptr()
    assert largest_allocation(lambda: onednn.gates(xw, x)) < temporary / 4
    engine = int8.Int8Product(w, bound=3.0, kernel=ENGINE)
    assert largest_allocation(lambda: engine.gates(xw, x)) >= temporary


@pytest.mark.parametrize("kernel", ["onednn", ENGINE])
def test_a_row_scaled_hidden_product_adds_the_scaled_rows(kernel):
    """Without a bound (weights whose options set no proj_clip) the hidden product scales each row
    of h onto the grid in the step's `gates` too, not only when called."""
    if kernel is None or (kernel == "onednn" and not int8.has_onednn_linear()):
        pytest.skip(f"no {kernel} kernel in this torch")
    g = torch.Generator().manual_seed(4)
    w = torch.randn(16, 64, generator=g) * 0.1
    product = int8.RowScaledInt8Product(w, kernel=kernel)
    x, xw = torch.randn(5, 16, generator=g) * 4, torch.randn(5, 64, generator=g)
    expected = xw + x @ w
    torch.testing.assert_close(product.gates(xw.clone(), x), xw + product(x))
    assert (product.gates(xw.clone(), x) - expected).abs().max() < 0.05


def test_wide_bounds_are_scaled_per_row_and_narrow_ones_use_the_fixed_grid():
    w = torch.randn(16, 64) * 0.1
    assert type(int8.int8_product(w, bound=3.0)) is int8.Int8Product
    assert type(int8.int8_product(w, bound=6.0)) is int8.Int8Product  # two layers' sum of clip 3
    assert type(int8.int8_product(w, bound=100.0)) is int8.RowScaledInt8Product
    # the README: a proj_clip over 8 scales each row, one of 8 keeps the fixed grid
    assert type(int8.int8_product(w, bound=8.0)) is int8.Int8Product
    assert type(int8.int8_product(w, bound=8.5)) is int8.RowScaledInt8Product
    assert type(int8.int8_product(w)) is int8.RowScaledInt8Product


def test_the_grid_keeps_values_beyond_the_bound_at_its_ends():
    step = 0.5
    x = torch.tensor([[-1e9, -31.75, 0.0, 31.75, 1e9]])  # 63.5 steps of 0.5 = 31.75
    assert int8.on_7bit_grid(x, step).tolist() == [[0, 0, 64, 128, 128]]


def test_qnnpack_is_no_int8_kernel(monkeypatch):
    """qnnpack's packed weights lack the fixed-grid product (int8 failed inside torch at the first
    embed): without VNNI and under that engine int8 is one error before anything runs."""
    if "qnnpack" not in torch.backends.quantized.supported_engines:
        pytest.skip("this torch has no qnnpack engine")
    monkeypatch.setattr(int8, "cpu_flags", lambda: frozenset({"avx2"}))
    engine = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = "qnnpack"
        assert int8.int8_engine() is None and int8.int8_kernel() is None
        with pytest.raises(ElmoConfigError, match="quantized engine 'qnnpack'"):
            load_bilm(data_path("allennlp_elmo_fixture"), precision="int8")
        assert load_bilm(data_path("allennlp_elmo_fixture"), precision="auto").precision != "int8"
    finally:
        torch.backends.quantized.engine = engine
