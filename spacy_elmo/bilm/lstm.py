"""The projected LSTM stack of the biLM, both directions computed together.

Gate blocks follow the TF order (input i, new memory j, forget f, output o), and TF's
forget bias of 1.0 is added at run time, not stored:

    [i, j, f, o] = x W_input + h_prev W_hidden + bias
    c = clip(sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j), cell_clip)
    h = clip((sigmoid(o) * tanh(c)) W_proj, proj_clip)

Direction 0 reads left to right; direction 1 reads each sequence from its last real
position back to its first, and its outputs are aligned back to token positions.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class LSTMState(NamedTuple):
    """Per layer and direction: `h` `(n_layers, 2, B, projection_dim)`, `c` `(n_layers, 2, B, lstm_dim)`."""

    h: Tensor
    c: Tensor


def reverse_index(lengths: Tensor, max_len: int) -> Tensor:
    """`(B,)` lengths -> `(B, T)` index that reverses each row within its length (padding stays put)."""
    t = torch.arange(max_len, device=lengths.device).unsqueeze(0)
    rev = lengths.unsqueeze(1) - 1 - t
    return torch.where(rev >= 0, rev, t)


def gather_time(x: Tensor, index: Tensor) -> Tensor:
    """x `(D, B, T, H)` gathered along T with `(B, T)` index."""
    return x.gather(2, index.view(1, *index.shape, 1).expand(x.shape[0], -1, -1, x.shape[-1]))


class ProjectedLSTMLayer(nn.Module):
    """One layer, both directions: weights carry a leading direction axis of size 2."""

    def __init__(self, input_dim: int, dim: int, projection_dim: int, cell_clip: float, proj_clip: float):
        super().__init__()
        self.dim, self.projection_dim = dim, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.w_input = nn.Parameter(torch.empty(2, input_dim, 4 * dim))
        self.w_hidden = nn.Parameter(torch.empty(2, projection_dim, 4 * dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * dim))
        self.w_proj = nn.Parameter(torch.empty(2, dim, projection_dim))
        forget = torch.zeros(4 * dim)
        forget[2 * dim : 3 * dim] = 1.0
        self.register_buffer("forget_bias", forget, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.w_input, self.w_hidden, self.w_proj):
            bound = (6.0 / (w.shape[1] + w.shape[2])) ** 0.5
            nn.init.uniform_(w, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, h0: Tensor, c0: Tensor, final_index: Optional[Tensor] = None):
        """x `(2, B, T, input_dim)` (direction 1 already reversed per row); h0 `(2, B, P)`; c0 `(2, B, D)`.

        Returns h `(2, B, T, P)` and, when `final_index` `(B,)` is given, the state `(h, c)`
        at that time step of each row, each `(2, B, ·)`.
        """
        _, B, T, _ = x.shape
        D = self.dim
        bias = (self.bias + self.forget_bias).unsqueeze(1)  # (2, 1, 4D)
        # time-major gate inputs: xw[:, t] is one contiguous (B, 4D) block per direction
        xw = torch.baddbmm(bias, x.transpose(1, 2).reshape(2, T * B, -1), self.w_input).view(2, T, B, 4 * D)
        inplace = not torch.is_grad_enabled()
        h, c = h0, c0
        hs: List[Tensor] = []
        cs: List[Tensor] = []
        for t in range(T):
            if inplace:  # accumulate the recurrent term into xw itself: no allocation, no copy
                g = xw[:, t].baddbmm_(h, self.w_hidden)
            else:
                g = torch.baddbmm(xw[:, t], h, self.w_hidden)
            s = torch.sigmoid(g)
            j = torch.tanh(g[..., D : 2 * D])
            c = torch.addcmul(s[..., 2 * D : 3 * D] * c, s[..., :D], j)
            c = c.clamp_(-self.cell_clip, self.cell_clip) if inplace else c.clamp(-self.cell_clip, self.cell_clip)
            h = torch.bmm(s[..., 3 * D :] * torch.tanh(c), self.w_proj)
            h = h.clamp_(-self.proj_clip, self.proj_clip) if inplace else h.clamp(-self.proj_clip, self.proj_clip)
            hs.append(h)
            if final_index is not None:
                cs.append(c)
        out = torch.stack(hs, dim=2)
        if final_index is None:
            return out, None
        rows = torch.arange(B, device=x.device)
        h_last = out[:, rows, final_index]
        c_last = torch.stack(cs, dim=2)[:, rows, final_index]
        return out, (h_last, c_last)


class BiLSTMStack(nn.Module):
    """`n_layers` projected LSTM layers per direction; layers after the first add their input (skip)."""

    def __init__(self, projection_dim: int, dim: int, n_layers: int, cell_clip: float, proj_clip: float,
                 use_skip_connections: bool):
        super().__init__()
        self.projection_dim, self.dim = projection_dim, dim
        self.use_skip_connections = use_skip_connections
        self.dropout = 0.0
        self.layers = nn.ModuleList(
            ProjectedLSTMLayer(projection_dim, dim, projection_dim, cell_clip, proj_clip) for _ in range(n_layers)
        )

    def zero_state(self, batch: int, device=None, dtype=None) -> LSTMState:
        n = len(self.layers)
        return LSTMState(torch.zeros(n, 2, batch, self.projection_dim, device=device, dtype=dtype),
                         torch.zeros(n, 2, batch, self.dim, device=device, dtype=dtype))

    def forward(self, x: Tensor, lengths: Tensor, initial_state: Optional[LSTMState] = None,
                return_state: bool = False):
        """x `(B, T, P)` token layer (boundaries included, padding after `lengths`).

        Returns a list of `n_layers` tensors `(B, T, 2P)` (forward; backward), aligned to token
        positions, and the final `LSTMState` (at each row's last real position) when asked.
        """
        B, T, _ = x.shape
        rev = reverse_index(lengths, T)
        inp = torch.stack([x, x.gather(1, rev.unsqueeze(-1).expand(-1, -1, x.shape[-1]))])  # (2, B, T, P)
        if initial_state is None:
            initial_state = self.zero_state(B, x.device, x.dtype)
        final_index = (lengths - 1).clamp(min=0) if return_state else None
        outputs, hs, cs = [], [], []
        for l, layer in enumerate(self.layers):
            if self.training and self.dropout > 0:
                inp = F.dropout(inp, self.dropout, training=True)
            out, state = layer(inp, initial_state.h[l], initial_state.c[l], final_index)
            if self.use_skip_connections and l > 0:
                out = out + inp
            outputs.append(out)
            if state is not None:
                hs.append(state[0])
                cs.append(state[1])
            inp = out
        aligned = [torch.cat([o[0], gather_time(o[1:], rev)[0]], dim=-1) for o in outputs]
        final = LSTMState(torch.stack(hs), torch.stack(cs)) if return_state else None
        return aligned, final
