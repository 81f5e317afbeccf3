"""`device`: load_bilm and embed --device run the biLM where asked; a device this machine lacks is
one clear error. On a machine with CUDA the GPU path is compared with the CPU's outputs; on one
without, the error is checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spacy_elmo import ElmoConfigError, load_bilm
from spacy_elmo.bilm.schedule import chunk_rows, prefix_tree, word_gate_rows

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


def test_a_cuda_device_past_the_machines_last_is_one_error_naming_those_it_has(
    fixture_dir, monkeypatch
):
    """On a machine of two CUDA devices (as torch is made to report them here), `cuda:2` is refused
    before anything moves there, naming the devices it has (the README's device table)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ElmoConfigError) as err:
        load_bilm(fixture_dir, device="cuda:2")
    assert "this machine has 2 CUDA device(s), cuda:0 to cuda:1" in str(err.value)


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


class CopyCounter(TorchDispatchMode):
    """Counts the tensor copies made to the meta device inside it."""

    def __init__(self):
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and str(kwargs.get("device")) == "meta":
            self.copies += 1
        return func(*args, **kwargs)


def test_a_prefix_tree_reaches_the_device_in_two_copies_not_one_per_step():
    """Each copy from host memory to a GPU waits for the work queued there: a tree's parents go as
    one tensor (views per step), not one copy per step (2,300 waits per 25,000 tokens on an
    H200)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, size=(6, 20))  # few words: rows share prefixes, so the tree branches
    lengths = np.array([20, 18, 15, 9, 4, 1])
    with CopyCounter() as counter:
        tree, _ = prefix_tree(ids, lengths, device="meta")
    steps_with_parents = sum(p is not None for p in tree.parents)
    assert steps_with_parents >= 5
    assert counter.copies == 2  # the words, the parents
    assert all(p.device.type == "meta" for p in tree.parents if p is not None)
    cpu_tree, _ = prefix_tree(ids, lengths)
    assert [None if p is None else p.shape for p in tree.parents] == [
        None if p is None else p.shape for p in cpu_tree.parents
    ]


def test_embed_moves_a_batch_off_the_device_in_one_copy(fixture_dir, monkeypatch):
    """The vectors of a batch leave the device together (one wait for a GPU per batch), not one
    sentence at a time; each sentence still gets its own array."""
    bilm = load_bilm(fixture_dir)
    expected = bilm.embed(SENTENCES * 4)
    calls = []
    original = torch.Tensor.cpu
    monkeypatch.setattr(
        torch.Tensor, "cpu", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    got = bilm.embed(SENTENCES * 4, batch_size=64)
    assert len(calls) == 1
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert len({id(a.base) if a.base is not None else id(a) for a in got}) == len(got)


def test_convolutions_as_matrix_products_give_the_convolutions_values(fixture_dir):
    """On a GPU the token encoder runs each convolution as one matrix product over its windows
    (cuDNN makes a plan for every new input shape): the same values, to float32 rounding, for
    short, long (past the 50 characters kept) and non-ASCII words."""
    network = load_bilm(fixture_dir).network
    words = [w for s in SENTENCES for w in s] + ["x" * 60, "naïve", "😀€", "a"]
    ids = torch.from_numpy(network.word_ids(words))
    with torch.inference_mode():
        convs = network.token_encoder(ids)
        products = network.token_encoder(ids, convs_as_products=True)
    np.testing.assert_allclose(products, convs, rtol=0, atol=1e-5)


def test_a_gpu_gathers_word_gate_inputs_from_one_piece():
    """On a CPU a batch's per-word gate inputs come in pieces of a bounded size (glibc's heap); on
    a GPU in one, since gathering from several asks which rows each holds, and every such
    question waits for the GPU (1,575 waits per pass of the test set on an H200)."""
    width, n_words = 4 * 4096, 5000
    assert word_gate_rows(width, n_words, torch.device("cuda")) == n_words
    assert word_gate_rows(width, 0, torch.device("cuda")) == 1
    assert word_gate_rows(width, n_words, torch.device("cpu")) == chunk_rows(width) < n_words
