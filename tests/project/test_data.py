"""The project's data scripts: assets from a local directory (offline, sha256-checked) and
conversion."""

import json

import pytest
import spacy
from spacy.tokens import DocBin

from project.scripts import convert_data, fetch_assets

from ..helpers import REPO, data_path


def test_every_asset_is_in_the_local_data_directory_with_its_checksum(tmp_path):
    data_dir = data_path()
    fetch_assets.main(["--data-dir", str(data_dir), "--out", str(tmp_path), "--only", "uner"])
    fetch_assets.main(
        [
            "--data-dir",
            str(data_dir),
            "--out",
            str(tmp_path),
            "--ner-data",
            "conll2003",
            "--only",
            "conll2003",
        ]
    )
    manifest = json.loads((REPO / "project" / "assets.json").read_text())["assets"]
    for asset in manifest:
        local = asset["local"] if isinstance(asset["local"], list) else [asset["local"]]
        assert all((data_dir / name).is_file() for name in local), local
        if asset["dest"].split("/")[0] in ("uner", "conll2003"):
            assert fetch_assets.sha256_file(tmp_path / asset["dest"]) == asset["sha256"]
            assert fetch_assets.in_place(asset, tmp_path)
        assert asset["url"] or asset["dest"].startswith("conll2003/")


def test_checksum_mismatch_is_refused(tmp_path):
    local = tmp_path / "data" / "x.txt"
    local.parent.mkdir()
    local.write_text("tampered\n")
    asset = {"dest": "lm/x.txt", "local": "x.txt", "sha256": "0" * 64, "url": None}
    with pytest.raises(SystemExit, match=f"error: lm/x.txt from {local}: sha256 .* does not match"):
        fetch_assets.fetch(asset, [local], tmp_path / "out")
    assert list((tmp_path / "out" / "lm").iterdir()) == []


def test_a_damaged_gzip_file_is_named(tmp_path):
    local = tmp_path / "x.txt.gz"
    local.write_bytes(b"not gzip")
    asset = {"dest": "lm/x.txt", "local": "x.txt.gz", "sha256": "0" * 64, "url": None}
    with pytest.raises(SystemExit, match=f"error: cannot read {local}: Not a gzipped file"):
        fetch_assets.fetch(asset, [local], tmp_path / "out")
    assert list((tmp_path / "out" / "lm").iterdir()) == []


def _docs(path):
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


def test_convert_ud_dev(tmp_path):
    data_dir = data_path()
    fetch_assets.main(["--data-dir", str(data_dir), "--out", str(tmp_path), "--only", "ud"])
    n = convert_data.convert(
        "conllu", tmp_path / "ud" / "en_ewt-ud-dev.conllu", tmp_path / "dev.spacy"
    )
    docs = _docs(tmp_path / "dev.spacy")
    assert n == len(docs) == 2001
    assert docs[0].text == "From the AP comes this story :"
    assert [t.tag_ for t in docs[0]] == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]
    assert all(doc[0].is_sent_start for doc in docs)
    subset = convert_data.convert(
        "conllu",
        tmp_path / "ud" / "en_ewt-ud-dev.conllu",
        tmp_path / "s.spacy",
        fraction=0.1,
        seed=1,
    )
    assert subset == 200
    convert_data.convert(
        "conllu",
        tmp_path / "ud" / "en_ewt-ud-dev.conllu",
        tmp_path / "t.spacy",
        fraction=0.1,
        seed=2,
    )
    assert [d.text for d in _docs(tmp_path / "s.spacy")] != [
        d.text for d in _docs(tmp_path / "t.spacy")
    ]


def test_convert_uner_dev_matches_its_statistics(tmp_path):
    source = tmp_path / "dev.iob2"
    fetch_assets.copy_local([data_path("uner_english_ewt", "en_ewt-ud-dev.iob2.gz")], source)
    stats = json.loads(data_path("uner_english_ewt", "en_ewt-ud-dev.stats.json").read_text())
    convert_data.convert("iob2", source, tmp_path / "dev.spacy")
    docs = _docs(tmp_path / "dev.spacy")
    assert len(docs) == stats["num_sentences"]
    assert sum(len(d) for d in docs) == stats["num_tokens"]
    labels = {}
    for doc in docs:
        for ent in doc.ents:
            labels[ent.label_] = labels.get(ent.label_, 0) + 1
    assert labels == stats["label_distribution"]


def test_convert_conll2003_iob1(tmp_path):
    source = tmp_path / "eng.testa"
    fetch_assets.copy_local([data_path("conll2003", "eng.testa.gz")], source)
    convert_data.convert("conll03", source, tmp_path / "a.spacy")
    docs = _docs(tmp_path / "a.spacy")
    assert len(docs) == 3250
    assert {e.label_ for d in docs for e in d.ents} == {"PER", "ORG", "LOC", "MISC"}


def test_iob1_to_iob2():
    assert convert_data.to_iob2(["I-PER", "I-PER", "I-LOC", "O", "I-ORG", "B-ORG"]) == [
        "B-PER",
        "I-PER",
        "B-LOC",
        "O",
        "B-ORG",
        "B-ORG",
    ]


def test_a_missing_or_malformed_data_file_is_one_error_line_naming_it(tmp_path):
    """`convert_data` on a file that is not there, or with a line short of the columns it reads
    (a tab lost, say), stops with one `error:` line naming the file and the line."""
    missing = tmp_path / "missing.conllu"
    with pytest.raises(SystemExit) as stop:
        convert_data.main(["conllu", str(missing), str(tmp_path / "x.spacy")])
    assert str(stop.value) == f"error: cannot read {missing}: No such file or directory"
    token = "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_"
    for kind, text, line in (
        ("iob2", "# sent_id = 1\n1\tThe\tO\n2\tcat\n", 3),
        ("conll03", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ\n", 4),
        ("conllu", f"# text = The cat\n{token}\n2\tcat\tcat\tNOUN\n", 3),
    ):
        source = tmp_path / f"bad.{kind}"
        source.write_text(text, encoding="utf-8")
        with pytest.raises(SystemExit) as stop:
            convert_data.main([kind, str(source), str(tmp_path / "x.spacy")])
        message = str(stop.value)
        assert message.startswith(f"error: {source}, line {line}: ") and "\n" not in message
        assert "column(s), where" in message, message
