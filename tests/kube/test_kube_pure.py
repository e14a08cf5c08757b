"""The pure parts of the kube layer: selectors, merge patches, the apply diff, PDB arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.kube import (
    diff_patch,
    kind_of,
    match_label_selector_object,
    match_labels,
    merge_patch,
    needs_apply,
    strategic_merge_patch,
)
from gpuchain.kube.errors import InvalidError, UnknownKindError
from gpuchain.kube.pdb import blocking_budget, disruptions_allowed
from gpuchain.kube.selectors import parse_field_selector


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a in (1, 2),b", {"a": "2", "b": "x"}, True),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {"a": "1"}, False),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert match_labels(selector, labels) is expected


def test_bad_selector_names_the_term() -> None:
    with pytest.raises(ValueError, match="a in"):
        match_labels("a in 1", {})


def test_field_selector_paths() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    assert parse_field_selector("spec.nodeName=n1,status.phase!=Failed")(pod)
    assert not parse_field_selector("spec.nodeName=n2")(pod)


@pytest.mark.parametrize(
    ("phase", "expected"),
    [("Running", True), ("Pending", True), ("Succeeded", False), ("Failed", False), (None, True)],
)
def test_field_selector_with_two_terms_on_one_field(phase: str | None, expected: bool) -> None:
    """The doctor's pod list: both terms on status.phase must hold (an absent field reads as "")."""
    pod = {"metadata": {"name": "p"}, "status": {"phase": phase} if phase else {}}
    assert parse_field_selector("status.phase!=Succeeded,status.phase!=Failed")(pod) is expected
    assert parse_field_selector(f"status.phase={phase or ''},status.phase!=Failed")(pod) is (phase != "Failed")


def test_field_selector_reads_booleans_and_numbers_as_the_api_writes_them() -> None:
    obj = {"spec": {"unschedulable": True, "replicas": 3}}
    assert parse_field_selector("spec.unschedulable=true,spec.replicas=3")(obj)
    assert not parse_field_selector("spec.unschedulable=false")(obj)
    assert parse_field_selector("spec.unschedulable.deeper=")(obj)  # a path through a scalar is absent


def test_structured_selector() -> None:
    sel = {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
    assert match_label_selector_object(sel, {"app": "x", "tier": "web"})
    assert not match_label_selector_object(sel, {"app": "x", "tier": "db"})
    assert not match_label_selector_object(None, {"app": "x"}), "a null selector selects nothing"
    assert match_label_selector_object({}, {"app": "x"}), "an empty selector selects everything"


def test_merge_patch_rfc7386() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"c": None, "d": 3}, "l": [2]}) == {
        "a": {"b": 1, "d": 3},
        "l": [2],
    }


def test_strategic_merge_patch_merges_conditions_by_type() -> None:
    node = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "GPUHealthy", "status": "True", "x": 1}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        }
    }
    patch = {
        "status": {
            "conditions": [{"type": "GPUHealthy", "status": "False", "x": None}, {"type": "Other", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "n1"}],
        }
    }
    out = strategic_merge_patch(node, patch=patch)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "GPUHealthy", "status": "False"},
        {"type": "Other", "status": "True"},
    ]
    assert out["status"]["addresses"] == [{"type": "Hostname", "address": "n1"}], "no merge key: replaced"
    assert node["status"]["conditions"][1]["status"] == "True", "the input is not modified"
    gone = strategic_merge_patch(out, patch={"status": {"conditions": [{"type": "Other", "$patch": "delete"}]}})
    assert [c["type"] for c in gone["status"]["conditions"]] == ["Ready", "GPUHealthy"]
    assert strategic_merge_patch({}, patch={"status": {"conditions": [{"type": "A", "status": "True"}]}}) == {
        "status": {"conditions": [{"type": "A", "status": "True"}]}
    }
    with pytest.raises(InvalidError, match="status.conditions: every element needs its merge key 'type'"):
        strategic_merge_patch(node, patch={"status": {"conditions": [{"status": "True"}]}})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=10,
)
json_docs = st.dictionaries(st.text(max_size=2), json_values.filter(lambda v: v is not None), max_size=4)


@given(json_docs, json_docs)
def test_diff_patch_round_trips(old: dict, new: dict) -> None:
    def no_nulls(v: object) -> object:
        if isinstance(v, dict):
            return {k: no_nulls(x) for k, x in v.items() if x is not None}
        return v

    old, new = no_nulls(old), no_nulls(new)  # type: ignore[assignment]
    assert merge_patch(old, diff_patch(old, new)) == new
    assert (diff_patch(old, new) == {}) == (old == new)


def test_needs_apply_ignores_server_fields_and_defaults() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "1"}},
        "data": {"k": "v"},
    }
    live = {
        **desired,
        "metadata": {"name": "c", "labels": {"a": "1", "extra": "x"}, "uid": "u", "resourceVersion": "7"},
    }
    assert not needs_apply(desired, live)
    assert needs_apply({**desired, "data": {"k": "w"}}, live)
    assert needs_apply(desired, None)


def test_unknown_kind_says_how_to_register() -> None:
    with pytest.raises(UnknownKindError, match="register_kind"):
        kind_of({"apiVersion": "example.com/v1", "kind": "Widget"})


def _pod(name: str, phase: str = "Running", ready: bool = True) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "t"}},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _pdb(**spec: object) -> dict:
    return {"metadata": {"name": "b", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "t"}}, **spec}}


def test_pdb_arithmetic() -> None:
    pods = [_pod("a"), _pod("b"), _pod("c", ready=False), _pod("d")]
    assert disruptions_allowed(_pdb(minAvailable=2), pods) == 1
    assert disruptions_allowed(_pdb(minAvailable="50%"), pods) == 1
    assert disruptions_allowed(_pdb(maxUnavailable=1), pods) == 0, "one is already unhealthy"
    assert disruptions_allowed(_pdb(maxUnavailable="50%"), pods) == 1
    assert blocking_budget(_pod("x", phase="Pending"), pdbs=[_pdb(maxUnavailable=0)], pods=pods) is None
    assert blocking_budget(pods[0], pdbs=[_pdb(maxUnavailable=0)], pods=pods) is not None
