"""The projected LSTM stack of the biLM, both directions computed together.

The step, with TF's gate blocks (input i, new memory j, forget f, output o) and TF's forget
bias of 1.0 added at run time (not stored; `forget_bias`, 0 for weights that store it):

    [i, j, f, o] = x W_input + h_prev W_hidden + bias
    c = clip(sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j), cell_clip)
    h = clip((sigmoid(o) * tanh(c)) W_proj, proj_clip)

Inside this module the gate blocks are kept in the order (i, f, o, j), so that one sigmoid
covers a contiguous block; `gates_to_internal` maps the stored order to it (the hdf5 and EFML
readers apply it). Direction 0 reads left to right; direction 1 reads each sequence from its last
real position back to its first, and its outputs are aligned back to token positions.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .precision import LayerProducts, make_product
from .products import MatrixProduct
from .schedule import PrefixTree, chunk_rows, gather_rows, reverse_index, word_gate_rows
from .threads import both_directions

# Gate block order: position k of the internal layout holds TF block TF_TO_INTERNAL[k].
TF_TO_INTERNAL = (0, 2, 3, 1)  # (i, f, o, j) from (i, j, f, o)
MINUS_ONE = torch.tensor(-1.0)  # a 0-dim CPU tensor: a scalar to any tensor it meets


def gates_to_internal(w: Tensor, dim: int) -> Tensor:
    """`(..., 4*dim)` in TF gate order -> internal order."""
    blocks = w.split(dim, dim=-1)
    return torch.cat([blocks[k] for k in TF_TO_INTERNAL], dim=-1)


def gates_to_tf(w: Tensor, dim: int) -> Tensor:
    """Inverse of `gates_to_internal`."""
    blocks = w.split(dim, dim=-1)
    inverse = [TF_TO_INTERNAL.index(k) for k in range(4)]
    return torch.cat([blocks[k] for k in inverse], dim=-1)


def project_rows(product: MatrixProduct, x: Tensor, start: int, rows: int) -> Tensor:
    """Gate inputs of packed positions `start:start+rows` of x `(N, I)` -> `(rows, 4D)`."""
    return product(x[start : start + rows])


def tanh(x: Tensor, in_place: bool = False) -> Tensor:
    """tanh of x (any shape), on a CPU as `2 sigmoid(2x) - 1`: torch's CPU sigmoid is faster than
    its tanh, and the result is within 2.4e-7 of it, inside [-1, 1]. `in_place`: x is overwritten
    (no autograd through it). Every form gives the same bits."""
    if x.device.type != "cpu":
        return x.tanh_() if in_place else torch.tanh(x)
    if x.requires_grad and torch.is_grad_enabled() and not in_place:
        return torch.sigmoid(x * 2) * 2 - 1
    return tanh_from_sigmoid((x.mul_(2) if in_place else torch.mul(x, 2)).sigmoid_())


def tanh_from_sigmoid(s: Tensor) -> Tensor:
    """`2 s - 1` in place, in one pass over s (any shape); for s = sigmoid(2x), tanh(x). Doubling
    is exact, so this rounds once, as `s * 2 - 1` does: the same bits."""
    return torch.add(MINUS_ONE, s, alpha=2, out=s)


class LSTMState(NamedTuple):
    """Per layer and direction: `h` `(n_layers, 2, B, projection_dim)`, `c` `(n_layers, 2, B,
    lstm_dim)`."""

    h: Tensor
    c: Tensor


def gather_time(x: Tensor, index: Tensor) -> Tensor:
    """x `(D, B, T, H)` gathered along T with `(B, T)` index."""
    return x.gather(2, index.view(1, *index.shape, 1).expand(x.shape[0], -1, -1, x.shape[-1]))


class ProjectedLSTMLayer(nn.Module):
    """One layer, both directions: weights carry a leading direction axis of size 2, gates in (i, f,
    o, j)."""

    def __init__(
        self,
        input_dim: int,
        dim: int,
        projection_dim: int,
        cell_clip: float,
        proj_clip: float,
        forget_bias: float = 1.0,
    ):
        super().__init__()
        self.dim, self.projection_dim = dim, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.w_input = nn.Parameter(torch.empty(2, input_dim, 4 * dim))
        self.w_hidden = nn.Parameter(torch.empty(2, projection_dim, 4 * dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * dim))
        self.w_proj = nn.Parameter(torch.empty(2, dim, projection_dim))
        forget = torch.zeros(4 * dim)
        forget[dim : 2 * dim] = forget_bias
        self.register_buffer("forget_bias", forget, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.w_input, self.w_hidden, self.w_proj):
            bound = (6.0 / (w.shape[1] + w.shape[2])) ** 0.5
            nn.init.uniform_(w, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(
        self, x: Tensor, h0: Tensor, c0: Tensor, final_index: Optional[Tensor] = None
    ) -> Tuple[Tensor, Optional[Tuple[Tensor, Tensor]]]:
        """x `(2, B, T, input_dim)` (direction 1 already reversed per row); h0 `(2, B, P)`; c0 `(2,
        B, D)`.

        Returns h `(2, B, T, P)` and, when `final_index` `(B,)` is given, the state `(h, c)` at that
        time step of each row, each `(2, B, ·)`.
        """
        _, B, T, _ = x.shape
        bias = (self.bias + self.forget_bias).unsqueeze(1)  # (2, 1, 4D)
        # time-major gate inputs: xw[:, t] is one contiguous (B, 4D) block per direction
        xw = torch.baddbmm(bias, x.transpose(1, 2).reshape(2, T * B, -1), self.w_input).view(
            2, T, B, 4 * self.dim
        )
        out, cs = self._steps(xw, h0, c0, final_index is not None)
        if final_index is None:
            return out.transpose(1, 2), None
        rows = torch.arange(B, device=x.device)
        return out.transpose(1, 2), (out[:, final_index, rows], cs[:, final_index, rows])

    def _steps(self, xw: Tensor, h: Tensor, c: Tensor, keep_c: bool):
        """xw `(2, T, B, 4D)` -> h `(2, T, B, P)` (and c `(2, T, B, D)`), overwriting nothing that
        autograd saves, so that it can record it. Steps are taken with `unbind` and gates with
        `chunk`, whose backward writes each gradient once (indexing `xw[:, t]` would zero-fill a
        full gradient per step, O(T^2))."""
        project = partial(torch.bmm, mat2=self.w_proj)
        hs: List[Tensor] = []
        cs: List[Tensor] = []
        for xw_t in xw.unbind(1):
            # bfloat16 under autocast: the gates and c stay float32
            gates = torch.baddbmm(xw_t, h, self.w_hidden)
            gates = gates.to(torch.promote_types(gates.dtype, torch.float32))
            h, c = self.cell(gates, c, project, in_place=False)
            hs.append(h)
            if keep_c:
                cs.append(c)
        return torch.stack(hs, dim=1), (torch.stack(cs, dim=1) if keep_c else None)

    def cell(
        self, gates: Tensor, c_prev: Tensor, project: Callable[[Tensor], Tensor], in_place: bool
    ) -> Tuple[Tensor, Tensor]:
        """The step after the hidden product: gate pre-activations `gates` `(..., 4D)` in (i, f, o,
        j), c_prev `(..., D)` -> h `(..., P)` and c `(..., D)`, each clipped. `project` maps
        `sigmoid(o) * tanh(c)` `(..., D)` to a new `(..., P)` (or writes it into one). `in_place`:
        the activations overwrite `gates` (the packed path's scratch); else nothing that autograd
        saves is overwritten."""
        D = self.dim
        if in_place and gates.device.type == "cpu":
            gates[..., 3 * D :].mul_(2)  # one sigmoid for all four blocks, j's giving its tanh
            i, f, o, j = gates.sigmoid_().chunk(4, dim=-1)
            j = tanh_from_sigmoid(j)
        elif in_place:
            gates[..., : 3 * D].sigmoid_()
            i, f, o, j = gates.chunk(4, dim=-1)
            j = j.tanh_()
        else:
            i, f, o, j = gates.chunk(4, dim=-1)
            i, f, o, j = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), tanh(j)
        c = torch.mul(f, c_prev).addcmul_(i, j).clamp_(-self.cell_clip, self.cell_clip)
        m = tanh(c).mul_(o) if in_place else o * tanh(c)
        return project(m).clamp_(-self.proj_clip, self.proj_clip), c

    def products(
        self, direction: int, precision: str = "float32", input_bound: float = float("inf")
    ) -> LayerProducts:
        """The matrix products of one direction for the packed path, in `precision` (float32: views
        of the weights; the others: copies in their precision, stale once the weights change).
        `input_bound`: the largest |input| this layer can see. The hidden product's input is clipped
        at `proj_clip`; the cell projection's is `sigmoid(o) * tanh(c)`, within 1."""
        return LayerProducts(
            make_product(
                precision,
                self.w_input[direction],
                self.bias[direction] + self.forget_bias,
                input_bound,
            ),
            make_product(precision, self.w_hidden[direction], bound=self.proj_clip),
            make_product(precision, self.w_proj[direction], bound=1.0),
        )

    def forward_packed(
        self,
        products: LayerProducts,
        gate_inputs: Callable[[int, int], Tensor],
        batch_sizes: Sequence[int],
        parents: Sequence[Optional[Tensor]],
        h0: Tensor,
        c0: Tensor,
        out: Tensor,
    ) -> Tuple[Tensor, Tensor]:
        """Inference for one direction (its `products`) on packed positions, time-major: step t
        holds `batch_sizes[t]` positions, each continuing position `parents[t][k]` of step t - 1
        (None: position k; at step 0, every position starts from h0 `(B, P)`, c0 `(B, D)`, whose
        rows are all the same). `gate_inputs(start, rows)` gives the input projection `(rows, 4D)`
        of packed positions `start:start+rows` (it may reuse the previous chunk's memory: a chunk
        is done with before the next is asked for). Writes h `(N, P)` in the same packed layout into
        `out`; returns it and c `(batch_sizes[-1], D)`, the cell state of the last step's positions.

        No step computes a padded position, and each step's matrix products cover every position
        of that step, which keeps them large. Gates are computed in place; gate inputs are asked for
        in chunks of at most `PACKED_CHUNK_BYTES` (at least one step), which bounds memory.
        """
        h, c = h0, c0
        most = chunk_rows(4 * self.dim)
        start = t = 0
        while t < len(batch_sizes):
            stop, rows = t, 0
            while stop < len(batch_sizes) and (rows == 0 or rows + batch_sizes[stop] <= most):
                rows += batch_sizes[stop]
                stop += 1
            xw = gate_inputs(start, rows)  # (rows, 4D)
            local = 0
            for n, parent in zip(batch_sizes[t:stop], parents[t:stop]):
                if parent is None:
                    h_prev, c_prev = h[:n], c[:n]
                else:
                    h_prev, c_prev = h.index_select(0, parent), c.index_select(0, parent)
                g = products.hidden.gates(xw[local : local + n], h_prev)
                into = partial(products.proj.into, out[start + local : start + local + n])
                h, c = self.cell(g, c_prev, into, in_place=True)
                local += n
            start += rows
            t = stop
        return out, c


class BiLSTMStack(nn.Module):
    """`n_layers` projected LSTM layers per direction; layers after the first add their input
    (skip)."""

    def __init__(
        self,
        projection_dim: int,
        dim: int,
        n_layers: int,
        cell_clip: float,
        proj_clip: float,
        use_skip_connections: bool,
        forget_bias: float = 1.0,
    ):
        super().__init__()
        self.projection_dim, self.dim = projection_dim, dim
        self.use_skip_connections = use_skip_connections
        self.layers = nn.ModuleList(
            ProjectedLSTMLayer(
                projection_dim, dim, projection_dim, cell_clip, proj_clip, forget_bias
            )
            for _ in range(n_layers)
        )

    def zero_state(self, batch: int, device=None, dtype=None) -> LSTMState:
        n = len(self.layers)
        return LSTMState(
            torch.zeros(n, 2, batch, self.projection_dim, device=device, dtype=dtype),
            torch.zeros(n, 2, batch, self.dim, device=device, dtype=dtype),
        )

    def run_directions(
        self,
        inp: Tensor,
        initial_state: LSTMState,
        final_index: Optional[Tensor] = None,
        dropout: float = 0.0,
    ) -> Tuple[List[Tensor], Optional[LSTMState]]:
        """inp `(2, B, T, P)`, each direction in its own reading order -> per layer `(2, B, T, P)`
        outputs in reading order (skip connections applied) and, with `final_index` `(B,)`, the
        `LSTMState` at that step of each row. `dropout`: the rate applied to each layer's input in
        training mode (the LM objective's setting; inference passes none)."""
        outputs, hs, cs = [], [], []
        for l, layer in enumerate(self.layers):
            if self.training and dropout > 0:
                inp = F.dropout(inp, dropout, training=True)
            out, last = layer(inp, initial_state.h[l], initial_state.c[l], final_index)
            if self.use_skip_connections and l > 0:
                out = out + inp
            outputs.append(out)
            if last is not None:
                hs.append(last[0])
                cs.append(last[1])
            inp = out
        final = LSTMState(torch.stack(hs), torch.stack(cs)) if final_index is not None else None
        return outputs, final

    def products(self, precision: str = "float32") -> List[List[LayerProducts]]:
        """Per layer, per direction, the matrix products of the packed path in `precision`. Layer l
        > 0 reads layer l - 1's output: within `proj_clip`, or `l * proj_clip` with skip connections
        (sums of l outputs); the first layer reads the token layer, which nothing bounds."""
        clip = self.layers[0].proj_clip
        bounds = [float("inf")] + [
            clip * (l if self.use_skip_connections else 1) for l in range(1, len(self.layers))
        ]
        return [
            [layer.products(d, precision, bound) for d in (0, 1)]
            for layer, bound in zip(self.layers, bounds)
        ]

    def run_packed(
        self,
        words: Tensor,
        trees: Sequence[PrefixTree],
        initial_state: LSTMState,
        directions: Sequence[int],
        products: List[List[LayerProducts]],
    ) -> Tuple[List[List[Tensor]], LSTMState]:
        """Inference on the prefix trees of a batch, one per direction in its reading order (see
        `schedule.prefix_tree` and `ProjectedLSTMLayer.forward_packed`), the two directions side by
        side (`both_directions`); `directions=(1,)`: the backward one only.

        words `(U, P)`: the token layer of each distinct word, which `trees[d].words` index. The
        first layer's input projection is computed once per distinct word and gathered. Returns per
        layer, per direction, `(N_d, P)` at the nodes of `trees[d]` (skip connections applied), and
        the state at each direction's last depth, `(n_layers, 2, n, ·)` (n: that depth's nodes; a
        chain, one row, continues from it).
        """
        outputs = [
            [words.new_empty(len(tree.words), self.projection_dim) for tree in trees]
            for _ in self.layers
        ]
        last = [trees[d].batch_sizes[-1] for d in (0, 1)]
        final = LSTMState(
            initial_state.h.new_zeros(len(self.layers), 2, max(last), self.projection_dim),
            initial_state.c.new_zeros(len(self.layers), 2, max(last), self.dim),
        )

        def run(d: int) -> None:
            tree = trees[d]
            step = word_gate_rows(4 * self.dim, len(words), words.device)  # (U, 4D) in pieces
            word_gates = [
                products[0][d].input(words[a : a + step]) for a in range(0, len(words), step)
            ]
            most = max(chunk_rows(4 * self.dim), max(tree.batch_sizes))
            scratch = word_gates[0].new_empty(most, 4 * self.dim)

            def gates(start: int, rows: int) -> Tensor:
                """`(rows, 4D)`: the gate inputs of each node's word."""
                return gather_rows(word_gates, tree.words[start : start + rows], scratch[:rows])

            for l, layer in enumerate(self.layers):
                out, c = layer.forward_packed(
                    products[l][d],
                    gates,
                    tree.batch_sizes,
                    tree.parents,
                    initial_state.h[l, d],
                    initial_state.c[l, d],
                    outputs[l][d],
                )
                final.h[l, d, : last[d]] = out[len(out) - last[d] :]  # before the skip connection
                final.c[l, d, : last[d]] = c
                if self.use_skip_connections and l > 0:
                    out += outputs[l - 1][d]
                if l + 1 < len(self.layers):
                    gates = partial(project_rows, products[l + 1][d].input, out)

        if tuple(directions) == (0, 1):
            both_directions(run)
        else:
            for d in directions:
                run(d)
        return outputs, final

    def forward(
        self,
        x: Tensor,
        lengths: Tensor,
        initial_state: Optional[LSTMState] = None,
        return_state: bool = False,
    ):
        """x `(B, T, P)` token layer (padding after each row's length, `lengths` `(B,)`).

        Returns a list of `n_layers` tensors `(B, T, 2P)` (forward; backward), aligned to token
        positions, and the final `LSTMState` (at each row's last real position) when asked.
        """
        B, T, _ = x.shape
        rev = reverse_index(lengths, T)
        # (2, B, T, P)
        inp = torch.stack([x, x.gather(1, rev.unsqueeze(-1).expand(-1, -1, x.shape[-1]))])
        if initial_state is None:
            initial_state = self.zero_state(B, x.device, x.dtype)
        final_index = (lengths - 1).clamp(min=0) if return_state else None
        outputs, final = self.run_directions(inp, initial_state, final_index)
        aligned = [torch.cat([o[0], gather_time(o[1:], rev)[0]], dim=-1) for o in outputs]
        return aligned, final
