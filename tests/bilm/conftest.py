"""Fixtures of the biLM core's tests."""

from __future__ import annotations

import pytest

from spacy_elmo.bilm import precision as precision_module


@pytest.fixture()
def native_bf16(monkeypatch):
    """Run the bfloat16 products as a CPU with native bfloat16 would (emulated here, slower, same
    numbers)."""
    monkeypatch.setattr(precision_module, "native_bfloat16", lambda device: True)
