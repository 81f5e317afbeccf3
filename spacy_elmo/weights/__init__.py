"""Weight files: one module per format (`own`, `efml`, `pipeline`: a saved spaCy pipeline, its
file's framing in `pipeline_file`; `hdf5`): `detect`, `model_files`, `read` -> `ModelData`, never
an embedder; formats do not import each other, `formats.FORMATS` lists them. What they share
(`checks`, `state_dict`, `legacy_torch`, `memory`, `json_files`: options files), `locate`,
`load_bilm` (which builds the network from what a format read), the published models' cache (`hub`)
and `download` (its part files: `part_file`; its requests bounded as a whole: `http_deadline`).
Imports the biLM core (`spacy_elmo.bilm`), which never imports this."""

from .data import ModelData, ModelFiles
from .formats import FORMATS
from .hdf5_export import export_hdf5
from .json_files import read_options
from .load import bilm_from_state_dict, build, load_bilm
from .locate import ModelPath, locate
from .own_save import save_bilm
from .state_dict import read_state_dict

__all__ = [
    "FORMATS",
    "ModelData",
    "ModelFiles",
    "ModelPath",
    "bilm_from_state_dict",
    "build",
    "export_hdf5",
    "load_bilm",
    "locate",
    "read_options",
    "read_state_dict",
    "save_bilm",
]
