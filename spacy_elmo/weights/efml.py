"""ELMoForManyLangs (EFML, HIT-SCIR) model directories, read as EFML's own code reads them.

A directory holds `config.json` (the trainer's arguments, of which EFML reads only `config_path`,
the architecture file: often an absolute path from the authors' machine), `char.dic` and `word.dic`
(`token<TAB>id` lines), and `token_embedder.pkl` and `encoder.pkl` (torch state dicts, in the zip or
the pre-1.6 format, read without unpickling code). Every file is read from the directory itself
(`inside_dir`): `config_path` is looked up inside it, then among the architectures EFML ships.

The network is AllenNLP's ELMo with three differences, which are options of the token encoder
(`CharTable`, `BiLMOptions.char_table` / `word_dim`): code points through a table, `<bow>` / `<eow>`
swapped, a word embedding before the character features. The weights are in torch's layout: `Linear`
weights `(out, in)`, LSTM gates in AllenNLP's order (i, f, g, o) with the forget bias stored
(`BiLMOptions.forget_bias` 0), the highway gate on the carried input (1 - t of bilm-tf's).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..bilm.chars import CharTable
from ..bilm.lstm import gates_to_internal
from ..bilm.options import BiLMOptions
from ..errors import ElmoFileError
from ..files import TEXT_ENCODING, excerpt, exists, inside_dir, read_regular
from .checks import check_finite, check_float, check_stored
from .data import ModelData, ModelFiles
from .json_files import read_json
from .memory import check_memory
from .state_dict import read_state_dict

KIND = "efml"
EFML_CONFIG, EFML_CHARS, EFML_WORDS = "config.json", "char.dic", "word.dic"
EFML_TOKEN_EMBEDDER, EFML_ENCODER = "token_embedder.pkl", "encoder.pkl"
# any of them: an EFML directory (`detect`)
EFML_MARKERS = (
    EFML_CHARS,
    EFML_TOKEN_EMBEDDER,
    EFML_ENCODER,
)
# the published dictionaries hold thousands of characters and ~100,000s of words
MAX_DIC_BYTES = 64 << 20
# The architecture of every published model, which EFML ships as elmoformanylangs/configs/<name> for
# these names (the two files are the same) and uses where `config_path` is found nowhere else.
PUBLISHED_CONFIGS = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")
PUBLISHED_ARCHITECTURE = {
    "encoder": {
        "name": "elmo",
        "projection_dim": 512,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 4096,
        "n_layers": 2,
    },
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
CHAR_ROWS, WORD_ROWS = "char_emb_layer.embedding.weight", "word_emb_layer.embedding.weight"
WHAT = {
    EFML_CONFIG: "ELMoForManyLangs config",
    EFML_TOKEN_EMBEDDER: "ELMoForManyLangs weights",
    EFML_ENCODER: "ELMoForManyLangs weights",
    EFML_CHARS: "ELMoForManyLangs character table",
    EFML_WORDS: "ELMoForManyLangs word table",
}
ARCHITECTURE_WHAT = "ELMoForManyLangs architecture"
# Float32 copies of the weights alive at once while converting, besides the tensors read: the
# converted state dict and the network's parameters.
EFML_COPIES = 2


def _named_architecture(directory: Path) -> Tuple[Path, str, Optional[Path]]:
    """`config.json`, its `config_path`, and the architecture file inside `directory` it names
    (None: none there): `config_path` as it is where relative without `..`, else its file name."""
    config_path = inside_dir(directory, EFML_CONFIG, WHAT[EFML_CONFIG])
    config = read_json(config_path, WHAT[EFML_CONFIG], directory)
    named = config.get("config_path") if isinstance(config, dict) else None
    if not isinstance(named, str) or not named:
        raise ElmoFileError(
            f"{config_path}: expected a JSON object with a 'config_path' string (the architecture "
            "file)"
        )
    relative = [named] if not os.path.isabs(named) and ".." not in Path(named).parts else []
    for name in relative + [os.path.basename(named)]:
        path = inside_dir(directory, name, ARCHITECTURE_WHAT)
        if name and exists(path, f"{ARCHITECTURE_WHAT} ('config_path' of {config_path})"):
            return config_path, named, path
    return config_path, named, None


def architecture_file(directory: Path) -> Optional[Path]:
    """The architecture file of an EFML directory, None where EFML's published architecture is
    meant."""
    return _named_architecture(directory)[2]


def read_architecture(directory: Path) -> Tuple[Dict[str, Any], str]:
    """The architecture `config.json` points to, and where it came from: the file inside `directory`
    that `config_path` names, else the architecture EFML ships under that file name."""
    config_path, named, path = _named_architecture(directory)
    if path is not None:
        return _as_object(read_json(path, ARCHITECTURE_WHAT, directory), str(path)), str(path)
    if os.path.basename(named) in PUBLISHED_CONFIGS:
        return (
            PUBLISHED_ARCHITECTURE,
            f"{config_path} (config_path {named}: the published architecture)",
        )
    raise ElmoFileError(
        f"{config_path}: the architecture file its config_path names, "
        f"{excerpt(os.path.basename(named))}, was found neither in {directory} nor among EFML's "
        f"own "
        f"({', '.join(PUBLISHED_CONFIGS)}): copy it there"
    )


def _as_object(value: Any, source: str, where: str = "the file") -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ElmoFileError(f"{source}: {where} must be a JSON object, got {type(value).__name__}")
    return value


# the key in the architecture file of each option `efml_options` translates: what errors name
EFML_KEYS = {
    **{f"lstm.{key}": f"encoder.{key}" for key in ("dim", "projection_dim", "n_layers")},
    **{f"lstm.{key}": f"encoder.{key}" for key in ("cell_clip", "proj_clip")},
    **{
        f"char_cnn.{key}": f"token_embedder.{key}"
        for key in ("activation", "filters", "n_highway", "word_dim", "max_characters_per_token")
    },
    "char_cnn.embedding.dim": "token_embedder.char_dim",
}


def efml_options(arch: Dict[str, Any], source: str, n_characters: int, n_words: int) -> BiLMOptions:
    """An EFML architecture (`encoder`, `token_embedder`) -> `BiLMOptions`, checked like any options
    file; the tables' rows (row 0 included) come from the weights. Only the published kind is read:
    the `cnn` token embedder over characters with the `elmo` encoder."""
    encoder = _as_object(arch.get("encoder"), source, "'encoder'")
    embedder = _as_object(arch.get("token_embedder"), source, "'token_embedder'")
    kinds = (str(embedder.get("name")).lower(), str(encoder.get("name")).lower())
    if kinds != ("cnn", "elmo"):
        raise ElmoFileError(
            f"{source}: token_embedder {excerpt(embedder.get('name'))} with encoder "
            f"{excerpt(encoder.get('name'))} is not supported; only 'cnn' with 'elmo' (the "
            f"published "
            "ELMoForManyLangs models) is"
        )
    char_dim = embedder.get("char_dim")
    if not isinstance(char_dim, int) or isinstance(char_dim, bool) or char_dim <= 0:
        raise ElmoFileError(
            f"{source}: 'token_embedder.char_dim' must be a positive integer (models without "
            f"characters are not supported), got {excerpt(char_dim)}"
        )
    lstm = {key: encoder.get(key) for key in ("dim", "projection_dim", "n_layers")}
    for key in ("cell_clip", "proj_clip"):  # EFML clips only where the value is truthy
        lstm[key] = encoder.get(key) or None
    cnn = {key: embedder.get(key) for key in ("activation", "filters", "n_highway", "word_dim")}
    cnn.update(
        embedding={"dim": char_dim},
        char_table=True,
        n_characters=n_characters,
        n_words=n_words,
        max_characters_per_token=embedder.get("max_characters_per_token", 50),
    )
    lstm.update(use_skip_connections=True, forget_bias=0)  # EFML's bias holds the forget bias
    return BiLMOptions.from_dict({"lstm": lstm, "char_cnn": cnn}, source, EFML_KEYS)


def expected_shapes(
    opts: BiLMOptions,
) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, Tuple[int, ...]]]:
    """Every tensor of `token_embedder.pkl` and of `encoder.pkl` for `opts`, with its shape."""
    E, F, P, D, W = opts.char_dim, opts.n_filters, opts.projection_dim, opts.lstm_dim, opts.word_dim
    token = {CHAR_ROWS: (opts.n_characters - 1, E)}
    if W:
        token[WORD_ROWS] = (opts.n_words - 1, W)
    for i, (w, n) in enumerate(opts.filters):
        token[f"convolutions.{i}.weight"], token[f"convolutions.{i}.bias"] = (n, E, w), (n,)
    for k in range(opts.n_highway):
        token[f"highways._layers.{k}.weight"], token[f"highways._layers.{k}.bias"] = (
            (2 * F, F),
            (2 * F,),
        )
    token["projection.weight"], token["projection.bias"] = (P, W + F), (P,)
    encoder = {}
    for l in range(opts.n_layers):
        for d in ("forward", "backward"):
            cell = f"{d}_layer_{l}"
            encoder[f"{cell}.input_linearity.weight"] = (4 * D, P)
            encoder[f"{cell}.state_linearity.weight"] = (4 * D, P)
            encoder[f"{cell}.state_linearity.bias"] = (4 * D,)
            encoder[f"{cell}.state_projection.weight"] = (P, D)
    return token, encoder


def _check_tensors(
    tensors: Dict[str, torch.Tensor],
    shapes: Dict[str, Tuple[int, ...]],
    source: str,
    arch_source: str,
) -> None:
    missing, unexpected = sorted(set(shapes) - set(tensors)), sorted(set(tensors) - set(shapes))
    if missing or unexpected:
        raise ElmoFileError(
            f"{source}: tensors missing {missing[:5]} / unexpected {unexpected[:5]} for the "
            f"architecture of {arch_source}"
        )
    for name, shape in shapes.items():
        tensor = tensors[name]
        check_float(name, tensor, source)
        check_stored(name, tensor, source)
        if tuple(tensor.shape) != shape:
            raise ElmoFileError(
                f"{source}: tensor '{name}' has shape {tuple(tensor.shape)} but the architecture "
                f"of "
                f"{arch_source} implies {shape}"
            )
        check_finite(tensor, source, name)


def _rows(tensors: Dict[str, torch.Tensor], name: str, source: str) -> int:
    tensor = tensors.get(name)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
        raise ElmoFileError(
            f"{source}: no 2-d tensor '{name}' (the {name.split('_')[0]} embedding)"
        )
    return tensor.shape[0]


def read_dic(path: Path, what: str, inside: Optional[Path] = None) -> Dict[str, int]:
    """A `token<TAB>id` file as EFML reads it: lines split where `str.splitlines` splits them (as
    its codecs reader does), stripped; a line of one field is the id of U+3000 (a token of white
    space that `strip` removed); later lines win. Another line is one ElmoFileError naming the file
    and the line. `inside`: its model directory (see `files.open_regular`)."""
    data = read_regular(path, what, MAX_DIC_BYTES, inside)
    try:
        text = data.decode(TEXT_ENCODING)
    except UnicodeDecodeError as err:
        raise ElmoFileError(f"{path}: not UTF-8 ({err})") from None
    table: Dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            token, index = fields
            table[token] = int(index)
        except ValueError:
            raise ElmoFileError(
                f"{path}: line {number} is not 'token<TAB>id': {excerpt(line)}"
            ) from None
    return table


def _linear(weight: torch.Tensor) -> torch.Tensor:
    """A torch `Linear` weight `(out, in)` -> this package's `(in, out)`."""
    return weight.float().t().contiguous()


def _gates(w: torch.Tensor, D: int) -> torch.Tensor:
    """`(..., 4D)` in AllenNLP's gate order (i, f, g, o) -> the internal order."""
    i, f, g, o = w.split(D, dim=-1)
    return gates_to_internal(torch.cat([i, g, f, o], dim=-1), D)


def efml_to_state_dict(
    token: Dict[str, torch.Tensor], encoder: Dict[str, torch.Tensor], opts: BiLMOptions
) -> Dict[str, torch.Tensor]:
    """EFML's two state dicts (checked against `expected_shapes`) -> a `BiLM` state dict (warm state
    zero)."""
    F, D = opts.n_filters, opts.lstm_dim

    def with_row0(table: torch.Tensor) -> torch.Tensor:  # row 0: no token
        return torch.cat([table.new_zeros(1, table.shape[1]), table]).float()

    sd = {
        "token_encoder.char_embedding.weight": with_row0(token[CHAR_ROWS]),
        "token_encoder.w_proj": _linear(token["projection.weight"]),
        "token_encoder.b_proj": token["projection.bias"].float(),
    }
    if opts.word_dim:
        sd["token_encoder.word_embedding.weight"] = with_row0(token[WORD_ROWS])
    for i in range(len(opts.filters)):
        sd[f"token_encoder.convs.{i}.weight"] = token[f"convolutions.{i}.weight"].float()
        sd[f"token_encoder.convs.{i}.bias"] = token[f"convolutions.{i}.bias"].float()
    # EFML: y = g * x + (1 - g) * relu(.), g = sigmoid(B x + b): t = 1 - g
    for k in range(opts.n_highway):
        weight, bias = (
            token[f"highways._layers.{k}.weight"].float(),
            token[f"highways._layers.{k}.bias"].float(),
        )
        sd[f"token_encoder.highways.{k}.w_transform"] = _linear(weight[:F])
        sd[f"token_encoder.highways.{k}.b_transform"] = bias[:F]
        sd[f"token_encoder.highways.{k}.w_carry"] = _linear(-weight[F:])
        sd[f"token_encoder.highways.{k}.b_carry"] = -bias[F:]
    for l in range(opts.n_layers):

        def both(name: str, l: int = l):  # (forward, backward) cells of layer l
            return [encoder[f"{d}_layer_{l}.{name}"] for d in ("forward", "backward")]

        sd[f"lstm.layers.{l}.w_input"] = torch.stack(
            [_gates(_linear(w), D) for w in both("input_linearity.weight")]
        )
        sd[f"lstm.layers.{l}.w_hidden"] = torch.stack(
            [_gates(_linear(w), D) for w in both("state_linearity.weight")]
        )
        sd[f"lstm.layers.{l}.bias"] = torch.stack(
            [_gates(b.float(), D) for b in both("state_linearity.bias")]
        )
        sd[f"lstm.layers.{l}.w_proj"] = torch.stack(
            [_linear(w) for w in both("state_projection.weight")]
        )
    sd["warm_h"] = torch.zeros(opts.n_layers, 2, opts.projection_dim)
    sd["warm_c"] = torch.zeros(opts.n_layers, 2, D)
    return sd


def detect(directory: Path) -> bool:
    """An ELMoForManyLangs model directory: it holds any of `EFML_MARKERS` (the others missing: one
    error when read)."""
    return any(os.path.lexists(directory / name) for name in EFML_MARKERS)


def held(directory: Path) -> List[str]:
    """The files of `EFML_MARKERS` that `directory` holds."""
    return [name for name in EFML_MARKERS if os.path.lexists(directory / name)]


def model_files(directory: Path) -> ModelFiles:
    """The files of a directory `detect` accepts: `config.json`, `token_embedder.pkl`, then those of
    `encoder.pkl`, `char.dic` and `word.dic` that are there."""
    others = [directory / name for name in (EFML_ENCODER, EFML_CHARS, EFML_WORDS)]
    return ModelFiles(
        KIND,
        directory / EFML_CONFIG,
        directory / EFML_TOKEN_EMBEDDER,
        others=tuple(p for p in others if os.path.lexists(p)),
    )


def read(model: ModelFiles) -> ModelData:
    """The EFML model in `model.config`'s directory, converted to a `BiLM` state dict (warm state
    zero, not computed) and a character table; its policy "zero", EFML's outputs after
    `reset_states`."""
    directory = model.config.parent
    arch, arch_source = read_architecture(directory)
    paths = {
        name: inside_dir(directory, name, WHAT[name])
        for name in (EFML_TOKEN_EMBEDDER, EFML_ENCODER, EFML_CHARS, EFML_WORDS)
    }
    token, encoder = (
        read_state_dict(paths[name], str(paths[name]), WHAT[name], legacy=True, inside=directory)
        for name in (EFML_TOKEN_EMBEDDER, EFML_ENCODER)
    )
    has_words = bool(
        _as_object(arch.get("token_embedder"), arch_source, "'token_embedder'").get("word_dim")
    )
    source = str(paths[EFML_TOKEN_EMBEDDER])
    opts = efml_options(
        arch,
        arch_source,
        _rows(token, CHAR_ROWS, source) + 1,
        _rows(token, WORD_ROWS, source) + 1 if has_words else 0,
    )
    token_shapes, encoder_shapes = expected_shapes(opts)
    _check_tensors(token, token_shapes, source, arch_source)
    _check_tensors(encoder, encoder_shapes, str(paths[EFML_ENCODER]), arch_source)
    check_memory(EFML_COPIES * 4 * opts.n_parameters, source)
    chars = read_dic(paths[EFML_CHARS], WHAT[EFML_CHARS], directory)
    words = read_dic(paths[EFML_WORDS], WHAT[EFML_WORDS], directory) if opts.word_dim else None
    table = CharTable.checked(
        chars,
        words,
        opts.max_characters_per_token,
        opts.n_characters,
        opts.n_words,
        str(paths[EFML_CHARS]),
        str(paths[EFML_WORDS]),
    )
    return ModelData(
        opts,
        efml_to_state_dict(token, encoder, opts),
        str(directory),
        "zero",
        table,
        warm_state=False,
    )
