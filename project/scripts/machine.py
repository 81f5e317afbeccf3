"""The machine a figure was measured on, for the records of the benchmarks and the study."""

from __future__ import annotations

import os
import platform
from typing import Any, Dict

import torch


def machine() -> Dict[str, Any]:
    """CPU model, cores, operating system, torch version and threads, and the GPU (None without
    CUDA)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass  # not Linux, or no model name: the platform's word for the processor
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "system": platform.system(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
