"""`python -m spacy_elmo embed`: a corpus into hdf5 files in the layout `allennlp elmo` wrote,
streamed, crash-safe, resumable, optionally in shards written by Ray actors (`ray_engine`, needs the
`ray` extra). `run(EmbedOptions(...))` is the one entry, for the command line and the library alike.

    options     `EmbedOptions`: every setting of a run, checked once
    runner      `run`: one run, whoever writes it (this process, one shard of N, Ray actors)
    sentences   the input: scanned once (sha256, lines, UTF-8), read lazily
    compute     the biLM's layers per line, in blocks
    writer      `OutputWriter`, the interface of an output's files
    h5writer    its HDF5 implementation: files written whole (parts, shards, the assembled output)
    outdir      the run's directory and its manifest (one schema, one reader, one writer)
    job         the plan, the pieces still to write, resume, shards
    ray_engine  the shards written by a pool of Ray actors
    ray_session joining or starting Ray, its output kept quiet
    embeddings  `open_embeddings`: reading an output back
"""

from .embeddings import Embeddings, open_embeddings
from .options import EmbedOptions
from .runner import EmbedInterrupted, EmbedResult, run

__all__ = [
    "EmbedInterrupted",
    "EmbedOptions",
    "EmbedResult",
    "Embeddings",
    "open_embeddings",
    "run",
]
