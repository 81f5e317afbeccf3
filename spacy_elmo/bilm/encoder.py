"""The context-independent token layer: character CNN + highway + projection."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .chars import PAD_CHAR
from .options import BiLMOptions

PAD_ID = PAD_CHAR + 1  # the shifted id of the padding character


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

    def forward(self, char_ids: Tensor) -> Tensor:
        """char_ids: `(..., max_chars)` int64 -> `(..., projection_dim)` float."""
        lead = char_ids.shape[:-1]
        ids = char_ids.reshape(-1, char_ids.shape[-1])
        x = torch.cat(self._filters(ids), dim=1)  # (N, F)
        for hw in self.highways:
            x = hw(x)
        x = torch.addmm(self.b_proj, x, self.w_proj)
        return x.reshape(*lead, -1)

    def _filters(self, ids: Tensor):
        """ids `(N, C)` -> one `(N, n_i)` tensor per filter: max over positions, then the activation.

        Positions after the longest word of the batch hold only PAD characters, and every window
        made of PAD alone has the same value. So each convolution runs over the used positions
        only, and that one all-PAD window joins the max (exactly the same set of windows).
        """
        C = ids.shape[1]
        used = int((ids != PAD_ID).sum(1).max()) if ids.numel() else C
        chars = self.char_embedding(ids[:, :used + self.max_width - 1]).transpose(1, 2)  # (N, E, C')
        pad = self.char_embedding.weight[PAD_ID].view(1, -1, 1)
        pooled = []
        for conv in self.convs:
            w = conv.kernel_size[0]
            if used + w <= C:  # every word has an all-PAD window
                windows = conv(chars[:, :, : used + w - 1]).amax(dim=2)
                pad_window = conv(pad.expand(1, -1, w)).view(1, -1)
                best = torch.maximum(windows, pad_window)
            else:
                best = conv(self.char_embedding(ids).transpose(1, 2)).amax(dim=2)
            pooled.append(self.activation(best))
        return pooled
