"""`spacy project run assets` in a copy of the project: only the data the chosen NER data needs,
from $SPACY_ELMO_DATA (offline) or, with no data directory, from the URLs of project/assets.json."""

import hashlib
import json
import os
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ..helpers import REPO, data_path
from .project_copy import copy_project, spacy_project

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
NO_CONLL = ("ud_english_ewt", "uner_english_ewt", "wikitext2", "lm1b_heldout")


def environment(data_dir=None):
    """This process's environment with SPACY_ELMO_DATA set to data_dir, or removed; no proxy for
    localhost."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "SPACY_ELMO_DATA" and not k.lower().endswith("_proxy")
    }
    if data_dir is not None:
        env["SPACY_ELMO_DATA"] = str(data_dir)
    return {**env, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def failure(result):
    assert result.returncode != 0, result.stdout[-2000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def no_conll_data(tmp_path_factory):
    """A data directory with everything the default study reads, and no CoNLL-2003."""
    root = tmp_path_factory.mktemp("data")
    for name in NO_CONLL:
        (root / name).symlink_to(data_path(name), target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, no_conll_data):
    """A copy of the project whose assets step ran with its defaults and $SPACY_ELMO_DATA set; its
    output."""
    project = tmp_path_factory.mktemp("project")
    copy_project(project)
    result = spacy_project("run", "assets", ".", cwd=project, env=environment(no_conll_data))
    return project, result.stdout + result.stderr


@pytest.fixture()
def project(default_run):
    return default_run[0]


def test_default_study_fetches_uner_from_the_data_variable_and_no_conll(default_run):
    project, log = default_run
    assets = project / "project" / "assets"
    manifest = json.loads((project / "project" / "assets.json").read_text())["assets"]
    for asset in manifest:
        wanted = not asset["dest"].startswith("conll2003/")
        assert (assets / asset["dest"]).is_file() == wanted, asset["dest"]
    assert not (assets / "conll2003").exists()
    assert "downloading" not in log and "local    uner/en_ewt-ud-train.iob2" in log


def test_conll2003_without_conll_dir_says_what_to_set(project, no_conll_data):
    log = failure(
        spacy_project(
            "run",
            "assets",
            ".",
            "--vars.ner_data=conll2003",
            cwd=project,
            env=environment(no_conll_data),
            check=False,
        )
    )
    assert (
        "error: ner_data 'conll2003' needs your copy of CoNLL-2003" in log
        and "--vars.conll_dir=DIR" in log
    )
    # refused before fetching anything
    assert not (project / "project" / "assets" / "conll2003").exists()


def test_conll_dir_without_ner_data_conll2003_is_refused(project, no_conll_data):
    conll = data_path("conll2003")
    log = failure(
        spacy_project(
            "run",
            "assets",
            ".",
            f"--vars.conll_dir={conll}",
            cwd=project,
            env=environment(no_conll_data),
            check=False,
        )
    )
    assert "add --vars.ner_data=conll2003" in log


def test_conll2003_from_conll_dir(project, no_conll_data):
    conll = data_path("conll2003")
    result = spacy_project(
        "run",
        "assets",
        ".",
        "--vars.ner_data=conll2003",
        f"--vars.conll_dir={conll}",
        cwd=project,
        env=environment(no_conll_data),
    )
    assert (
        "local    conll2003/eng.testb" in result.stdout
        and "present  ud/en_ewt-ud-dev.conllu" in result.stdout
    )
    assert (project / "project" / "assets" / "conll2003" / "eng.train").is_file()


def test_a_missing_data_directory_is_named(tmp_path):
    copy_project(tmp_path)
    log = failure(
        spacy_project(
            "run", "assets", ".", cwd=tmp_path, env=environment(tmp_path / "nowhere"), check=False
        )
    )
    assert f"error: data_dir {tmp_path / 'nowhere'} is not a directory" in log


# ------------------------------------------------------------------------------------------
# download
@pytest.fixture()
def server(tmp_path):
    """A local web server for tmp_path/served: the public URLs, offline."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def served_project(tmp_path, server, contents):
    """A project copy whose assets.json lists `contents` (dest -> bytes, or None: no public URL) as
    served."""
    served, url = server
    assets = []
    for dest, data in contents.items():
        name = dest.replace("/", "_")
        if data is not None:
            (served / name).write_bytes(data)
        assets.append(
            {
                "dest": dest,
                "local": name,
                "sha256": hashlib.sha256(data or b"").hexdigest(),
                "url": f"{url}/{name}" if data is not None else None,
            }
        )
    project = tmp_path / "project"
    project.mkdir()
    copy_project(project)
    (project / "project" / "assets.json").write_text(json.dumps({"assets": assets}))
    return project


CONTENTS = {
    "ud/train.conllu": b"ud\n",
    "uner/train.iob2": b"uner\n",
    "lm/text.txt": b"text\n",
    "conll2003/eng.train": None,
}


def test_without_a_data_directory_the_assets_are_downloaded(tmp_path, server):
    project = served_project(tmp_path, server, CONTENTS)
    result = spacy_project("run", "assets", ".", cwd=project, env=environment())
    assets = project / "project" / "assets"
    for dest, data in CONTENTS.items():
        if data is not None:
            assert (assets / dest).read_bytes() == data and f"download {dest}" in result.stdout
    assert "downloading http://127.0.0.1" in result.stderr and not (assets / "conll2003").exists()


def test_a_download_with_the_wrong_sha256_is_refused_and_removed(tmp_path, server):
    project = served_project(tmp_path, server, CONTENTS)
    (server[0] / "lm_text.txt").write_bytes(b"tampered\n")
    log = failure(spacy_project("run", "assets", ".", cwd=project, env=environment(), check=False))
    expected = hashlib.sha256(b"text\n").hexdigest()
    assert (
        f"error: lm/text.txt from {server[1]}/lm_text.txt: sha256 " in log
        and f"the expected {expected}" in log
    )
    assert sorted(p.name for p in (project / "project" / "assets" / "lm").iterdir()) == []


def test_a_failed_download_says_how_to_work_offline_and_leaves_nothing(tmp_path, server):
    project = served_project(tmp_path, server, CONTENTS)
    (server[0] / "uner_train.iob2").unlink()
    log = failure(spacy_project("run", "assets", ".", cwd=project, env=environment(), check=False))
    assert (
        f"error: cannot download {server[1]}/uner_train.iob2 (HTTP Error 404" in log
        and "$SPACY_ELMO_DATA" in log
    )
    assert list((project / "project" / "assets" / "uner").iterdir()) == []


def test_unset_data_dir_reads_the_data_beside_the_repository(tmp_path):
    """With no data_dir and no $SPACY_ELMO_DATA, a checkout with ../shared/data beside it works
    offline."""
    if not (REPO.parent / "shared" / "data").is_dir():
        pytest.skip("no data directory beside the repository (the test reads it from there)")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "project.scripts.fetch_assets",
            "--out",
            str(tmp_path),
            "--only",
            "ud",
        ],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "copying from" in done.stdout and any((tmp_path / "ud").iterdir())


def test_a_file_missing_from_the_data_directory_is_named_when_it_cannot_be_downloaded(
    tmp_path, server
):
    """data_dir set but lacking one file, which cannot be downloaded either: the error names the
    file missing from data_dir (not "set data_dir", which is set)."""
    project = served_project(tmp_path, server, CONTENTS)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("ud_train.conllu", "lm_text.txt"):
        (data_dir / name).write_bytes((server[0] / name).read_bytes())
    (server[0] / "uner_train.iob2").unlink()
    log = failure(
        spacy_project("run", "assets", ".", cwd=project, env=environment(data_dir), check=False)
    )
    assert (
        f"error: {data_dir / 'uner_train.iob2'} not found (the local file of uner/train.iob2" in log
    )
    assert f"cannot download {server[1]}/uner_train.iob2 (HTTP Error 404" in log
    assert "set data_dir" not in log
