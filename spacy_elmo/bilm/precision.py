"""The precision of the inference path's large matrix products: float32, bfloat16 or int8.

A `MatrixProduct` computes `x W (+ b)` for float32 `x (N, I)`: only the product itself runs in the
chosen precision; the LSTM's cell state, gates, clipping and every output stay float32.

- "bfloat16": W stored in bfloat16, x rounded to bfloat16 per call, products accumulated by the
  kernel in float32; the LSTM's gate inputs are kept in bfloat16 and its gates, cell state and
  outputs in float32 (the embedder also runs the token encoder in bfloat16). Fast where the CPU
  multiplies bfloat16 natively (AMX, AVX512-BF16, Arm BF16) or on a GPU; CPUs without it
  emulate it slower than float32, so there it runs float32 and warns.
- "int8" (`int8.py`): W quantized per output column (symmetric, scale `max|W| / 127`), x on a fixed
  grid over the range the network bounds it to (the LSTM's projection clip, or tanh's 1), int32
  sums: oneDNN's kernels on x86 CPUs with VNNI, else fbgemm's (no int8 on Arm: qnnpack lacks the
  product). A fixed grid, not one fitted to each call's range, keeps every row's result independent
  of the rows computed with it (a sentence gets the same vectors in any batch). Inputs with no
  bound, or a wide one (those of the token encoder's highways, the token layer, the first LSTM
  layer's input; a loose `proj_clip`), are scaled per row onto that grid instead
  (`RowScaledInt8Product`); the character convolutions run as products over their windows of
  characters, on the fixed grid of the largest |character embedding|; the token encoder's
  projection, whose inputs hold a few outlier features in trained models, balanced against its
  weights and on a grid 127x finer (`BalancedInt8Product`). torchao's int8 route runs
  `torch._int_mm`, whose CPU kernel is a reference loop unless compiled, so these kernels are the
  fast int8 route on CPUs.
- "auto": the path measured fastest on this kind of host (`choose_auto`'s table, each row checked
  by `bench/bench_precision.py` on such a host: bench/README.md). A table keyed by the CPU's
  features, not a timing at load, so every process of a machine (shards, a resumed run) picks the
  same path and writes the same bits.
"""

from __future__ import annotations

import copy
import platform
import warnings
from functools import partial
from typing import TYPE_CHECKING, Callable, List, Literal, NamedTuple, Optional

import torch
from torch import Tensor

from ..errors import ElmoConfigError
from .device import cpu_flags
from .finite import check_finite, naming_weights
from .int8 import int8_kernel, int8_product
from .products import BFloat16Product, MatrixProduct

if TYPE_CHECKING:
    from .model import BiLM

Precision = Literal["float32", "bfloat16", "int8", "auto"]
PRECISIONS = ("float32", "bfloat16", "int8", "auto")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ElmoConfigError(
            f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}"
        )
    return precision


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    flags = cpu_flags()
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "bf16" in flags
    return bool(flags & {"amx_bf16", "avx512_bf16"})


class AutoChoice(NamedTuple):
    """What "auto" runs (`precision`) and why (`reason`, one line)."""

    precision: str
    reason: str


def choose_auto(device: torch.device, training: bool = False) -> AutoChoice:
    """The precision "auto" runs on `device`, by the kind of host, as measured there
    (bench/README.md): AMX int8 (oneDNN's int8 kernels outrun its bfloat16 ones); AVX512-BF16
    with VNNI, no AMX (AMD Zen 4) int8; AVX2 only int8 (bfloat16 emulated, slower than float32);
    a GPU float32 (each step's products are small:
    the pass waits on kernel launches, not arithmetic). `training` (no int8 path; autocast of larger
    products): bfloat16 where native, else float32."""
    int8 = not training and device.type == "cpu" and int8_kernel() is not None
    native = native_bfloat16(device)
    flags = cpu_flags()
    if device.type != "cpu":
        if training:
            kind = f"{device.type.upper()} {'with' if native else 'without'} bfloat16"
            return AutoChoice("bfloat16" if native else "float32", kind)
        return AutoChoice("float32", "GPU: bfloat16 measured no faster than float32 (H200)")
    if int8 and "amx_int8" in flags:
        return AutoChoice("int8", "AMX: int8 measured fastest (bfloat16 next)")
    if native and int8 and flags & {"avx512_vnni", "avx_vnni"}:
        return AutoChoice("int8", "AVX512-BF16 and VNNI, no AMX: int8 measured fastest")
    if native:
        return AutoChoice("bfloat16", "native bfloat16 products, no int8 kernel faster measured")
    if int8 and "avx2" in flags:
        return AutoChoice(
            "int8", "no native bfloat16, AVX2: int8 measured fastest (bfloat16 emulated, slower)"
        )
    return AutoChoice("float32", "no native bfloat16, and no int8 path measured faster here")


def resolve_precision(
    precision: str, device: torch.device, training: bool = False, stacklevel: int = 3
) -> str:
    """The precision the products run in on `device`: "auto" chosen (`choose_auto`), "bfloat16"
    without native support -> "float32" (with a warning, `stacklevel` as `warnings.warn`'s, counted
    from here); ElmoConfigError for "int8" where no int8 kernel runs."""
    check_precision(precision)
    if precision == "auto":
        return choose_auto(device, training).precision
    if precision == "bfloat16" and not native_bfloat16(device):
        warnings.warn(
            f"precision 'bfloat16': this {device.type.upper()} has no native bfloat16 matrix "
            "products (emulated ones are slower than float32), so the biLM runs in float32"
            + ("; 'int8' or 'auto' is the faster choice here" if not training else ""),
            RuntimeWarning,
            stacklevel=stacklevel,
        )
        return "float32"
    if precision == "int8" and (device.type != "cpu" or int8_kernel() is None):
        where = (
            f"this CPU and torch (quantized engine {torch.backends.quantized.engine!r})"
            if device.type == "cpu"
            else f"device {device.type!r}"
        )
        raise ElmoConfigError(
            "precision 'int8' runs on x86 CPUs, on oneDNN's kernels (with VNNI) or fbgemm's "
            f"(torch's quantized engine 'x86' or 'fbgemm'), not on {where}; use 'auto', or "
            "'bfloat16' on a GPU"
        )
    return precision


def make_product(
    precision: str, weight: Tensor, bias: Optional[Tensor] = None, bound: float = float("inf")
) -> MatrixProduct:
    """The product `x W (+ b)` in `precision`; `bound`: the largest |x| the network allows (see
    `int8.int8_product`)."""
    if precision == "bfloat16":
        return BFloat16Product(weight, bias)
    if precision == "int8":
        return int8_product(weight, bias, bound)
    return MatrixProduct(weight, bias)


class LayerProducts(NamedTuple):
    """The three products of one LSTM layer and direction: input projection (with the bias), hidden,
    cell projection."""

    input: MatrixProduct
    hidden: MatrixProduct
    proj: MatrixProduct


class PrecisionCopies:
    """A network's weights as the inference path runs them in `precision` (resolved: "float32",
    "bfloat16" or "int8"): the LSTM's products and the token encoder's (under "bfloat16" a bfloat16
    copy of it). Made once per weights; `clear()` when they change. Not pickled: made again."""

    def __init__(self, network: "BiLM", source: str):
        # `source`: what an error about the weights names
        self.network, self.source = network, source
        self.precision = "float32"
        self._products: Optional[List[List[LayerProducts]]] = None
        self._encoder: Optional[Callable[[Tensor], Tensor]] = None

    def make(self, precision: str) -> None:
        """Run in `precision` (resolved, see `resolve_precision`), its copies made now: weights that
        overflow in it are refused here (NonFiniteError naming `source`), the precision before it
        kept."""
        previous, self.precision = self.precision, precision
        self.clear()
        try:
            if precision != "float32":
                self.lstm_products()
                self.token_encoder()
        except BaseException:
            self.precision = previous
            self.clear()
            raise

    def clear(self) -> None:
        self._products = self._encoder = None

    def check_float32(self) -> None:
        """ElmoConfigError where the network is not float32 (after `.double()`)."""
        if self.network.dtype != torch.float32:
            raise ElmoConfigError(
                f"precision {self.precision!r} runs a float32 network, not {self.network.dtype}: "
                "call .float() on it, or use precision 'float32' (which runs any dtype)"
            )

    def lstm_products(self) -> List[List[LayerProducts]]:
        """The LSTM's products in this precision (per layer, per direction)."""
        if self.precision == "float32":
            return self.network.lstm_products()
        self.check_float32()
        if self._products is None:
            with naming_weights(self.source):
                self._products = self.network.lstm_products(self.precision)
        return self._products

    def token_encoder(self) -> Callable[[Tensor], Tensor]:
        """The token encoder in this precision: under bfloat16 a bfloat16 copy; under int8 the
        network's, its highway and projection products in int8 (`TokenEncoder.int8_products`). On a
        GPU its convolutions run as matrix products over their windows: cuDNN would make a plan
        for every new input shape, and a stream of text meets new shapes at every batch."""
        on_gpu = self.network.device.type == "cuda"
        if self.precision == "float32":
            encoder = self.network.token_encoder
            return partial(encoder, convs_as_products=True) if on_gpu else encoder
        self.check_float32()
        if self._encoder is None:
            encoder = self.network.token_encoder
            with naming_weights(self.source):
                if self.precision == "int8":
                    self._encoder = partial(encoder, products=encoder.int8_products())
                else:
                    copied = copy.deepcopy(encoder).to(torch.bfloat16)
                    for name, values in copied.state_dict().items():
                        check_finite(values, self.source, f"'token_encoder.{name}' as bfloat16")
                    self._encoder = partial(copied, convs_as_products=on_gpu)
        return self._encoder

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_products": None, "_encoder": None}
