"""A taint another controller adds between the remediator's read and its write is never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from gpuchain.kube.kinds import NODE, Kind
from gpuchain.remediation.controller import Remediator
from gpuchain.remediation.model import TAINT_KEY
from gpuchain.sim.remediation import run_scenario

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}


def test_concurrent_taint_survives_and_ours_lands_on_the_next_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = run_scenario("xid79")
    original = sim.cluster.patch
    raced = False

    def racing_patch(kind: Kind, name: str, patch: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        nonlocal raced
        if kind == NODE and "taints" in patch.get("spec", {}) and not raced:
            raced = True  # the node controller marks the node unreachable just before our write
            original(NODE, name=name, patch={"spec": {"taints": [UNREACHABLE]}})
        return original(kind, name=name, patch=patch, namespace=namespace)

    monkeypatch.setattr(sim.cluster, "patch", racing_patch)
    first = Remediator(sim.cluster).run_once()
    assert raced
    taint = next(o for o in first.outcomes if o.action.kind.value == "taint")
    assert taint.result != "done"
    assert sim.cluster.get(NODE, name="node-0")["spec"]["taints"] == [UNREACHABLE]

    Remediator(sim.cluster).run_once()
    keys = [t["key"] for t in sim.cluster.get(NODE, name="node-0")["spec"]["taints"]]
    assert keys == [UNREACHABLE["key"], TAINT_KEY]
