"""int8 matrix products: W quantized per output column (symmetric, scale `max|W| / 127`), x on a
fixed grid of 7 bits and one value (0..128 around 64; no kernel's int16 pair sums can saturate),
int32 sums. Inputs of a bound wider than `FIXED_GRID_BOUND`, or none, are scaled per row onto it.

Two kernels compute them, chosen by the CPU (`int8_kernel`), so every process of a machine writes
the same bits: oneDNN's where the CPU has VNNI instructions (AVX512-VNNI, AVX-VNNI, AMX) and this
torch has oneDNN's quantized linear; else fbgemm's (torch's quantized engine "x86" or "fbgemm";
qnnpack's, on Arm, lacks the fixed-grid product, so there is no int8 there). oneDNN adds the hidden
product into the step's gate inputs in place (a "sum" post-op), so an LSTM step allocates no
`(n, 4D)` float32 temporary: under glibc's default allocator each such temporary, made in a
direction's own thread, came from freshly mapped pages (bench/README.md).
"""

from __future__ import annotations

import platform
import warnings
from functools import lru_cache
from typing import Optional

import torch
from torch import Tensor

from .device import cpu_flags
from .finite import check_finite
from .products import MatrixProduct

ONEDNN = "onednn"
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
# The widest bound whose fixed grid (a step of 2 bound / 127) stays fine against the values trained
# networks take (their projections stay within a few units): a published proj_clip of 3, and the
# sum of two layers' outputs, 6. Inputs of a wider bound (a loose proj_clip) are scaled per row.
FIXED_GRID_BOUND = 8.0


def int8_engine() -> Optional[str]:
    """torch's quantized engine (the one selected, `torch.backends.quantized.engine`) where it is
    one whose packed weights take the fixed-grid product (x86's or fbgemm's; qnnpack's do not),
    else None."""
    try:
        engine = torch.backends.quantized.engine
        torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32  # noqa: B018 (present)
    except (AttributeError, RuntimeError):
        return None
    return engine if engine in ("x86", "fbgemm") else None


@lru_cache(maxsize=None)
def has_onednn_linear() -> bool:
    """Whether this torch has oneDNN's quantized linear ops."""
    try:
        torch.ops.onednn.qlinear_prepack  # noqa: B018
        torch.ops.onednn.qlinear_pointwise.binary  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def int8_kernel() -> Optional[str]:
    """The kernel int8 products run on here: "onednn" on an x86 CPU with VNNI, else torch's
    quantized engine (`int8_engine`); None where neither runs (Arm: qnnpack lacks the product)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if x86 and cpu_flags() & VNNI_FLAGS and has_onednn_linear():
        return ONEDNN
    return int8_engine()


def on_7bit_grid(x: Tensor, step: float) -> Tensor:
    """x `(N, I)` within `[-63.5 step, 63.5 step]` -> uint8 `round(x / step) + 64`, in 0..128."""
    return torch.div(x, step).round_().add_(64).clamp_(0, 128).to(torch.uint8)


class Int8Product(MatrixProduct):
    """int8 products `x W (+ b)`, x `(N, I)` -> `(N, O)`, of inputs within `[-bound, bound]` (a
    bound the network guarantees: a clip or a tanh), quantized on that fixed grid, so each row's
    result depends on that row alone. `kernel`: see `int8_kernel` (None: this CPU's). Keeps the
    packed weights only (no float copy of W)."""

    def __init__(
        self,
        weight: Tensor,
        bias: Optional[Tensor] = None,
        *,
        bound: float,
        kernel: Optional[str] = None,
    ):
        w = weight.detach().t().contiguous().float()  # (O, I), one scale per output
        reach = bound * w.double().abs().sum(dim=1) + (
            0 if bias is None else bias.detach().double().abs()
        )
        check_finite(
            reach.float(),
            "the weights",
            "the largest result of a matrix's int8 products, in float32,",
        )
        scale = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny).double()
        # torch marks quantized tensor creation deprecated; its kernels stay
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            q = torch.quantize_per_channel(
                w, scale, torch.zeros(len(w), dtype=torch.long), 0, torch.qint8
            )
        self.kernel = kernel or int8_kernel()
        # the bias the kernel adds; `bias`: the product's (a row-scaled one adds it after scaling)
        self.kernel_bias = self.bias = None if bias is None else bias.detach().float()
        if self.kernel == ONEDNN:
            self.packed = torch.ops.onednn.qlinear_prepack(q.int_repr(), None)
            self.weight_scale = scale  # (O,) float64
            self.weight_zero = torch.zeros(len(w), dtype=torch.int32)
            self._scales: dict = {}
        else:
            self.packed = torch.ops.quantized.linear_prepack(q, self.kernel_bias)
        self.input_scale = 2 * bound / 127

    def __call__(self, x: Tensor) -> Tensor:
        return self.on_grid(x, self.input_scale)

    def on_grid(self, x: Tensor, step: float, add_to: Optional[Tensor] = None) -> Tensor:
        """`round(x / step) * step W + b` `(N, O)` for x `(N, I)` within `[-63.5 step, 63.5
        step]`; with `add_to` `(N, O)` float32, added to it in place (on oneDNN without a
        temporary)."""
        if self.kernel != ONEDNN:
            y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
                x.contiguous(), step, 64, self.packed
            )
            return y if add_to is None else add_to.add_(y)
        args = (on_7bit_grid(x, step), 1.0, 64, self.packed, self.scales(step), self.weight_zero)
        if add_to is None:
            return torch.ops.onednn.qlinear_pointwise(
                *args, self.kernel_bias, 1.0, 0, torch.float32, "none", [], ""
            )
        return torch.ops.onednn.qlinear_pointwise.binary(
            *args,
            add_to,
            self.kernel_bias,
            1.0,
            0,
            torch.float32,
            1.0,
            0,
            "sum",
            1.0,
            "none",
            [],
            "",
        )

    def scales(self, step: float) -> Tensor:
        """oneDNN's scale per output column `(O,)` for inputs on the grid of `step`, the step
        folded into the weights' scales: each int32 sum is multiplied by one float32 number and
        rounded once, whatever kernel the row count selects. Given apart, the two scales gave a row
        other bits at a few rows than in a batch on an AMX host."""
        if step not in self._scales:
            self._scales[step] = (self.weight_scale * step).float()
        return self._scales[step]

    def gates(self, xw: Tensor, x: Tensor) -> Tensor:
        return self.on_grid(x, self.input_scale, add_to=xw)

    def into(self, out: Tensor, x: Tensor) -> Tensor:
        return out.copy_(self(x))


class RowScaledInt8Product(Int8Product):
    """int8 products of inputs that nothing bounds (the token encoder's and the token layer's): each
    row scaled by its own largest |x| onto the grid of [-1, 1] and the result scaled back, the bias
    added in float32, so each row's result still depends on that row alone. A row holding NaN or
    an infinity comes out NaN or infinite (its scale is), as in float32, for the output check."""

    def __init__(
        self, weight: Tensor, bias: Optional[Tensor] = None, *, kernel: Optional[str] = None
    ):
        super().__init__(weight, None, bound=1.0, kernel=kernel)
        self.bias = None if bias is None else bias.detach().float()

    def __call__(self, x: Tensor) -> Tensor:
        scale = row_scale(x)
        return self.scaled_back(super().__call__(x / scale), scale)

    def gates(self, xw: Tensor, x: Tensor) -> Tensor:
        return xw.add_(self(x))

    def scaled_back(self, y: Tensor, scale: Tensor) -> Tensor:
        """y `(N, O)` computed on rows divided by `scale` `(N, 1)`: `y * scale + b`."""
        return y.mul_(scale) if self.bias is None else torch.addcmul(self.bias, y, scale)


class BalancedInt8Product(RowScaledInt8Product):
    """A `RowScaledInt8Product` for inputs where a few features are far larger than the rest and
    their weights smaller (a trained token encoder's highway output). Each input feature is
    multiplied by its weights' largest |w| and those weights divided by it (the product unchanged),
    so every feature meets the grid at the size of what it contributes; and the rows sit on a grid
    127x finer: what rounding onto the 7-bit grid left behind is multiplied too, on its own grid
    (two exact int8 products, so each row's result still depends on that row alone)."""

    def __init__(
        self, weight: Tensor, bias: Optional[Tensor] = None, *, kernel: Optional[str] = None
    ):
        w = weight.detach().float()
        self.balance = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny)  # (I,)
        super().__init__(w / self.balance.unsqueeze(1), bias, kernel=kernel)

    def __call__(self, x: Tensor) -> Tensor:
        x = x * self.balance
        scale = row_scale(x).mul_(self.input_scale)  # (N, 1): one step of the grid
        steps = x.div_(scale)  # within [-63.5, 63.5]
        coarse = torch.round(steps)
        y = self.on_grid(coarse, 1.0).add_(self.on_grid(steps.sub_(coarse), 1 / 127))
        return self.scaled_back(y, scale)


def row_scale(x: Tensor) -> Tensor:
    """Each row's largest |x| `(N, 1)` of x `(N, I)`, at least the smallest normal float32."""
    return torch.linalg.vector_norm(x, float("inf"), dim=1, keepdim=True).clamp_(
        min=torch.finfo(torch.float32).tiny
    )


def int8_product(weight: Tensor, bias: Optional[Tensor] = None, bound: float = float("inf")):
    """`x W (+ b)` in int8 for inputs within `[-bound, bound]`: on the fixed grid of that bound
    where it is at most `FIXED_GRID_BOUND`, else each row scaled onto it."""
    if bound <= FIXED_GRID_BOUND:
        return Int8Product(weight, bias, bound=bound)
    return RowScaledInt8Product(weight, bias)
