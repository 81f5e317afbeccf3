"""Put the data the study needs in project/assets/: from a local data directory where it has the
file (--data-dir; unset: ../shared/data beside the repository where it exists; works offline), else
from the public URL; every file is checked against its sha256.

    python -m project.scripts.fetch_assets [--data-dir DIR] [--ner-data uner|conll2003]
                                           [--conll-dir DIR]

Always needed: UD English-EWT (the tagger, the probe) and the raw text (the biLM and both baselines
read it, given biLM weights or not). NER data: Universal NER English-EWT (`uner`, downloadable) or
CoNLL-2003 (`conll2003`), which has no public URL and comes from --conll-dir (or the data
directory).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import List, Optional

PROJECT = Path(__file__).resolve().parent.parent
# the data directory beside the repository, where present
BESIDE = PROJECT.parent.parent / "shared" / "data"
NER_DATA = ("uner", "conll2003")


def sha256_file(path: Path) -> str:
    """The file's sha256 (here rather than imported from spacy_elmo: the step needs neither it nor
    torch)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder(asset: dict) -> str:
    return asset["dest"].split("/")[0]


def needed(asset: dict, ner_data: str) -> bool:
    """Whether the study with this NER data reads the asset."""
    return folder(asset) not in NER_DATA or folder(asset) == ner_data


def local_sources(
    asset: dict, data_dir: Optional[Path], conll_dir: Optional[Path]
) -> Optional[List[Path]]:
    """The local file(s) of an asset: CoNLL-2003 under conll_dir (`eng.train` or `eng.train.gz`), or
    the asset's `local` names under data_dir; None where neither has it."""
    candidates = []
    if conll_dir is not None and folder(asset) == "conll2003":
        name = Path(asset["dest"]).name
        candidates += [[conll_dir / name], [conll_dir / f"{name}.gz"]]
    if data_dir is not None:
        local = asset["local"] if isinstance(asset["local"], list) else [asset["local"]]
        candidates.append([data_dir / name for name in local])
    return next((c for c in candidates if all(path.is_file() for path in c)), None)


def copy_local(sources: List[Path], target: Path) -> None:
    """Write the (decompressed) sources one after the other into target."""
    with open(target, "wb") as dst:
        for source in sources:
            opener = gzip.open if source.suffix == ".gz" else open
            try:
                with opener(source, "rb") as src:
                    shutil.copyfileobj(src, dst)
            except (OSError, EOFError) as err:
                raise SystemExit(f"error: cannot read {source}: {err}") from None


def download(url: str, target: Path, missing: Optional[List[Path]] = None) -> None:
    """Download `url` to `target`; `missing`: the asset's local files that data_dir lacks, which an
    error names (data_dir is set, and lacks them) rather than ask to set data_dir."""
    if missing:
        print(f"{', '.join(map(str, missing))} not found: downloading {url}", file=sys.stderr)
    else:
        print(f"downloading {url}", file=sys.stderr)
    try:
        urllib.request.urlretrieve(url, target)
    except (OSError, ValueError) as err:
        if missing:
            raise SystemExit(
                f"error: {', '.join(map(str, missing))} not found (the local file of "
                f"{target.parent.name}/{target.name.removesuffix('.part')} in data_dir), and "
                f"cannot download {url} ({err}): put the file there, under the name that "
                "project/assets.json gives it (`local`)"
            ) from None
        raise SystemExit(
            f"error: cannot download {url} ({err}); without a network, set data_dir "
            "(--vars.data_dir or $SPACY_ELMO_DATA) to a directory holding the files "
            "of project/assets.json"
        ) from None


def in_place(asset: dict, out_dir: Path) -> bool:
    target = out_dir / asset["dest"]
    return target.is_file() and sha256_file(target) == asset["sha256"]


def fetch(
    asset: dict, sources: Optional[List[Path]], out_dir: Path, data_dir: Optional[Path] = None
) -> str:
    """Place one asset from its local sources, else its URL (naming its files that `data_dir`
    lacks where the download fails); returns how ("local", "download"). A file whose sha256
    differs is refused and nothing is left behind."""
    target = out_dir / asset["dest"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    try:
        if sources is not None:
            copy_local(sources, tmp)
        else:
            download(asset["url"], tmp, missing_local(asset, data_dir))
        digest = sha256_file(tmp)
        if digest != asset["sha256"]:
            origin = ", ".join(map(str, sources)) if sources is not None else asset["url"]
            raise SystemExit(
                f"error: {asset['dest']} from {origin}: sha256 {digest} does not match "
                f"the expected {asset['sha256']} (project/assets.json)"
            )
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return "local" if sources is not None else "download"


def missing_local(asset: dict, data_dir: Optional[Path]) -> List[Path]:
    """The asset's `local` files that data_dir lacks (none where data_dir is not set)."""
    if data_dir is None:
        return []
    local = asset["local"] if isinstance(asset["local"], list) else [asset["local"]]
    return [data_dir / name for name in local if not (data_dir / name).is_file()]


def check_dirs(data_dir: Optional[Path], conll_dir: Optional[Path], ner_data: str) -> None:
    if data_dir is not None and not data_dir.is_dir():
        raise SystemExit(
            f"error: data_dir {data_dir} is not a directory (vars.data_dir, by default "
            "$SPACY_ELMO_DATA); leave it empty to download the data"
        )
    if conll_dir is not None and ner_data != "conll2003":
        raise SystemExit(
            f"error: conll_dir is set ({conll_dir}) but ner_data is {ner_data!r}: to train NER "
            "on CoNLL-2003 add --vars.ner_data=conll2003, else leave conll_dir empty"
        )
    if conll_dir is not None and not conll_dir.is_dir():
        raise SystemExit(f"error: conll_dir {conll_dir} is not a directory")


def unavailable(asset: dict, conll_dir: Optional[Path]) -> str:
    """Why an asset with no public URL cannot be placed."""
    name = Path(asset["dest"]).name
    where = f"{conll_dir} has no {name} (nor {name}.gz)" if conll_dir else "conll_dir is not set"
    return (
        f"error: ner_data 'conll2003' needs your copy of CoNLL-2003, which has no public URL (not "
        f"freely licensed), and {where}: set --vars.conll_dir=DIR to a directory with eng.train, "
        "eng.testa and eng.testb (or .gz), or use --vars.ner_data=uner"
    )


def main(argv=None) -> None:
    def optional_path(text: str) -> Optional[Path]:
        return Path(text) if text else None

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir",
        type=optional_path,
        default=None,
        help="a local directory with the files (assets.json `local`); works offline",
    )
    parser.add_argument(
        "--ner-data", choices=NER_DATA, default="uner", help="the NER data the study trains on"
    )
    parser.add_argument(
        "--conll-dir",
        type=optional_path,
        default=None,
        help="with --ner-data conll2003: your CoNLL-2003 (eng.train, eng.testa, eng.testb, or .gz)",
    )
    parser.add_argument("--out", type=Path, default=PROJECT / "assets")
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="of those, only these folders (ud, uner, conll2003, lm)",
    )
    args = parser.parse_args(argv)
    if args.data_dir is None and BESIDE.is_dir():
        args.data_dir = BESIDE
        print(f"data_dir unset: copying from {BESIDE}, the data directory beside the repository")
    check_dirs(args.data_dir, args.conll_dir, args.ner_data)
    manifest = json.loads((PROJECT / "assets.json").read_text(encoding="utf-8"))["assets"]
    todo = [
        a
        for a in manifest
        if needed(a, args.ner_data) and (not args.only or folder(a) in args.only)
    ]
    plan = []
    for asset in todo:  # every source settled before anything is fetched
        if in_place(asset, args.out):
            print(f"{'present':8s} {asset['dest']}")
            continue
        sources = local_sources(asset, args.data_dir, args.conll_dir)
        if sources is None and not asset.get("url"):
            raise SystemExit(unavailable(asset, args.conll_dir))
        plan.append((asset, sources))
    for asset, sources in plan:
        print(f"{fetch(asset, sources, args.out, args.data_dir):8s} {asset['dest']}")


if __name__ == "__main__":
    main()
