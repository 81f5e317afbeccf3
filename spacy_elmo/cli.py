"""Command line: `python -m spacy_elmo pretrain | embed | convert | info | download`.

Each command lives in its own function; `pretrain` takes spaCy-style config overrides
(`--training.max_steps 100`) and is implemented in `spacy_elmo.pretrain`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

PUBLISHED = {
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original-5.5b": "2x4096_512_2048cnn_2xhighway_5.5B",
}
PUBLISHED_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"


def _published_urls(name: str):
    stem = PUBLISHED[name]
    base = f"{PUBLISHED_BASE}/{stem}"
    return stem, [f"{base}/elmo_{stem}_options.json", f"{base}/elmo_{stem}_weights.hdf5"]


def cmd_info(args) -> int:
    from .bilm import load_bilm

    bilm = load_bilm(args.path, state=args.state)
    n_params = sum(p.numel() for p in bilm.parameters())
    info = {"path": str(args.path), "state_policy": bilm.state_policy, "parameters": n_params,
            "output_layers": bilm.num_output_layers, "output_dim": bilm.output_dim,
            "fingerprint": bilm.fingerprint(), "options": bilm.options.sizes()}
    print(json.dumps(info, indent=2))
    return 0


def cmd_embed(args) -> int:
    """Token-per-space text, one sentence per line -> an .npz (or .hdf5) of per-sentence layer arrays."""
    import numpy as np
    from .bilm import load_bilm

    bilm = load_bilm(args.model, state=args.state)
    with open(args.input, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    out = Path(args.output)
    arrays = {}
    done = 0
    for i, layers in enumerate(bilm.embed_iter(sentences, batch_size=args.batch_size)):
        arrays[str(i)] = layers
        done += layers.shape[1]
        if (i + 1) % 1000 == 0:
            print(f"embedded {i + 1}/{len(sentences)} sentences ({done} tokens)", file=sys.stderr)
    if out.suffix == ".hdf5":
        import h5py

        with h5py.File(out, "w") as f:
            for key, arr in arrays.items():
                f.create_dataset(key, data=arr)
    else:
        np.savez(out, **arrays)
    print(f"wrote {len(arrays)} sentences to {out}", file=sys.stderr)
    return 0


def cmd_convert(args) -> int:
    """hdf5 weights -> this project's format, or back (`--to hdf5`)."""
    from .bilm import export_hdf5, load_bilm, save_bilm

    bilm = load_bilm(args.input)
    if args.to == "hdf5":
        paths = export_hdf5(bilm, args.output, stem=args.stem)
        print("wrote", *paths)
    else:
        save_bilm(bilm, args.output)
        print("wrote", args.output)
    return 0


def cmd_download(args) -> int:
    """Fetch a published AllenNLP model into a directory (needs network access)."""
    import urllib.request

    stem, urls = _published_urls(args.name)
    out = Path(args.output or f"elmo_{args.name}")
    out.mkdir(parents=True, exist_ok=True)
    for url in urls:
        target = out / url.rsplit("/", 1)[1]
        if target.exists():
            print(f"exists: {target}")
            continue
        print(f"downloading {url}", file=sys.stderr)
        tmp = target.with_suffix(target.suffix + ".part")
        try:
            urllib.request.urlretrieve(url, tmp)
        except OSError as err:
            print(f"error: could not download {url} ({err}). Download the two files by other means into {out}; "
                  "`load_bilm` takes the directory as it is.", file=sys.stderr)
            return 1
        tmp.rename(target)
    print(out)
    return 0


def cmd_pretrain(args, extra: List[str]) -> int:
    from .pretrain.cli import pretrain_command

    return pretrain_command(args, extra)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spacy_elmo", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="sizes, parameter count and fingerprint of a biLM")
    p.add_argument("path", help="weights directory (hdf5 layout or this project's format)")
    p.add_argument("--state", choices=["warm", "zero", "carry"], default=None)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("embed", help="embed a whitespace-tokenized text file, one sentence per line")
    p.add_argument("model")
    p.add_argument("input")
    p.add_argument("output", help="an .npz or .hdf5 file; key i holds sentence i, (layers, tokens, dim)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--state", choices=["warm", "zero", "carry"], default=None)
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("convert", help="convert weights between the hdf5 layout and this project's format")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--to", choices=["own", "hdf5"], default="own")
    p.add_argument("--stem", default=None, help="with --to hdf5: name files elmo_<stem>_options.json/_weights.hdf5")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("download", help="fetch published AllenNLP weights (needs network)")
    p.add_argument("name", choices=sorted(PUBLISHED))
    p.add_argument("--output", default=None)
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("pretrain", help="train a biLM from raw text (see --help)", add_help=False)
    p.set_defaults(func=cmd_pretrain, takes_extra=True)
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "takes_extra", False):
        code = args.func(args, extra)
    else:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        try:
            code = args.func(args)
        except (FileNotFoundError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            code = 1
    sys.exit(code)
