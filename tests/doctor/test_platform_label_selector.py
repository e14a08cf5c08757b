"""A device plugin DaemonSet kept to one node pool by the platform's own pool label (AKS
``kubernetes.azure.com/agentpool``), and a second GPU pool added: the repair widens the DaemonSet's selector to the
new pool's value, not a relabel of the node with the other pool's name, which the platform keeps (shaped after
tests/sim/heldout61 h61-03 on other pools, GPUs and a required node affinity as well as a nodeSelector)."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.sim_fixes import _merge
from doctor.small_cluster import built, diagnosed

from gpuchain.doctor.model import FixOp
from gpuchain.doctor.placement import blocker
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.sim.build import SimCluster

POOL = "kubernetes.azure.com/agentpool"
SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: aks-a100-1, preset: a100-80gb-x8, labels: {kubernetes.azure.com/agentpool: a100}}\n"
    "  - {name: aks-h100-1, preset: h100-80gb-x8, labels: {kubernetes.azure.com/agentpool: h100}}\n"
)
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["a100"]}]}]
        }
    }
}


def _silent(node: str) -> dict[str, Any]:
    """An edit: ``node`` announces no GPU, no plugin registered there."""
    return {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": 0}, "allocatable": {"nvidia.com/gpu": 0}}


def _kept_to_a100(shape: str) -> Any:
    """An edit: the plugin DaemonSet selects pool a100 (by ``shape``), and its pod on the h100 node is gone."""

    def edit(sim: SimCluster) -> None:
        (ds,) = [d for d in sim.cluster.list(DAEMONSET) if "device-plugin" in d["metadata"]["name"]]
        spec = {"nodeSelector": {POOL: "a100"}} if shape == "nodeSelector" else {"affinity": AFFINITY}
        sim.cluster.patch(
            DAEMONSET,
            name=ds["metadata"]["name"],
            namespace=ds["metadata"]["namespace"],
            patch={"spec": {"template": {"spec": spec}}},
        )
        for pod in sim.cluster.list(POD, namespace=ds["metadata"]["namespace"]):
            if pod["spec"].get("nodeName") == "aks-h100-1" and "device-plugin" in pod["metadata"]["name"]:
                sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])

    return edit


@pytest.mark.parametrize("shape", ["nodeSelector", "affinity"])
def test_a_pool_label_selector_is_widened_to_the_new_pool(shape: str) -> None:
    report = diagnosed(SCENARIO, _kept_to_a100(shape), _silent("aks-h100-1"))
    (found,) = [f for f in report.findings if f.id == "operand.not-scheduled"]
    assert found.node == "aks-h100-1" and found.action is not None
    assert found.action.op is FixOp.PATCH_DAEMONSET and "label node" not in found.fix
    # The patch, merged as kubectl's merge patch does, places the DaemonSet on both pools.
    sim = built(SCENARIO, _kept_to_a100(shape), _silent("aks-h100-1"))
    (ds,) = [d for d in sim.cluster.list(DAEMONSET) if "device-plugin" in d["metadata"]["name"]]
    patched = _merge(ds, found.action.changes)
    assert all(blocker(patched, n) is None for n in sim.cluster.list(NODE))


def test_a_label_of_the_users_own_is_still_put_on_the_node() -> None:
    def own(sim: SimCluster) -> None:
        (ds,) = [d for d in sim.cluster.list(DAEMONSET) if "device-plugin" in d["metadata"]["name"]]
        sim.cluster.patch(
            DAEMONSET,
            name=ds["metadata"]["name"],
            namespace=ds["metadata"]["namespace"],
            patch={"spec": {"template": {"spec": {"nodeSelector": {"gpu": "on"}}}}},
        )
        for pod in sim.cluster.list(POD, namespace=ds["metadata"]["namespace"]):
            if "device-plugin" in pod["metadata"]["name"]:
                sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])

    report = diagnosed(SCENARIO, own, _silent("aks-a100-1"), _silent("aks-h100-1"))
    found = [f for f in report.findings if f.id == "operand.not-scheduled"]
    assert found and all(f.action is not None and f.action.op is FixOp.LABEL_NODE for f in found)
