"""The context-independent token layer: character CNN + highway + projection."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .options import BiLMOptions


class Highway(nn.Module):
    """bilm-tf highway: `t = sigmoid(x W_carry + b_carry)`, `y = t * relu(x W_transform + b_transform) + (1 - t) * x`.

    Weights are kept in the TF layout `(in, out)`, so loading and export are plain copies.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.w_transform = nn.Parameter(torch.empty(dim, dim))
        self.b_transform = nn.Parameter(torch.zeros(dim))
        self.w_carry = nn.Parameter(torch.empty(dim, dim))
        self.b_carry = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        """x: `(N, F)` -> `(N, F)`."""
        t = torch.sigmoid(torch.addmm(self.b_carry, x, self.w_carry))
        h = torch.relu(torch.addmm(self.b_transform, x, self.w_transform))
        return torch.lerp(x, h, t)


class TokenEncoder(nn.Module):
    """Character ids `(N, max_chars)` -> token layer `(N, projection_dim)`.

    One convolution per filter width (no padding), max over positions, then the activation;
    highway layers; a linear projection.
    """

    def __init__(self, options: BiLMOptions):
        super().__init__()
        self.max_chars = options.max_characters_per_token
        # 262 rows whatever `n_characters` says: ids run to 261 and row 0 is the padding id.
        self.char_embedding = nn.Embedding(262, options.char_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(options.char_dim, n, w) for w, n in options.filters)
        self.highways = nn.ModuleList(Highway(options.n_filters) for _ in range(options.n_highway))
        self.w_proj = nn.Parameter(torch.empty(options.n_filters, options.projection_dim))
        self.b_proj = nn.Parameter(torch.zeros(options.projection_dim))
        self.activation = torch.relu if options.activation == "relu" else torch.tanh
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

    def forward(self, char_ids: Tensor) -> Tensor:
        """char_ids: `(..., max_chars)` int64 -> `(..., projection_dim)` float."""
        lead = char_ids.shape[:-1]
        chars = self.char_embedding(char_ids.reshape(-1, char_ids.shape[-1])).transpose(1, 2)  # (N, E, C)
        pooled = [self.activation(conv(chars).amax(dim=2)) for conv in self.convs]
        x = torch.cat(pooled, dim=1)  # (N, F)
        for hw in self.highways:
            x = hw(x)
        x = torch.addmm(self.b_proj, x, self.w_proj)
        return x.reshape(*lead, -1)
