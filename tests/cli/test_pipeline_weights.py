"""A trained spaCy pipeline directory (`nlp.to_disk`, `spacy train`'s model-best) wherever weights
are asked for: `info`, `convert` and `embed --weights` (and `load_bilm`) use its `elmo` component's
biLM and say which; a pipeline with no or two `elmo` components is one error (issue 34 item 9)."""

from __future__ import annotations

import json
import shutil
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
import spacy
import srsly
import torch

from spacy_elmo import ElmoFileError, load_bilm

from ..helpers import SENTS, one_error_line, read_output, run_cli, write_lines


@pytest.fixture(scope="module")
def pipeline_dir(fixture_dir, tmp_path_factory):
    """A pipeline of a sentencizer and an `elmo` component (named `elmo`) on the fixture's weights,
    as saved."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(fixture_dir), "model": {"state": "zero"}})
    nlp.initialize()
    path = tmp_path_factory.mktemp("pipeline") / "model-best"
    nlp.to_disk(path)
    return path


def test_load_bilm_reads_the_component_of_a_pipeline(pipeline_dir, fixture_dir):
    bilm = load_bilm(pipeline_dir)
    assert bilm.state_policy == "zero"  # the component's own setting, saved with it
    assert "component 'elmo'" in bilm.source and str(pipeline_dir) in bilm.source
    for a, b in zip(bilm.embed(SENTS), load_bilm(fixture_dir, state="zero").embed(SENTS)):
        np.testing.assert_array_equal(a, b)


def test_info_of_a_pipeline_names_the_component(pipeline_dir, capsys):
    assert run_cli("info", pipeline_dir, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == f"biLM of component 'elmo' in {pipeline_dir}"
    assert report["output_dim"] == 32 and report["state_policy"] == "zero"
    assert {f["path"] for f in report["files"]} == {
        str(pipeline_dir / "config.cfg"),
        str(pipeline_dir / "elmo" / "model"),
    }
    assert run_cli("info", pipeline_dir) == 0
    assert f"biLM of component 'elmo' in {pipeline_dir}" in capsys.readouterr().out


def test_convert_of_a_pipeline(pipeline_dir, tmp_path, capsys):
    assert run_cli("convert", pipeline_dir, tmp_path / "own") == 0
    out = capsys.readouterr()
    assert f"biLM of component 'elmo' in {pipeline_dir}" in out.out + out.err
    for a, b in zip(load_bilm(tmp_path / "own").embed(SENTS), load_bilm(pipeline_dir).embed(SENTS)):
        np.testing.assert_array_equal(a, b)


def test_embed_with_a_pipeline_as_weights(pipeline_dir, tmp_path, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", [" ".join(s) for s in SENTS])
    assert (
        run_cli(
            "embed",
            corpus,
            tmp_path / "out.hdf5",
            "--weights",
            pipeline_dir,
            "--whitespace",
            "--no-progress",
        )
        == 0
    )
    assert f"biLM of component 'elmo' in {pipeline_dir}" in capsys.readouterr().err
    arrays, _, _ = read_output(tmp_path / "out.hdf5")
    for i, expected in enumerate(load_bilm(pipeline_dir).embed(SENTS)):
        np.testing.assert_allclose(arrays[str(i)], expected, atol=1e-6)


@pytest.mark.parametrize("n_elmo", [0, 2])
def test_a_pipeline_without_one_elmo_component_is_one_error(fixture_dir, tmp_path, capsys, n_elmo):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    for name in ("elmo", "elmo_b")[:n_elmo]:
        nlp.add_pipe("elmo", name=name, config={"weights": str(fixture_dir)})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipe")
    for command in (
        ["info", tmp_path / "pipe"],
        ["convert", tmp_path / "pipe", tmp_path / "out"],
        [
            "embed",
            write_lines(tmp_path / "c.txt", ["a b"]),
            tmp_path / "o.hdf5",
            "--weights",
            tmp_path / "pipe",
            "--whitespace",
            "--no-progress",
        ],
    ):
        assert run_cli(*command) == 1
        line = one_error_line(capsys.readouterr().err)
        assert str(tmp_path / "pipe") in line and "spaCy pipeline" in line
        assert (
            ("no elmo component" in line)
            if n_elmo == 0
            else ("2 elmo components (elmo, elmo_b)" in line)
        )
    with pytest.raises(ElmoFileError):
        load_bilm(tmp_path / "pipe")


def reframed(pipeline_dir, tmp_path, change) -> Path:
    """A copy of the pipeline whose `elmo/model` has thinc's framing changed by `change(msg)`."""
    copy = tmp_path / "reframed"
    shutil.copytree(pipeline_dir, copy)
    model = copy / "elmo" / "model"
    msg = srsly.msgpack_loads(model.read_bytes())
    change(msg)
    model.write_bytes(srsly.msgpack_dumps(msg))
    return copy


@pytest.mark.parametrize(
    "change",
    [
        lambda msg: msg["shims"][0].append(msg["shims"][0][0]),  # two shims
        lambda msg: msg.pop("nodes"),  # no nodes (another thinc)
        lambda msg: msg["nodes"].append(dict(msg["nodes"][0], index=1)),  # two nodes
        lambda msg: msg["shims"][0].clear(),  # no shim: no biLM
    ],
    ids=["two-shims", "no-nodes", "two-nodes", "no-shim"],
)
def test_a_model_file_spacy_cannot_load_is_refused_wherever_weights_are_read(
    pipeline_dir, tmp_path, capsys, change
):
    """thinc's framing is checked as spacy.load checks it: `load_bilm`, `info` and `convert` do not
    certify a pipeline spaCy refuses."""
    broken = reframed(pipeline_dir, tmp_path, change)
    with pytest.raises(ElmoFileError, match="elmo/model: not a serialized ELMo model"):
        spacy.load(broken)
    with pytest.raises(ElmoFileError, match="elmo/model: not a serialized ELMo model"):
        load_bilm(broken)
    assert run_cli("info", broken) == 1
    assert "elmo/model: not a serialized ELMo model" in one_error_line(capsys.readouterr().err)


def test_a_component_named_with_a_slash_reads_its_own_file(pipeline_dir, tmp_path):
    """`load_bilm` reads the file of the component the config names, as spacy.load does, not one of
    another path's last part."""
    copy = tmp_path / "slash"
    shutil.copytree(pipeline_dir, copy)
    (copy / "x").mkdir()
    shutil.move(copy / "elmo", copy / "x" / "elmo")
    config = (copy / "config.cfg").read_text(encoding="utf-8")
    (copy / "config.cfg").write_text(
        config.replace("[components.elmo", "[components.x/elmo").replace(
            '"sentencizer","elmo"', '"sentencizer","x/elmo"'
        ),
        encoding="utf-8",
    )
    (copy / "elmo").mkdir()  # another biLM where the last part of the name would lead
    (copy / "elmo" / "model").write_bytes(b"not this one")
    bilm = load_bilm(copy)
    assert "component 'x/elmo'" in bilm.source
    for a, b in zip(bilm.embed(SENTS), load_bilm(pipeline_dir).embed(SENTS)):
        np.testing.assert_array_equal(a, b)


def aged_as_7094a2e(pipeline_dir, tmp_path, state: str) -> Path:
    """A copy of the pipeline as 7094a2e saved it, its config's `model.state` `state`: a biLM
    message with no `state` nor `warm_state` (its `warm_h` / `warm_c` zeros, never computed)."""
    copy = reframed(pipeline_dir, tmp_path, lambda msg: None)
    model = copy / "elmo" / "model"
    msg = srsly.msgpack_loads(model.read_bytes())
    shim = srsly.msgpack_loads(msg["shims"][0][0])
    bilm = srsly.msgpack_loads(shim["state"])
    del bilm["state"], bilm["warm_state"]
    weights = torch.load(BytesIO(bilm["state_dict"]), weights_only=True)
    buf = BytesIO()
    torch.save({k: v.zero_() if k.startswith("warm_") else v for k, v in weights.items()}, buf)
    bilm["state_dict"] = buf.getvalue()
    msg["shims"][0][0] = srsly.msgpack_dumps({**shim, "state": srsly.msgpack_dumps(bilm)})
    model.write_bytes(srsly.msgpack_dumps(msg))
    config = (copy / "config.cfg").read_text(encoding="utf-8")
    assert 'state = "zero"' in config
    config = config.replace('state = "zero"', f"state = {state}")
    if "${vars." in state:  # a variable, which spaCy resolves
        config += '\n[vars]\nelmo_state = "zero"\n'
    (copy / "config.cfg").write_text(config)
    return copy


@pytest.mark.parametrize(
    "configured,policy",
    [('"zero"', "zero"), ('"carry"', "carry"), ("null", "warm"), ("${vars.elmo_state}", "zero")],
)
def test_a_pipeline_saved_with_no_state_policy_takes_the_one_its_config_gives(
    pipeline_dir, fixture_dir, tmp_path, capsys, configured, policy
):
    """A biLM saved with no state policy (7094a2e) has the one its config gives the component, as
    spacy.load gives it (null: the weights' own, warm), in load_bilm, info and convert (which named
    the warm-up text for a zero one); it was 'warm' whatever the config said."""
    old = aged_as_7094a2e(pipeline_dir, tmp_path, configured)
    assert spacy.load(old).get_pipe("elmo").bilm.state_policy == policy
    bilm = load_bilm(old)
    assert bilm.state_policy == policy
    if policy != "warm":  # (a warm one's state is what 7094a2e saved: zeros here)
        expected = load_bilm(fixture_dir, state=policy).embed(SENTS)
        for a, b in zip(bilm.embed(SENTS), expected):
            np.testing.assert_array_equal(a, b)
    assert run_cli("info", old, "--json") == 0
    assert json.loads(capsys.readouterr().out)["state_policy"] == policy
    if policy != "warm":
        assert run_cli("convert", old, tmp_path / "h", "--to", "hdf5") == 1
        line = one_error_line(capsys.readouterr().err)
        assert f"state policy is '{policy}'" in line and "warm-up text" not in line, line
