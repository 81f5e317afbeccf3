"""Matrix products `x W (+ b)` of the inference path in float32 and bfloat16 (int8: `int8.py`); see
`precision.py` for what each precision keeps in float32."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .finite import check_finite


class MatrixProduct:
    """`x W (+ b)` in float32: x `(N, I)`, W `(I, O)`, b `(O,)` -> `(N, O)`. The other precisions
    subclass it.

    The LSTM step uses three: the input product gives the step's gate inputs `xw` (float32 here,
    bfloat16 in `BFloat16Product`), `gates` adds the hidden product to them, `into` writes the cell
    projection."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor] = None):
        self.weight, self.bias = weight, bias

    def __call__(self, x: Tensor) -> Tensor:
        return (
            torch.mm(x, self.weight)
            if self.bias is None
            else torch.addmm(self.bias, x, self.weight)
        )

    def gates(self, xw: Tensor, x: Tensor) -> Tensor:
        """The gate pre-activations `xw + x W` `(n, O)` in float32; xw `(n, O)` comes from an input
        product of the same precision and may be overwritten."""
        return xw.addmm_(x, self.weight)

    def into(self, out: Tensor, x: Tensor) -> Tensor:
        """`out = x W` (no bias), in place."""
        return torch.mm(x, self.weight, out=out)


class BFloat16Product(MatrixProduct):
    """bfloat16 operands; the gate inputs are kept in bfloat16 (half the memory traffic of the
    gathers and chunks), and the hidden product is added to them inside the kernel (float32 sums,
    one rounding), so the step turns one bfloat16 tensor into float32 gates instead of adding a
    float32 copy of the product."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor] = None):
        super().__init__(
            weight.detach().to(torch.bfloat16),
            None if bias is None else bias.detach().to(torch.bfloat16),
        )
        for values in (self.weight, self.bias):
            if values is not None:
                check_finite(values, "the LSTM's weights", "a matrix as bfloat16")

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.to(torch.bfloat16))

    def gates(self, xw: Tensor, x: Tensor) -> Tensor:
        return torch.addmm(xw, x.to(torch.bfloat16), self.weight).float()

    def into(self, out: Tensor, x: Tensor) -> Tensor:
        return out.copy_(torch.mm(x.to(torch.bfloat16), self.weight))
