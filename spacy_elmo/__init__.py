"""ELMo for spaCy: a PyTorch biLM that loads the published weights, and spaCy components on it."""

from .about import __version__
from .bilm import BiLM, BiLMOptions, ElmoEmbedder
from .embed import open_embeddings
from .errors import (
    ElmoConfigError,
    ElmoError,
    ElmoFileError,
    ElmoResourceError,
    ElmoResumeError,
    ElmoUntrainedWarning,
    ElmoUnusedWarning,
)
from .extensions import install_extensions
from .vector_hooks import set_vector_hooks
from .weights import export_hdf5, load_bilm, save_bilm

# Docs stored with ELMo data (a DocBin, Doc.to_bytes, `spacy apply` output) read back in any process
# that imports spacy_elmo: the extensions and the data's msgpack decoder are registered here.
install_extensions()

__all__ = [
    "BiLM",
    "BiLMOptions",
    "ElmoConfigError",
    "ElmoEmbedder",
    "ElmoError",
    "ElmoFileError",
    "ElmoResourceError",
    "ElmoResumeError",
    "ElmoUntrainedWarning",
    "ElmoUnusedWarning",
    "export_hdf5",
    "load_bilm",
    "open_embeddings",
    "save_bilm",
    "set_vector_hooks",
    "__version__",
]
