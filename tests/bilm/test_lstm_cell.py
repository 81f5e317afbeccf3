"""The element-wise part of an LSTM step: the packed path's in-place form and the training path's
give the same bits, within float32 rounding of the plain formulas."""

from __future__ import annotations

import pytest
import torch

from spacy_elmo.bilm.lstm import ProjectedLSTMLayer


def tanh(x):
    return torch.sigmoid(x * 2) * 2 - 1


def plain_step(layer, gates, c_prev):
    """The step as the module docstring writes it, gates in (i, f, o, j), each tanh as a sigmoid."""
    i, f, o, j = gates.split(layer.dim, dim=-1)
    c = (torch.sigmoid(f) * c_prev + torch.sigmoid(i) * tanh(j)).clamp(
        -layer.cell_clip, layer.cell_clip
    )
    m = torch.sigmoid(o) * tanh(c)
    return (m @ layer.w_proj[0]).clamp(-layer.proj_clip, layer.proj_clip), c


@pytest.mark.parametrize("dim", [1024, 4096])
def test_the_packed_and_training_steps_give_the_same_bits(dim):
    """The LSTM sizes of the small and original models. Gates and cells large enough to saturate
    the sigmoids and reach both clips."""
    torch.manual_seed(0)
    layer = ProjectedLSTMLayer(8, dim, 16, cell_clip=3.0, proj_clip=0.5)
    gates, c_prev = torch.randn(7, 4 * dim) * 4, torch.randn(7, dim) * 3

    def project(m):
        return m @ layer.w_proj[0]

    with torch.no_grad():
        packed = layer.cell(gates.clone(), c_prev, project, in_place=True)
        plain = plain_step(layer, gates, c_prev)
    trained = layer.cell(gates.clone().requires_grad_(), c_prev, project, in_place=False)
    assert (plain[1].abs() == 3.0).any() and (plain[0].abs() == 0.5).any()
    for got, expected in zip(packed, trained):
        assert torch.equal(got, expected)
    for got, expected in zip(packed, plain):
        assert float((got - expected).abs().max()) <= 3.6e-7
    trained[0].sum().backward()  # nothing autograd saved was overwritten
