"""Every setting of one `embed` run, in one object: what the command line takes,
`spacy_elmo.embed.run` runs and the job reads."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from ..bilm import check_batch_size, check_precision
from ..bilm.threads import check_threads
from ..errors import ElmoConfigError, ElmoResourceError

DTYPES = ("float32", "float16")
COMPRESSIONS = ("none", "gzip", "lzf")
ENGINES = ("local", "ray")
DEFAULT_BLOCK = 10_000
# a .spacy input decompressed: a DocBin of some 800,000 sentences
DEFAULT_MAX_DOCBIN_BYTES = 2 << 30


@dataclass(frozen=True)
class EmbedOptions:
    """`input_path` (text or `.spacy`) -> `output` (an hdf5 file, or a directory of `shards` files)
    with the biLM `weights`; see `python -m spacy_elmo embed --help` for each setting. `shard`
    ("I/N") writes one shard of N; `engine` "ray" writes the shards with Ray actors (`address`,
    `workers`, `threads_per_worker`, `gpus_per_worker`: with `device` "cuda", the GPUs each actor
    reserves, 1 by default; `runtime_env`: the actors' Ray runtime environment, not on the command
    line). A `.spacy` input is decompressed to at most `max_docbin_bytes`. `check()` gives the
    options a run uses (`spacy_elmo.embed.run` calls it)."""

    input_path: Path
    output: Path
    weights: str
    lang: str = "en"
    whitespace: bool = False
    layer: str = "all"
    batch_size: int = 64
    state: Optional[str] = None
    precision: str = "float32"
    device: str = "cpu"
    dtype: str = "float32"
    compression: str = "none"
    resume: bool = False
    flush_every: Optional[int] = None  # lines per block; None: `block_size`
    shards: Optional[int] = None
    shard: Optional[str] = None
    threads: Optional[int] = None
    engine: str = "local"
    address: Optional[str] = None
    workers: Optional[int] = None
    threads_per_worker: Optional[int] = None
    gpus_per_worker: Optional[float] = None
    max_docbin_bytes: int = DEFAULT_MAX_DOCBIN_BYTES
    runtime_env: Optional[dict[str, Any]] = None

    def __post_init__(self) -> None:
        """The two paths as Paths, whatever path-like Python code gives (a str too)."""
        for name in ("input_path", "output"):
            object.__setattr__(self, name, Path(getattr(self, name)))

    def check(self) -> "EmbedOptions":
        """Self, with `shards` taken from `--shard I/N` where only that is given; ElmoConfigError (a
        setting out of range or settings that do not go together) or ElmoResourceError (`engine` ray
        without Ray)."""
        if self.dtype not in DTYPES or self.compression not in COMPRESSIONS:
            raise ElmoConfigError(
                f"--dtype must be one of {', '.join(DTYPES)} and --compression one of "
                f"{', '.join(COMPRESSIONS)}, got {self.dtype!r} and {self.compression!r}"
            )
        if self.whitespace and self.input_path.suffix == ".spacy":
            raise ElmoConfigError(
                f"--whitespace splits lines of text: {self.input_path} is a .spacy DocBin, whose "
                "Docs are tokenized already (leave --whitespace out)"
            )
        check_precision(self.precision)
        check_batch_size(self.batch_size)
        for name, value in (
            ("--flush-every", self.flush_every),
            ("--shards", self.shards),
            ("--workers", self.workers),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ElmoConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.shard is not None and not isinstance(self.shard, str):
            raise ElmoConfigError(f"--shard must be I/N, a str such as '0/2', got {self.shard!r}")
        if not isinstance(self.layer, str):
            raise ElmoConfigError(
                f"--layer must be all, top, average or a layer number as a str, got {self.layer!r}"
            )
        check_threads(self.threads, "--threads")
        check_threads(self.threads_per_worker, "--threads-per-worker")
        if not isinstance(self.max_docbin_bytes, int) or self.max_docbin_bytes < 1:
            raise ElmoConfigError(
                f"--max-docbin-bytes must be a positive number of bytes, got "
                f"{self.max_docbin_bytes!r}"
            )
        only = self.only_shard()
        options = self if only is None else replace(self, shards=int(self.shard.split("/")[1]))
        options._check_engine()
        if options.engine == "ray" and options.device == "cuda" and options.gpus_per_worker is None:
            options = replace(options, gpus_per_worker=1.0)
        return options

    def block_size(self, lines: int, whole_batches: bool = False) -> int:
        """Lines per block for an input of `lines` lines: `flush_every` where given; else 10,000, or
        fewer where `shards` needs more blocks than that gives (so that `--shards N` works on any
        input of N lines or more; its lines then differ from a default single run's in rounding).
        `whole_batches` (under carry, whose rows carry the state of the batch before): rounded up
        to a multiple of `batch_size`, so that blocks cut the input only between bilm-tf's batches
        and every block but the last reads whole ones."""
        if self.flush_every is not None:
            block = self.flush_every
        elif self.shards:
            block = min(DEFAULT_BLOCK, max(1, -(-lines // self.shards)))
        else:
            block = DEFAULT_BLOCK
        return -(-block // self.batch_size) * self.batch_size if whole_batches else block

    def only_shard(self) -> Optional[int]:
        """`--shard I/N` -> I, checked against `shards`; None without it."""
        if self.shard is None:
            return None
        i, _, n = self.shard.partition("/")
        if not (f"{i}{n}".isascii() and i.isdigit() and n.isdigit() and int(i) < int(n)) or (
            self.shards is not None and self.shards != int(n)
        ):
            raise ElmoConfigError(
                f"--shard must be I/N with 0 <= I < N (and N equal to --shards), got {self.shard!r}"
            )
        return int(i)

    def _check_engine(self) -> None:
        if self.engine not in ENGINES:
            raise ElmoConfigError(f"--engine must be local or ray, got {self.engine!r}")
        if self.engine == "local":
            if any(
                option is not None
                for option in (
                    self.address,
                    self.workers,
                    self.threads_per_worker,
                    self.gpus_per_worker,
                    self.runtime_env,
                )
            ):
                raise ElmoConfigError(
                    "--address, --workers, --threads-per-worker and --gpus-per-worker (and a "
                    "runtime_env) go with --engine ray"
                )
            return
        if self.threads is not None:
            raise ElmoConfigError(
                "--threads sets this process's torch threads: with --engine ray, give each "
                "actor's with --threads-per-worker"
            )
        if self.device not in ("cpu", "cuda"):
            raise ElmoConfigError(
                f"--device {self.device}: with --engine ray, --device is cpu or cuda (Ray gives "
                f"each "
                "worker its own GPUs: use --gpus-per-worker, not a device number)"
            )
        if self.gpus_per_worker is not None and (
            self.device != "cuda" or not 0 < self.gpus_per_worker
        ):
            raise ElmoConfigError(
                f"--gpus-per-worker {self.gpus_per_worker:g} needs --device cuda and a number "
                f"above 0 "
                "(a fraction shares a GPU between workers)"
            )
        if not self.shards or self.shard is not None:
            raise ElmoConfigError(
                "--engine ray writes every shard of --shards N: give --shards N (and not --shard "
                "I/N)"
            )
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError:
            raise ElmoResourceError(
                '--engine ray needs Ray: pip install "spacy_elmo[ray]"'
            ) from None
