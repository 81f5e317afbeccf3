"""`python -m spacy_elmo embed`: a corpus into hdf5 files in the layout `allennlp elmo` wrote, streamed,
crash-safe, resumable, optionally in shards written by Ray actors (`ray_engine`, needs the `ray` extra).

    reader      the input: scanned once (sha256, lines, UTF-8), read lazily
    compute     the biLM's layers per line, in blocks
    h5writer    hdf5 files written whole (parts, shards, the assembled output)
    outdir      the run's directory and its manifest (one schema, one reader, one writer)
    job         the plan, the pieces still to write, resume, shards
    reading     `open_embeddings`: reading an output back
"""
from .options import EmbedOptions
from .reading import Embeddings, open_embeddings

__all__ = ["EmbedOptions", "Embeddings", "open_embeddings"]
