"""What the first pass of a process pays for: the first `bilm.embed` of a process against later
ones, each after a fresh load (cold token cache), on a CPU or a GPU.

    python bench/bench_first_pass.py --size original [--device cuda] [--precision float32]
    [--passes 3] [--new-text] [--stream] [--no-cudnn] [--profile] [--heat SECONDS]
    [--allocator kept]

Each pass loads the biLM afresh and embeds the UD English-EWT test sentences once, so the passes
differ only in what the process already holds (kernels loaded, library handles, the allocator's
cached blocks, oneDNN's primitives, cuDNN's plans per shape), not in the token cache. With
`--new-text` each pass embeds another 1,000 sentences of the training set instead, so its batches
have shapes no earlier pass had, as in a stream of new text. By default a pass is one
`bilm.embed`, which returns every sentence's vectors and so keeps them all until the pass ends;
`--stream` reads `bilm.embed_iter` and drops each array as it comes, as `python -m spacy_elmo embed`
does once it has written it. Each pass also gives the seconds spent moving its vectors off the
device into the arrays it returns (`runner.split_by_sentence`, timed after the device has finished
the batch). `--no-cudnn`: the character
convolutions without cuDNN (torch's own GEMM-based ones). `--profile` also records the first
and the last pass with torch's profiler and lists the runtime calls that take the most time in
each (on CUDA: module loads, cudaMalloc, launches, synchronisations). On a GPU the SM clock is read
before each pass, and `--heat` runs matrix products there for that many seconds before the first
load, which tells the GPU's clock rising from idle apart from what the process pays. Each pass's
CPU seconds and minor page faults are given beside it; `--allocator kept` sets glibc's allocator as
`python -m spacy_elmo embed` does (`spacy_elmo.bilm.allocator`). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from contextlib import nullcontext

import torch
from common import DATA, machine, read_conllu_sentences, weights_dir

from spacy_elmo import load_bilm
from spacy_elmo.bilm import embedder, runner
from spacy_elmo.bilm.allocator import keep_freed_memory


class CopyClock:
    """Seconds spent in `split_by_sentence` (the layers moved off the device and cut into one array
    per sentence), counted from when the device has finished the batch."""

    def __init__(self):
        self.seconds = 0.0
        self.split = runner.split_by_sentence
        runner.split_by_sentence = embedder.split_by_sentence = self

    def __call__(self, layers, lengths, as_tensor):
        if layers.device.type == "cuda":
            torch.cuda.synchronize(layers.device)
        start = time.perf_counter()
        try:
            return self.split(layers, lengths, as_tensor)
        finally:
            self.seconds += time.perf_counter() - start


def top_calls(profile, n: int = 8) -> list:
    """The `n` profiled operations and runtime calls with the most self CPU time, in ms."""
    rows = sorted(profile.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [
        {"name": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 1)}
        for e in rows[:n]
    ]


def heat(device: torch.device, seconds: float) -> None:
    """Matrix products on `device` for `seconds`."""
    a = torch.randn(4096, 4096, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        (a @ a).sum().item()


def sm_clock(device: torch.device):
    """The GPU's SM clock now, in MHz (None where NVML cannot say)."""
    try:
        return torch.cuda.clock_rate(device)
    except Exception:  # NVML missing or refusing: the figure is left out
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="original")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--new-text", action="store_true")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--no-cudnn", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--heat", type=float, default=0.0)
    parser.add_argument("--allocator", choices=["default", "kept"], default="default")
    args = parser.parse_args()
    if args.allocator == "kept" and not keep_freed_memory():
        raise SystemExit("bench_first_pass.py: --allocator kept: the C library here is not glibc")
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.enabled = not args.no_cudnn
    split = "train" if args.new_text else "test"
    text = read_conllu_sentences(DATA / "ud_english_ewt" / f"en_ewt-ud-{split}.conllu.gz")
    on_gpu = torch.device(args.device).type == "cuda"
    if args.heat:
        heat(torch.device(args.device), args.heat)
    passes, loads, profiles, clocks, cpu, faults, copies = [], [], {}, [], [], [], []
    clock = CopyClock()
    for i in range(args.passes):
        sentences = text[i * 1000 : (i + 1) * 1000] if args.new_text else text
        n_tokens = sum(map(len, sentences))
        start = time.perf_counter()
        bilm = load_bilm(weights_dir(args.size), precision=args.precision, device=args.device)
        loads.append(round(time.perf_counter() - start, 2))
        profiled = args.profile and i in (0, args.passes - 1)
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if bilm.device.type == "cuda" else []
        )
        if on_gpu:
            clocks.append(sm_clock(bilm.device))
        with torch.profiler.profile(activities=activities) if profiled else nullcontext() as prof:
            clock.seconds = 0.0
            start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            if args.stream:
                for _ in bilm.embed_iter(sentences, batch_size=args.batch_size):
                    pass
            else:
                bilm.embed(sentences, batch_size=args.batch_size)
            passes.append(round(n_tokens / (time.perf_counter() - start)))
            copies.append(round(clock.seconds, 3))
            now = resource.getrusage(resource.RUSAGE_SELF)
            cpu.append(round(now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime, 2))
            faults.append(now.ru_minflt - used.ru_minflt)
        if profiled:
            profiles["first" if i == 0 else "last"] = top_calls(prof)
    result = {
        "size": args.size,
        "device": args.device,
        "precision": bilm.precision,
        "text": f"UD English-EWT {split}"
        + (", 1,000 new sentences per pass" if args.new_text else ""),
        "returned": "streamed, each array dropped" if args.stream else "kept (bilm.embed)",
        "cudnn": torch.backends.cudnn.enabled,
        "tokens_per_s": passes,
        "first_over_best": round(passes[0] / max(passes), 2),
        "load_s": loads,
        "cpu_s_per_pass": cpu,
        "minor_faults_per_pass": faults,
        "copy_off_device_s_per_pass": copies,
        "allocator": args.allocator,
        "heat_s": args.heat,
        "sm_clock_mhz_before_each_pass": clocks,
        "profiled": args.profile,
        "top_calls": profiles,
        "machine": machine(),
    }
    if bilm.device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(bilm.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
