"""`python -m spacy_elmo info`: a biLM's architecture, parameters per part, widths and files."""

from __future__ import annotations

import json
import warnings
from typing import Annotated, Any, Optional

import typer

from ..errors import ElmoUntrainedWarning
from ..files import inside_dir, sha256_file
from ..pretrain.outputs import HEAD_FILE
from ..weights import load_bilm, locate, read_state_dict
from ..weights.efml import architecture_file
from ..weights.locate import describe_source
from ..weights.untrained import untrained_note
from .app import WEIGHTS_HELP, app, errors
from .convert import EXTRA_FILES


def describe(model: str, state: Optional[str] = None) -> dict[str, Any]:
    """Everything `info` reports, JSON-friendly; each file hashed is read from the model directory
    only (`inside_dir`, checked again once open)."""
    with warnings.catch_warnings():  # reported below, as `untrained`
        warnings.simplefilter("ignore", ElmoUntrainedWarning)
        bilm = load_bilm(model, state=state)
    located = locate(model)
    directory = located.config.parent
    inside = located.directory or directory
    architecture = architecture_file(directory) if located.kind == "efml" else None
    # each file inside the model directory, as the loader reads its own (a stray file too)
    files = [
        inside_dir(directory, str(p.relative_to(directory)), "model file")
        for p in located.paths + ([architecture] if architecture else [])
    ]
    extra = [
        inside_dir(directory, name, "extra model file")
        for name in EXTRA_FILES
        if (directory / name).is_file()
    ]
    softmax = None
    if extra and extra[0].name == HEAD_FILE:
        head = read_state_dict(extra[0], str(extra[0]), inside=inside)
        softmax = sum(t.numel() for t in head.values())
    o = bilm.options
    return {
        "model": model,
        "source": describe_source(model),
        "state_policy": bilm.state_policy.value,
        "parameters": sum(p.numel() for p in bilm.parameters()),
        "parameters_by_part": bilm.network.parameter_counts(),
        "softmax_parameters": softmax,
        "widths": {
            "char embedding": o.char_dim,
            "char CNN filters": o.n_filters,
            "token layer": o.projection_dim,
            "LSTM cell": o.lstm_dim,
            "LSTM projection": o.projection_dim,
            "ELMo layers": bilm.output_dim,
        },
        "output_layers": bilm.num_output_layers,
        "output_dim": bilm.output_dim,
        "fingerprint": bilm.fingerprint(),
        "options": o.sizes(),
        "untrained": untrained_note(o),
        "files": [
            {"path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p, inside=inside)}
            for p in files + extra
        ],
    }


@app.command("info")
def info_cli(
    model: Annotated[str, typer.Argument(help=WEIGHTS_HELP)],
    state: Annotated[Optional[str], typer.Option(help="state policy: warm, zero or carry")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object instead of tables")
    ] = False,
):
    """Architecture, parameters per part, layer widths and the sha256 of each file of a biLM."""
    with errors():
        report = describe(model, state)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from wasabi import msg

    o = report["options"]
    msg.divider(f"ELMo biLM: {report['source']}")
    if report["untrained"]:
        msg.warn(f"untrained: {report['untrained']}")
    msg.table(
        {
            "char CNN": f"char_dim {o['char_dim']}, filters {o['filters']}, {o['activation']}",
            "highway layers": o["n_highway"],
            "tokens read": "lowercased (char_cnn.lowercase)"
            if o.get("lowercase")
            else "as written",
            "LSTM": f"{o['n_layers']} layers per direction, cell clip {o['cell_clip']}, proj clip "
            f"{o['proj_clip']}, "
            f"skip connections {o['use_skip_connections']}",
            "output": f"{report['output_layers']} layers x {report['output_dim']}",
            "state policy": report["state_policy"],
            "fingerprint": report["fingerprint"],
        },
        max_col=200,
    )
    msg.divider("Widths")
    msg.table(report["widths"])
    msg.divider("Parameters")
    rows = [(k, f"{v:,}") for k, v in report["parameters_by_part"].items()]
    rows.append(("biLM total", f"{report['parameters']:,}"))
    if report["softmax_parameters"] is not None:
        rows.append(("softmax (lm_head.pt)", f"{report['softmax_parameters']:,}"))
    msg.table(rows, aligns=("l", "r"))
    msg.divider("Files")
    msg.table(
        [(f["path"], f"{f['bytes']:,}", f["sha256"]) for f in report["files"]],
        header=("file", "bytes", "sha256"),
        aligns=("l", "r", "l"),
        max_col=200,
    )
