"""`device`: load_bilm and embed --device run the biLM where asked; a device this machine lacks is
one clear error. On a machine with CUDA the GPU path is compared with the CPU's outputs; on one
without, the error is checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoConfigError, load_bilm

from ..helpers import one_error_line, run_cli, write_lines

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Hello"],
    ["a", "b", "c", "d", "e", "f", "g"],
]


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "meta", "mps"])
def test_a_device_that_is_no_cuda_or_cpu_is_one_error(fixture_dir, device):
    with pytest.raises(ElmoConfigError, match=r"device .*(cpu|cuda)"):
        load_bilm(fixture_dir, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error for a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_one_clear_error(fixture_dir, device, tmp_path, capsys):
    with pytest.raises(ElmoConfigError, match="sees no CUDA device; install a CUDA build of torch"):
        load_bilm(fixture_dir, device=device)
    text = write_lines(tmp_path / "in.txt", [" ".join(s) for s in SENTENCES])
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "out.hdf5",
            "--weights",
            fixture_dir,
            "--device",
            device,
            "--no-progress",
        )
        == 1
    )
    assert "sees no CUDA device" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (the CPU suite checks the error)"
)
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_gpu_gives_the_cpu_outputs(fixture_dir, precision):
    cpu = load_bilm(fixture_dir).embed(SENTENCES)
    gpu = load_bilm(fixture_dir, device="cuda", precision=precision)
    assert gpu.device.type == "cuda"
    for a, b in zip(gpu.embed(SENTENCES), cpu):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 if precision == "float32" else 5e-2)


def test_embed_with_ray_takes_cuda_without_a_device_number(fixture_dir, tmp_path, capsys):
    """Ray gives each worker its GPUs (--gpus-per-worker), so `cuda:N` is refused in one line."""
    text = write_lines(tmp_path / "in.txt", [" ".join(s) for s in SENTENCES])
    assert (
        run_cli(
            "embed",
            text,
            tmp_path / "out",
            "--weights",
            fixture_dir,
            "--shards",
            "2",
            "--engine",
            "ray",
            "--device",
            "cuda:1",
            "--no-progress",
        )
        == 1
    )
    assert "with --engine ray, --device is cpu or cuda" in one_error_line(capsys.readouterr().err)


def test_device_cpu_is_the_default_and_named(fixture_dir):
    assert load_bilm(fixture_dir, device="cpu").device.type == "cpu"
    assert load_bilm(fixture_dir).device.type == "cpu"
