"""README.md runs: every fenced python and shell block, in order, as a user would type them.

All blocks share one working directory, like one shell session: python blocks each run in a fresh
interpreter (`python -c`), shell blocks (bash, sh, shell, console) with `bash -euo pipefail`. A
block that needs the network or hours has `<!-- readme-test: skip network|hours ... -->` on the
line before it and is skipped with that reason; nothing else is left out.

The working directory holds what a user brings along: `corpus.txt` and `dev.txt` (tokenized text,
one sentence a line), `train.spacy` / `dev.spacy` (a slice of UD English-EWT), `project/configs/`
(the repository's configs), `de.model` (a small random ELMoForManyLangs model written by its own
classes) and `de_train.spacy` / `de_dev.spacy` (tagged German toy sentences). `SPACY_ELMO_CACHE`
names a cache where `small` is what the README's offline route (`init-random --size small`) writes:
random weights in the published small model's layout (the test does not download 54 MB), so the
sizes the examples show are the published ones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from .efml_models import write_efml_model
from .helpers import REPO, data_path
from .readme_blocks import MARK, README, Block, readme_blocks

SHELLS = {"bash", "sh", "shell", "console"}
NOT_RUN = {"ini", "text", "json"}  # configs and outputs: shown, not run
BLOCK_TIMEOUT = 240


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUN = [b for b in BLOCKS if b.lang == "python" or b.lang in SHELLS]


def test_every_block_is_run_or_shown():
    """A block whose language the test does not know would escape the test: fail instead."""
    unknown = [
        f"line {b.line}: {b.lang or '(none)'}"
        for b in BLOCKS
        if b.lang not in NOT_RUN | SHELLS | {"python"}
    ]
    assert not unknown, f"README.md blocks of unknown language: {unknown}"
    assert sum(b.skip is None for b in RUN) >= 5


def test_config_blocks_parse_and_name_registered_functions():
    """A config block is copied into configs: it parses, and each `@registry = "name"` names a
    registered function (an inline `# comment` became part of the name: spaCy's E893)."""
    from spacy.util import registry
    from thinc.api import Config

    blocks = [b for b in BLOCKS if b.lang == "ini"]
    assert blocks
    for block in blocks:
        sections = re.findall(r"^\[([\w.]+)\]$", block.code, flags=re.M)
        parents = {".".join(s.split(".")[:k]) for s in sections for k in range(1, s.count(".") + 1)}
        config = Config().from_str(
            "".join(f"[{p}]\n" for p in sorted(parents - set(sections))) + block.code
        )
        names = re.findall(r"^@(\w+) = (.*)$", block.code, flags=re.M)
        assert names, f"README.md:{block.line}: no registered function named"
        for kind, value in names:
            name = json.loads(value)
            assert registry.has(kind, name), (
                f"README.md:{block.line}: {kind} {value} not registered"
            )
        assert config


def test_every_mark_is_right_before_a_block():
    """A mark that names no block (a typo, a moved block) would skip nothing, or the wrong block."""
    lines = README.read_text(encoding="utf-8").splitlines()
    skipped = {b.line for b in BLOCKS if b.skip}
    for n, line in enumerate(lines, 1):
        if "readme-test" in line:
            assert MARK.search(line), f"README.md:{n}: malformed mark {line.strip()!r}"
            after = next((k for k in range(n + 1, len(lines) + 1) if lines[k - 1].strip()), None)
            assert after in skipped, f"README.md:{n}: the mark is not right before a block"


def test_relative_links_name_existing_files():
    text = README.read_text(encoding="utf-8")
    targets = {m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m}
    missing = [t for t in targets if t and not (REPO / t).exists()]
    assert targets and not missing, f"README.md links to missing files: {missing}"


MAX_LINES = 200
DATE = re.compile(r"20\d\d-\d\d-\d\d")


def test_readme_is_a_users_document_not_a_log_of_measurements():
    """At most 200 lines, no dates and no GFLOP/s: figures, with their command, date and host,
    belong in bench/README.md (and the study's in project/README.md), which the README links to."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail elsewhere"
    )
    dated = [
        f"line {n}: {m.group(0)}" for n, line in enumerate(lines, 1) for m in DATE.finditer(line)
    ]
    assert not dated, f"README.md carries dates (measurements go to bench/README.md): {dated}"
    gflop = [n for n, line in enumerate(lines, 1) if "gflop" in line.lower()]
    assert not gflop, (
        f"README.md mentions GFLOP(/s) on lines {gflop}: that belongs in bench/README.md"
    )
    assert "bench/README.md" in text and "project/README.md" in text


def test_setup_commands_match_ci():
    """The README's install and test commands are the ones .ci/run runs."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    readme = "\n".join(b.code for b in RUN)
    install = re.search(r'pip install -q (-e "\.\[[\w,]+\]")', ci).group(1)
    tests = re.search(r"^(python -m pytest .*)$", ci, re.M).group(1)
    assert f"pip install {install}" in readme
    assert tests in readme


def test_setup_says_which_index_each_torch_install_uses():
    """`.ci/run` pins torch and installs it from pip's configured index (no --index-url): the
    README's set-up says so, and names the CPU index for a machine whose configured index (PyPI) has
    a CUDA build only."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    install = re.search(r"pip install -q (torch==[\d.]+)(.*)$", ci, re.M)
    text = README.read_text(encoding="utf-8")
    setup = " ".join(text[text.index("## Set-up") : text.index("## Quick start")].split())
    assert f"pip install {install.group(1)}" in setup
    assert "--index-url" not in install.group(2).split("#")[0]  # .ci/run: pip's configured index
    assert "pip's configured index, as `.ci/run` does" in setup
    assert "--index-url https://download.pytorch.org/whl/cpu" in setup


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The user's directory (see the module docstring) and the environment the blocks run in."""
    ewt = data_path("ud_english_ewt")
    from spacy.tokens import DocBin
    from spacy.training.converters import conllu_to_docs

    root = tmp_path_factory.mktemp("readme")
    with gzip.open(ewt / "en_ewt-ud-dev.conllu.gz", "rt", encoding="utf-8") as f:
        # 40 training and 20 dev sentences: each block's first try (20 steps of `spacy train`,
        # 10 of `pretrain`) runs its steps on any size; fewer sentences, less to embed
        sentences = f.read().split("\n\n")[:60]
    docs = list(conllu_to_docs("\n\n".join(sentences) + "\n", n_sents=1, no_print=True))
    DocBin(docs=docs[:40]).to_disk(root / "train.spacy")
    DocBin(docs=docs[40:]).to_disk(root / "dev.spacy")
    for name, part in (("corpus.txt", docs[:40]), ("dev.txt", docs[40:])):
        (root / name).write_text(
            "".join(" ".join(t.text for t in d) + "\n" for d in part), encoding="utf-8"
        )
    shutil.copytree(REPO / "project" / "configs", root / "project" / "configs")

    # the README's offline route, written where `download small` puts the published files
    subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            "init-random",
            str(root / "cache" / "small"),
            "--size",
            "small",
        ],
        check=True,
        capture_output=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=240,
    )

    write_efml_model(root / "de.model")
    write_german_tagged(root)
    env = dict(
        os.environ,
        SPACY_ELMO_CACHE=str(root / "cache"),
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return root, env


def write_german_tagged(root: Path) -> None:
    """`de_train.spacy` (16) and `de_dev.spacy` (8): tagged German sentences."""
    import spacy
    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("de").vocab
    docs = [
        Doc(vocab, words=f"{s} {v} {e}".split(), tags=f"{st} VERB {et}".split())
        for s, st in (
            ("Der Hund", "DET NOUN"),
            ("Die Katze", "DET NOUN"),
            ("Ein Kind", "DET NOUN"),
            ("Anna", "PROPN"),
        )
        for v in ("bellt", "schläft", "lacht")
        for e, et in ((".", "PUNCT"), ("heute .", "ADV PUNCT"))
    ]
    DocBin(docs=docs[::3] + docs[1::3]).to_disk(root / "de_train.spacy")
    DocBin(docs=docs[2::3]).to_disk(root / "de_dev.spacy")


def _command(block: Block) -> List[str]:
    if block.lang == "python":
        return [sys.executable, "-c", block.code]
    code = block.code
    if block.lang == "console":  # commands are the lines after a `$ ` prompt; the rest is output
        code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ ")) + "\n"
    return ["bash", "-euo", "pipefail", "-c", code]


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize("block", RUN, ids=[f"line{b.line}-{b.lang}" for b in RUN])
def test_readme_block_runs(block, workdir):
    if block.skip:
        pytest.skip(f"README.md:{block.line}: marked skip {block.skip}")
    root, env = workdir
    result = subprocess.run(
        _command(block), cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT
    )
    assert result.returncode == 0, (
        f"README.md:{block.line} ({block.lang}) exited with {result.returncode}\n--- "
        f"block\n{block.code}"
        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-5000:]}"
    )
    # a first try gives a trained model-best: evaluated after training steps
    if "spacy train" in block.code:
        steps = [
            int(m.group(1)) for m in re.finditer(r"^\s*\d+\s+(\d+)\s+[\d.]+\s", result.stdout, re.M)
        ]
        assert steps and max(steps) > 0, (
            f"spacy train evaluated only at steps {steps}:\n{result.stdout[-3000:]}"
        )
