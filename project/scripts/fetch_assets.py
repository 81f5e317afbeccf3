"""Put the project's data in project/assets/: from a local data directory where it has the file
(works offline), else from the public URL; every file is checked against its sha256.

    python project/scripts/fetch_assets.py --data-dir ../shared/data [--conll-dir DIR] [--only ud uner]
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import List

from spacy_elmo.bilm.hub import sha256_file

PROJECT = Path(__file__).resolve().parent.parent


def copy_local(sources: List[Path], target: Path) -> None:
    """Write the (decompressed) sources one after the other into target."""
    with open(target, "wb") as dst:
        for source in sources:
            opener = gzip.open if source.suffix == ".gz" else open
            with opener(source, "rb") as src:
                shutil.copyfileobj(src, dst)


def fetch(asset: dict, data_dir: Path | None, conll_dir: Path | None, out_dir: Path) -> str:
    """Place one asset; returns how ("present", "local", "download"). Raises with a clear message."""
    target = out_dir / asset["dest"]
    if target.exists() and sha256_file(target) == asset["sha256"]:
        return "present"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    local = asset["local"] if isinstance(asset["local"], list) else [asset["local"]]
    candidates = []
    if data_dir is not None:
        candidates.append([data_dir / name for name in local])
    if conll_dir is not None and asset["dest"].startswith("conll2003/"):
        name = Path(asset["dest"]).name
        candidates += [[conll_dir / name], [conll_dir / f"{name}.gz"]]
    sources = next((c for c in candidates if all(path.is_file() for path in c)), None)
    if sources is not None:
        copy_local(sources, tmp)
        how = "local"
    elif asset.get("url"):
        print(f"downloading {asset['url']}", file=sys.stderr)
        try:
            urllib.request.urlretrieve(asset["url"], tmp)
        except OSError as err:
            raise SystemExit(f"error: cannot download {asset['url']} ({err}); "
                             f"put the file under --data-dir as {asset['local']}") from None
        how = "download"
    else:
        raise SystemExit(f"error: {asset['dest']} has no public URL (not freely licensed); "
                         "point --conll-dir (project variable conll_dir) at your copy")
    digest = sha256_file(tmp)
    if digest != asset["sha256"]:
        tmp.unlink()
        raise SystemExit(f"error: {asset['dest']}: sha256 {digest} does not match the expected {asset['sha256']}")
    tmp.replace(target)
    return how


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=lambda s: Path(s) if s else None, default=None,
                        help="a local directory with the files (assets.json `local`); works offline")
    parser.add_argument("--conll-dir", type=lambda s: Path(s) if s else None, default=None,
                        help="a directory with your CoNLL-2003 copy (eng.train, eng.testa, eng.testb, optionally .gz)")
    parser.add_argument("--out", type=Path, default=PROJECT / "assets")
    parser.add_argument("--only", nargs="*", default=None,
                        help="destination folders to fetch (ud, uner, conll2003, lm)")
    args = parser.parse_args(argv)
    manifest = json.loads((PROJECT / "assets.json").read_text())["assets"]
    for asset in manifest:
        if args.only and asset["dest"].split("/")[0] not in args.only:
            continue
        print(f"{fetch(asset, args.data_dir, args.conll_dir, args.out):8s} {asset['dest']}")


if __name__ == "__main__":
    main()
