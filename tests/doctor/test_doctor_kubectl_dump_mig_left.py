"""A plain ``kubectl cluster-info dump`` of a GPU Operator node left in MIG after its MIG manager was switched off:
the dump has no ClusterPolicy to say ``migManager.enabled: false``, but the operator deletes the DaemonSet of a state
the policy disables (NVIDIA/gpu-operator controllers/object_controls.go@v25.3.4 DaemonSet), so no MIG manager
DaemonSet beside a node that announces MIG devices and no whole GPU, while pods that select it wait for whole GPUs,
is the layout left from before, as live. Where the MIG manager runs, or nothing waits for a whole GPU, it is a node
kept in MIG on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from doctor.small_cluster import built

from gpuchain.doctor import Severity
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.sim.build import SimCluster

NODE = "a100-mig-3"
CLUSTER = (
    f"name: t\nstack: gpu-operator\nnodes:\n  - {{name: {NODE}, preset: a100-40gb-x8}}\n  - {{name: cpu, gpu: false}}\n"
)
LAYOUT = "all-3g.20gb"
#: The node as the device plugin leaves it under the mixed strategy: two 3g.20gb instances a GPU, no whole GPU.
CARVED = {"nvidia.com/gpu": None, "nvidia.com/mig-3g.20gb": "16"}
NO_MANAGER = {"do": "delete-daemonset", "namespace": "gpu-operator", "name": "nvidia-mig-manager"}


def _carved() -> dict[str, Any]:
    return {
        "do": "node",
        "node": NODE,
        "labels": {"nvidia.com/mig.config": LAYOUT},
        "capacity": CARVED,
        "allocatable": CARVED,
    }


def _waiting_for_a_whole_gpu(sim: SimCluster) -> None:
    """A batch pod that selects the node and asks for a whole GPU, Pending on Insufficient nvidia.com/gpu."""
    message = (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."
    )
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "render-0", "namespace": "batch"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "containers": [
                    {
                        "name": "render",
                        "image": "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            },
        }
    )


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def test_mig_left_on_after_the_manager_daemonset_is_gone_is_named_from_a_kubectl_dump(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, NO_MANAGER, _carved(), _waiting_for_a_whole_gpu), tmp_path)
    (left,) = [f for f in report.findings if f.id == "mig.left-on"]
    assert left.severity is Severity.ERROR and left.node == NODE
    assert "all-disabled" in left.fix and any("no nvidia-mig-manager DaemonSet" in e for e in left.evidence)


def test_mig_kept_on_by_a_running_manager_is_not_left_on(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, _carved(), _waiting_for_a_whole_gpu), tmp_path)
    assert "mig.left-on" not in {f.id for f in report.findings}


def test_a_carved_node_nothing_waits_on_is_quiet_in_a_kubectl_dump(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, NO_MANAGER, _carved()), tmp_path)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
