"""`python -m spacy_elmo init-config`: a complete `spacy train` config whose components read ELMo.

spaCy's `init config` has no hook for plugins: `-p elmo,tagger` gives a tagger that never reads the
`elmo` component's layers. This writes the wiring of project/configs/*_elmo.cfg for any of the
supported components: `elmo` first and in [training] annotating_components, and ELMo where
`--elmo-at` says: at the input, every component's embedding `[x_k; ELMo_k]`
(`spacy_elmo.ElmoMultiHashEmbed.v1` with `spacy_elmo.ElmoFeatures.v3`); at the output, `[h_k;
ELMo_k]` (`spacy_elmo.ElmoAtOutput.v1`), a mix per component; every mix over the biLM layers
`--elmo-layers` names (all by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Dict, List, Optional, Tuple

import typer

from ..errors import ElmoConfigError, ElmoError, ElmoFileError, ElmoResourceError
from ..weights import load_bilm, locate
from .app import WEIGHTS_HELP, app, errors

# The head of each component: its `model` without the `tok2vec` (spaCy's quickstart, CPU).
HEADS: Dict[str, Dict[str, Any]] = {
    "tagger": {"@architectures": "spacy.Tagger.v2", "nO": None, "normalize": False},
    "morphologizer": {"@architectures": "spacy.Tagger.v2", "nO": None, "normalize": False},
    "parser": {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "parser",
        "extra_state_tokens": False,
        "hidden_width": 128,
        "maxout_pieces": 3,
        "use_upper": True,
        "nO": None,
    },
    "ner": {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": True,
        "nO": None,
    },
    **{
        name: {
            "@architectures": "spacy.TextCatEnsemble.v2",
            "nO": None,
            "linear_model": {
                "@architectures": "spacy.TextCatBOW.v3",
                "exclusive_classes": exclusive,
                "ngram_size": 1,
                "no_output_layer": False,
                "length": 262144,
                "nO": None,
            },
        }
        for name, exclusive in (("textcat", True), ("textcat_multilabel", False))
    },
}
SUPPORTED = tuple(HEADS)
ADDED = ("elmo", "tok2vec")  # written by the command: ignored in --pipeline
# efficiency: one shared tok2vec, so one ELMo mix for all components; accuracy: each component its
# own embedding, encoder and mix (the task-specific weights of Peters et al. 2018, sec. 3.3), wider
# and deeper.
SIZES = {"efficiency": {"width": 96, "depth": 4}, "accuracy": {"width": 256, "depth": 8}}
SHARED = "${components.tok2vec.model.encode.width}"
ELMO_AT = ("input", "output", "both")
ATTRS, ROWS = ["NORM", "PREFIX", "SUFFIX", "SHAPE"], [5000, 1000, 2500, 2500]


def features(layers: Optional[List[int]]) -> Dict[str, Any]:
    """`spacy_elmo.ElmoFeatures.v3` over `layers` (None: all), its sizes taken from the biLM."""
    return {
        "@architectures": "spacy_elmo.ElmoFeatures.v3",
        "n_layers": None,
        "width": None,
        "dropout": 0.2,
        "l2": 0.001,
        "layer_norm": False,
        "projection": None,
        "layers": layers,
    }


def parse_pipeline(pipeline: str) -> List[str]:
    """`tagger,ner` -> `["tagger", "ner"]`; raises ElmoConfigError naming what is supported."""
    names = [
        name.strip() for name in pipeline.split(",") if name.strip() and name.strip() not in ADDED
    ]
    unknown = [name for name in names if name not in HEADS]
    if unknown or not names or len(set(names)) != len(names):
        problem = (
            f"unsupported component {', '.join(map(repr, unknown))}"
            if unknown
            else "no component"
            if not names
            else "a component named twice"
        )
        raise ElmoConfigError(
            f"--pipeline {pipeline!r}: {problem}; supported: {', '.join(SUPPORTED)} "
            "(comma-separated; elmo is added, and a shared tok2vec with --optimize efficiency)"
        )
    return names


def parse_layers(text: str) -> List[int]:
    """`0,1` -> `[0, 1]`; raises ElmoConfigError on anything but distinct indices from 0."""
    try:
        layers = [int(part) for part in text.split(",")]
    except ValueError:
        layers = []
    if not layers or min(layers) < 0 or len(set(layers)) != len(layers):
        raise ElmoConfigError(
            f"--elmo-layers {text!r}: give distinct layer indices from 0, comma-separated, "
            "e.g. 0,1 (0: the token layer)"
        )
    return layers


def tok2vec_model(
    width: int, depth: int, embed_width: Any, elmo: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """`spacy.Tok2Vec.v2` whose embedding is `[x_k; ELMo_k]` with `elmo` (an ElmoFeatures block),
    else spaCy's `MultiHashEmbed`."""
    embed: Dict[str, Any] = {
        "width": embed_width,
        "attrs": ATTRS,
        "rows": ROWS,
        "include_static_vectors": False,
    }
    embed = (
        {"@architectures": "spacy_elmo.ElmoMultiHashEmbed.v1", **embed, "elmo": elmo}
        if elmo
        else {"@architectures": "spacy.MultiHashEmbed.v2", **embed}
    )
    return {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": embed,
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": width,
            "depth": depth,
            "window_size": 1,
            "maxout_pieces": 3,
        },
    }


def component_tok2vec(
    sizes: Dict[str, int], shared: bool, elmo_at: str, elmo_layers: Optional[List[int]]
) -> Dict[str, Any]:
    """A component's `tok2vec`: a listener of the shared one, or its own of `sizes`; with ELMo at
    its input and/or its encoder's output, as `elmo_at` says."""
    elmo = features(elmo_layers) if elmo_at in ("input", "both") else None
    tok2vec = (
        {"@architectures": "spacy.Tok2VecListener.v1", "width": SHARED, "upstream": "*"}
        if shared
        else tok2vec_model(sizes["width"], sizes["depth"], sizes["width"], elmo)
    )
    if elmo_at in ("output", "both"):  # [h_k; ELMo_k]: the component's own mix at its output
        tok2vec = {
            "@architectures": "spacy_elmo.ElmoAtOutput.v1",
            "tok2vec": tok2vec,
            "elmo": features(elmo_layers),
        }
    return tok2vec


def base_config(
    lang: str,
    components: List[str],
    weights: str,
    optimize: str,
    gpu: bool,
    elmo_at: str = "input",
    elmo_layers: Optional[List[int]] = None,
) -> Dict[str, Any]:
    """The settings that differ from spaCy's defaults, as a config dict (spaCy fills in the
    rest)."""
    sizes = SIZES[optimize]
    shared = optimize == "efficiency"
    corpus = {
        "@readers": "spacy.Corpus.v1",
        "max_length": 0,
        "gold_preproc": False,
        "limit": 0,
        "augmenter": None,
    }
    config: Dict[str, Any] = {
        "paths": {"train": None, "dev": None, "elmo": weights},
        "system": {"gpu_allocator": "pytorch" if gpu else None, "seed": 0},
        "nlp": {
            "lang": lang,
            "pipeline": ["elmo", *(["tok2vec"] if shared else []), *components],
            "batch_size": 256,
        },
        "corpora": {
            "train": {**corpus, "path": "${paths.train}"},
            "dev": {**corpus, "path": "${paths.dev}"},
        },
        # elmo annotates every batch; it has nothing to train
        "training": {"annotating_components": ["elmo"]},
        "components": {"elmo": {"factory": "elmo", "weights": "${paths.elmo}"}},
    }
    if shared:
        elmo = features(elmo_layers) if elmo_at in ("input", "both") else None
        config["components"]["tok2vec"] = {
            "factory": "tok2vec",
            "model": tok2vec_model(sizes["width"], sizes["depth"], SHARED, elmo),
        }
    for name in components:
        tok2vec = component_tok2vec(sizes, shared, elmo_at, elmo_layers)
        config["components"][name] = {"factory": name, "model": {**HEADS[name], "tok2vec": tok2vec}}
    return config


def build_config(
    lang: str,
    components: List[str],
    weights: str,
    optimize: str,
    gpu: bool,
    elmo_at: str = "input",
    elmo_layers: Optional[List[int]] = None,
):
    """The complete config (a thinc `Config`), auto-filled by spaCy as `spacy init config` fills its
    own."""
    from spacy import util
    from thinc.api import Config

    try:
        util.get_lang_class(lang)
    except ImportError:
        raise ElmoConfigError(f"--lang {lang!r}: spaCy has no such language") from None
    text = Config(
        base_config(lang, components, weights, optimize, gpu, elmo_at, elmo_layers)
    ).to_str()
    try:
        nlp = util.load_model_from_config(
            Config().from_str(text, interpolate=False), auto_fill=True
        )
    except ImportError as err:  # a language whose tokenizer needs a package that is not installed
        raise ElmoResourceError(f"--lang {lang}: {str(err).splitlines()[0]}") from None
    return nlp.config


def write_config(text: str, output: Path, force: bool) -> None:
    """Write `text` to `output` (its directory made), never over an existing file unless `force`."""
    if output.is_dir():
        raise ElmoFileError(f"{output} is a directory: name the config file to write")
    if output.exists() and not force:
        raise ElmoFileError(f"{output} exists: pass --force to overwrite it")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ElmoFileError(f"{output}: cannot write the config: {err.strerror or err}") from None


PIPELINE_HELP = (
    f"comma-separated components to train, of {', '.join(SUPPORTED)} (elmo is added, and a "
    "shared tok2vec with --optimize efficiency)"
)
OPTIMIZE_HELP = (
    "efficiency: one shared tok2vec (width 96, depth 4) and one ELMo mix for all components; "
    "accuracy: each component its own embedding, encoder (width 256, depth 8) and ELMo mix"
)
GPU_HELP = (
    'train on a GPU: [system] gpu_allocator = "pytorch", so the biLM and spaCy share one memory '
    "pool"
)
ELMO_AT_HELP = (
    "where ELMo goes: input ([x_k; ELMo_k], the embedding), output ([h_k; ELMo_k] after the "
    "encoder, a mix per component) or both (Peters et al. 2018, sec. 3.3)"
)
ELMO_LAYERS_HELP = (
    "the biLM layers every ELMo mix reads, comma-separated, 0 the token layer: e.g. 0,1 (Reimers "
    "and Gurevych 2019); checked against the biLM now. Default: all"
)


def check_options(
    pipeline: str, optimize: str, elmo_at: str, elmo_layers: Optional[str], weights: str
) -> Tuple[List[str], Optional[List[int]]]:
    """The components of `--pipeline` and the layers of `--elmo-layers` (None: all), once every
    option is checked (the weights found, and loaded where `--elmo-layers` is checked against
    them); ElmoError naming the option otherwise."""
    components = parse_pipeline(pipeline)
    if optimize not in SIZES:
        raise ElmoConfigError(f"--optimize must be efficiency or accuracy, got {optimize!r}")
    if elmo_at not in ELMO_AT:
        raise ElmoConfigError(f"--elmo-at must be input, output or both, got {elmo_at!r}")
    layers = parse_layers(elmo_layers) if elmo_layers is not None else None
    try:
        locate(weights)
        n_layers = load_bilm(weights).num_output_layers if layers is not None else None
    except ElmoError as err:
        raise type(err)(f"--weights: {err}") from None
    if layers is not None and max(layers) >= n_layers:
        raise ElmoConfigError(
            f"--elmo-layers {elmo_layers!r}: the biLM has layers 0 to {n_layers - 1} "
            "(0: the token layer)"
        )
    return components, layers


@app.command("init-config")
def init_config_cli(
    output: Annotated[
        Path, typer.Argument(help="the .cfg file to write, or - for stdout", allow_dash=True)
    ],
    weights: Annotated[
        str, typer.Option("--weights", "-w", help=WEIGHTS_HELP + "; written as [paths] elmo")
    ],
    pipeline: Annotated[
        str, typer.Option("--pipeline", "-p", help=PIPELINE_HELP)
    ] = "tagger,parser,ner",
    lang: Annotated[
        str, typer.Option("--lang", "-l", help="spaCy language code of the pipeline")
    ] = "en",
    optimize: Annotated[str, typer.Option("--optimize", "-o", help=OPTIMIZE_HELP)] = "efficiency",
    gpu: Annotated[bool, typer.Option("--gpu", "-G", help=GPU_HELP)] = False,
    elmo_at: Annotated[str, typer.Option("--elmo-at", help=ELMO_AT_HELP)] = "input",
    elmo_layers: Annotated[
        Optional[str], typer.Option("--elmo-layers", help=ELMO_LAYERS_HELP)
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-F", help="overwrite OUTPUT if it exists")
    ] = False,
):
    """Write a complete `spacy train` config whose components read ELMo.

    Unlike `spacy init config -p elmo,...`, the components read a learned mix of the biLM's layers
    beside spaCy's hash embedding (`spacy_elmo.ElmoFeatures.v3`): one mix in the shared tok2vec
    (`--optimize efficiency`, ELMo at the input), else a mix per component (`--optimize accuracy`,
    or `--elmo-at output` or `both`: after each encoder too), and `elmo` annotates every training
    batch. The weights are checked now (a typo fails here, not at training); the biLM loads when
    training starts. Then: `python -m spacy train OUTPUT --paths.train train.spacy --paths.dev
    dev.spacy`.
    """
    with errors():
        components, layers = check_options(pipeline, optimize, elmo_at, elmo_layers, weights)
        text = build_config(lang, components, weights, optimize, gpu, elmo_at, layers).to_str()
        if str(output) == "-":
            typer.echo(text)
            return
        write_config(text, output, force)
    typer.echo(
        f"wrote {output} ({lang}: elmo, {', '.join(components)}; optimized for {optimize})\n"
        f"train it: python -m spacy train {output} --paths.train train.spacy --paths.dev dev.spacy"
    )
