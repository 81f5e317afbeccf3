"""The state policy object: parsed where it enters, equal to its name, and the one rule of what it
allows."""

from __future__ import annotations

import json
import pickle

import pytest

from spacy_elmo import ElmoConfigError, load_bilm
from spacy_elmo.bilm import STATE_POLICIES, StatePolicy, check_state_policy


def test_a_policy_is_its_name():
    for name in ("warm", "zero", "carry"):
        policy = StatePolicy.parse(name)
        assert policy == name and {name: 1}[policy] == 1 and f"{policy}" == str(policy) == name
        assert json.dumps(policy) == f'"{name}"' and pickle.loads(pickle.dumps(policy)) is policy
        assert StatePolicy.parse(policy) is policy is check_state_policy(name)
    assert STATE_POLICIES == ("warm", "zero", "carry")


@pytest.mark.parametrize("bad", ["Warm", "", None, 1, ["warm"]])
def test_anything_else_is_refused_where_it_enters(bad):
    with pytest.raises(ElmoConfigError, match="unknown state policy"):
        StatePolicy.parse(bad)


def test_carry_allows_no_reuse_regrouping_resume_or_pieces():
    for policy in StatePolicy:
        allowed = {
            policy.allows_reuse,
            policy.allows_regrouping,
            policy.allows_resume,
            policy.allows_pieces,
        }
        assert allowed == {policy is not StatePolicy.CARRY}
    assert [p.warm_start for p in StatePolicy] == [True, False, False]


def test_the_embedder_takes_a_name_and_gives_the_object(fixture_dir):
    bilm = load_bilm(fixture_dir, state="zero")
    assert bilm.state_policy is StatePolicy.ZERO and bilm.state_policy == "zero"
    bilm.state_policy = "carry"
    assert bilm.state_policy is StatePolicy.CARRY
    with pytest.raises(ElmoConfigError):
        bilm.state_policy = "hot"


def test_the_old_name_of_the_network_warns(fixture_dir):
    bilm = load_bilm(fixture_dir)
    with pytest.warns(DeprecationWarning, match="ElmoEmbedder.network"):
        assert bilm.bilm is bilm.network
