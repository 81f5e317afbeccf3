"""The context-independent token layer: character CNN + highway (+ a word embedding) +
projection."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Union

import torch
from torch import Tensor, nn

from ..errors import ElmoConfigError
from .chars import ByteIds, CharTable
from .int8 import BalancedInt8Product, Int8Product, RowScaledInt8Product
from .options import BiLMOptions
from .products import MatrixProduct

CONV_WORDS = 128


class Highway(nn.Module):
    """bilm-tf highway: `t = sigmoid(x W_carry + b_carry)`, `y = t * relu(x W_transform +
    b_transform) + (1 - t) * x`.

    Weights are kept in the TF layout `(in, out)`, so loading and export are plain copies.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.w_transform = nn.Parameter(torch.empty(dim, dim))
        self.b_transform = nn.Parameter(torch.zeros(dim))
        self.w_carry = nn.Parameter(torch.empty(dim, dim))
        self.b_carry = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor, product: Optional[MatrixProduct] = None) -> Tensor:
        """x: `(N, F)` -> `(N, F)`. `product`: `x [W_carry W_transform] + [b_carry b_transform]`
        `(N, 2F)` in another precision (`int8_product`); None: float32."""
        if product is None:
            carry = torch.addmm(self.b_carry, x, self.w_carry)
            transform = torch.addmm(self.b_transform, x, self.w_transform)
        else:
            carry, transform = product(x).chunk(2, dim=1)
        return torch.lerp(x, torch.relu(transform), torch.sigmoid(carry))

    def int8_product(self) -> MatrixProduct:
        """Both products of the layer as one int8 product, inputs scaled per row."""
        return RowScaledInt8Product(
            torch.cat([self.w_carry, self.w_transform], dim=1),
            torch.cat([self.b_carry, self.b_transform]),
        )


class EncoderProducts(NamedTuple):
    """The token encoder's products in another precision: each filter's, over its windows of
    characters `(char_dim * width, n)`; each highway layer's `(F, 2F)`; the projection."""

    convs: List[MatrixProduct]
    highways: List[MatrixProduct]
    proj: MatrixProduct


class TokenEncoder(nn.Module):
    """Token ids `(N, token_ids.width)` -> token layer `(N, projection_dim)`.

    One convolution per filter width (no padding) over the characters, max over positions, then the
    activation; highway layers; where the options have a word embedding (ELMoForManyLangs), the word
    vector of the id in the last column concatenated before those features; a linear projection.
    `token_ids` turns texts into ids: bilm-tf's utf-8 bytes (of each token lowercased where the
    options say `lowercase`), or the model's `CharTable`.
    """

    def __init__(self, options: BiLMOptions, char_table: Optional[CharTable] = None):
        super().__init__()
        if options.char_table != (char_table is not None):
            raise ElmoConfigError(
                "a biLM whose options say char_table needs its CharTable, and only such a biLM "
                "takes one (load the model with load_bilm)"
            )
        self.max_chars = options.max_characters_per_token
        self.token_ids: Union[ByteIds, CharTable] = char_table or ByteIds(
            self.max_chars, options.lowercase
        )
        self.pad_id = self.token_ids.pad_id
        # bilm-tf: 262 rows whatever `n_characters` says: ids run to 261 and row 0 is the padding
        # id.
        rows = options.n_characters if options.char_table else 262
        self.char_embedding = nn.Embedding(rows, options.char_dim, padding_idx=0)
        self.word_embedding = (
            nn.Embedding(options.n_words, options.word_dim, padding_idx=0)
            if options.word_dim
            else None
        )
        self.convs = nn.ModuleList(nn.Conv1d(options.char_dim, n, w) for w, n in options.filters)
        self.highways = nn.ModuleList(Highway(options.n_filters) for _ in range(options.n_highway))
        self.w_proj = nn.Parameter(
            torch.empty(options.word_dim + options.n_filters, options.projection_dim)
        )
        self.b_proj = nn.Parameter(torch.zeros(options.projection_dim))
        self.activation = torch.relu if options.activation == "relu" else torch.tanh
        self.max_width = max(w for w, _ in options.filters)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.char_embedding.weight, -1.0, 1.0)
        with torch.no_grad():
            self.char_embedding.weight[0].zero_()
        for conv in self.convs:
            conv.reset_parameters()
        for hw in self.highways:
            nn.init.xavier_uniform_(hw.w_transform)
            nn.init.xavier_uniform_(hw.w_carry)
            nn.init.zeros_(hw.b_transform)
            nn.init.constant_(hw.b_carry, -2.0)  # start close to the identity, as bilm-tf does
        nn.init.xavier_uniform_(self.w_proj)
        nn.init.zeros_(self.b_proj)
        if self.word_embedding is not None:
            nn.init.uniform_(self.word_embedding.weight, -0.25, 0.25)
            with torch.no_grad():
                self.word_embedding.weight[0].zero_()

    def forward(
        self,
        char_ids: Tensor,
        products: Optional[EncoderProducts] = None,
        convs_as_products: bool = False,
    ) -> Tensor:
        """char_ids: `(..., token_ids.width)` int64 -> `(..., projection_dim)` float. `products`:
        the highway and projection products in another precision (`int8_products`); None: in the
        weights' dtype. `convs_as_products`: each convolution as one matrix product over its
        windows (inference on a GPU, where cuDNN would make a plan for every new input shape)."""
        lead = char_ids.shape[:-1]
        ids = char_ids.reshape(-1, char_ids.shape[-1])
        chars = ids if self.word_embedding is None else ids[:, :-1]
        x = self._features(chars, None if products is None else products.convs, convs_as_products)
        for k, hw in enumerate(self.highways):
            x = hw(x, None if products is None else products.highways[k])
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(ids[:, -1]), x], dim=1)  # (N, word_dim + F)
        x = torch.addmm(self.b_proj, x, self.w_proj) if products is None else products.proj(x)
        return x.reshape(*lead, -1)

    def int8_products(self) -> EncoderProducts:
        """The products under int8: each filter's over its windows of characters, each word's
        windows scaled by the word's largest |character embedding| onto the fixed grid of [-1, 1];
        the highways' with inputs scaled per row (nothing bounds them); the projection's balanced
        against its weights and on a finer grid (`BalancedInt8Product`): trained models keep a few
        highway features far larger than the rest, and a row scaled onto the 7-bit grid by such a
        feature loses the others."""
        return EncoderProducts(
            [Int8Product(conv.weight.flatten(1).t(), bound=1.0) for conv in self.convs],
            [hw.int8_product() for hw in self.highways],
            BalancedInt8Product(self.w_proj, self.b_proj),
        )

    def _features(
        self, ids: Tensor, products: Optional[List[MatrixProduct]], as_products: bool
    ) -> Tensor:
        """ids `(N, C)` -> the filters' features `(N, F)`. In inference on a CPU in runs of
        `CONV_WORDS` words, so that each filter's values over the windows (`(words, n, windows)`, or
        `(words * windows, n)` as products) stay in the CPU's cache until their max; each run
        convolves up to its own longest word (a word's features depend on that word alone). As
        products (a GPU), or in training (autograd keeps those values for the backward): at once."""
        training = torch.is_grad_enabled() and self.char_embedding.weight.requires_grad
        if as_products or training:
            return torch.cat(self._filters(ids, products, as_products), dim=1)
        return torch.cat(
            [
                torch.cat(self._filters(ids[start : start + CONV_WORDS], products), dim=1)
                for start in range(0, len(ids), CONV_WORDS)
            ]
        )

    @staticmethod
    def _windows_max(
        chars: Tensor,
        conv: nn.Conv1d,
        product: Optional[MatrixProduct],
        scale: Optional[Tensor],
        as_product: bool = False,
    ) -> Tensor:
        """chars `(N, E, L)` -> the filter's largest value over the `L - w + 1` windows `(N, n)`:
        the convolution, or a matrix product over the windows laid out as rows `(N * windows,
        E * w)`: the filter's weights (`as_product`), or `product` over chars already divided by
        each word's `scale` `(N, 1)`, the result scaled back (a word's vectors depend on that word
        alone).
        The bias is added after the max (the same value: rounding keeps the order)."""
        if product is None and not as_product:
            return conv(chars).amax(dim=2)
        windows = chars.unfold(2, conv.kernel_size[0], 1).transpose(1, 2)  # (N, L', E, w)
        N, n_windows = windows.shape[:2]
        if product is None:
            rows = windows.reshape(N * n_windows, -1)
            best = torch.mm(rows, conv.weight.flatten(1).t()).view(N, n_windows, -1).amax(dim=1)
            return best + conv.bias
        best = product(windows.reshape(N * n_windows, -1)).view(N, n_windows, -1).amax(dim=1)
        return torch.addcmul(conv.bias, best, scale)

    def _filters(
        self,
        ids: Tensor,
        products: Optional[List[MatrixProduct]] = None,
        as_products: bool = False,
    ):
        """ids `(N, C)` -> one `(N, n_i)` tensor per filter: max over positions, then the
        activation. `products`: each filter's in another precision (`int8_products`);
        `as_products`: the convolutions as matrix products over their windows.

        Positions after the last one that holds anything but PAD in the batch hold only PAD, and
        every window made of PAD alone has the same value. So each convolution runs over the used
        positions only, and that one all-PAD window joins the max (exactly the same set of windows).
        """
        C = ids.shape[1]
        real = (ids != self.pad_id).any(0).nonzero()
        used = int(real[-1]) + 1 if len(real) else 1
        # (N, E, C'), all C positions where some filter has no all-PAD window
        chars = self.char_embedding(ids[:, : used + self.max_width - 1]).transpose(1, 2)
        pad = self.char_embedding.weight[self.pad_id].view(1, -1, 1)
        # int8: each word's grid, from its largest |embedding| over all its positions (PAD too)
        scale = (
            None
            if products is None
            else self.char_embedding.weight.abs()
            .amax(dim=1)[ids]
            .amax(dim=1, keepdim=True)
            .clamp(min=torch.finfo(torch.float32).tiny)
        )  # (N, 1)
        if scale is not None:  # each word on its grid
            chars, pad = chars / scale.unsqueeze(2), pad / scale.unsqueeze(2)
        pooled = []
        for k, conv in enumerate(self.convs):
            w, product = conv.kernel_size[0], None if products is None else products[k]
            if used + w <= C:  # every word has an all-PAD window
                used_chars = chars[:, :, : used + w - 1]
                windows = self._windows_max(used_chars, conv, product, scale, as_products)
                pads = pad.expand(len(pad), -1, w)
                pad_max = self._windows_max(pads, conv, product, scale, as_products)
                best = torch.maximum(windows, pad_max)
            else:
                best = self._windows_max(chars, conv, product, scale, as_products)
            pooled.append(self.activation(best))
        return pooled
