"""Driver versions that follow the GPU Operator's NVIDIADriver resources, one per node pool, are no skew.

Each NVIDIADriver resource gets its own driver DaemonSet (owned by the resource, named nvidia-<type>-driver-<os>-<hash>)
selecting its pool; a cluster whose nodes each run the image of their own pool's DaemonSet runs two versions by
design (a warning that names the pools), while a node whose version is not its DaemonSet's image is still a skew."""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding
from gpuchain.kube import DAEMONSET
from gpuchain.sim.build import SimCluster

SCENARIO = (
    "name: t\nstack: gpu-operator\n"
    "policy: {driver: {version: '580.82.07'}}\n"
    "nodes:\n"
    "  - {name: infer-1, preset: l4-x2, driverVersion: '550.163.01', labels: {team: inference}}\n"
    "  - {name: train-1, preset: h100-80gb-x8, driverVersion: '580.82.07', labels: {team: training}}\n"
    "  - {name: train-2, preset: h100-80gb-x8, driverVersion: '{train2}', labels: {team: training}}\n"
)


def _pool(name: str, image: str, team: str, *, owned: bool) -> Callable[[SimCluster], None]:
    """The DaemonSet ``name`` made an NVIDIADriver resource's: its image, its pool's selector, and (``owned``) the
    resource as its controller, else only the operator's name for it."""

    def edit(sim: SimCluster) -> None:
        meta = {"ownerReferences": [{"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "name": team}]}
        spec = {
            "nodeSelector": {"nvidia.com/gpu.deploy.driver": "true", "team": team},
            "containers": [{"name": "nvidia-driver-ctr", "image": image}],
        }
        patch = {"metadata": meta if owned else {}, "spec": {"template": {"spec": spec}}}
        sim.cluster.patch(DAEMONSET, name=name, namespace="gpu-operator", patch=patch)

    return edit


def _skew(train2: str) -> Finding:
    report = diagnosed(
        SCENARIO.replace("{train2}", train2),
        {
            "do": "rename-daemonset",
            "namespace": "gpu-operator",
            "from": "nvidia-driver-daemonset",
            "to": "nvidia-gpu-driver-ubuntu24.04-5b8f6d7c4d",
            "nodes": ["infer-1"],
        },
        {
            "do": "rename-daemonset",
            "namespace": "gpu-operator",
            "from": "nvidia-driver-daemonset",
            "to": "nvidia-gpu-driver-ubuntu24.04-7c5d9f8b6",
        },
        _pool(
            "nvidia-gpu-driver-ubuntu24.04-5b8f6d7c4d",
            "nvcr.io/nvidia/driver:550.163.01-ubuntu24.04",
            "inference",
            owned=True,
        ),
        _pool(
            "nvidia-gpu-driver-ubuntu24.04-7c5d9f8b6",
            "nvcr.io/nvidia/driver:580.82.07-ubuntu24.04",
            "training",
            owned=False,
        ),
    )
    (found,) = [f for f in report.findings if f.id == "driver.version-skew"]
    return found


def test_versions_that_follow_their_pools_nvidiadriver_daemonsets_are_a_warning_naming_the_pools() -> None:
    found = _skew("580.82.07")
    assert found.severity is Severity.WARNING and not found.root and found.action is None
    assert (
        "DaemonSet nvidia-gpu-driver-ubuntu24.04-5b8f6d7c4d (team=inference): driver 550.163.01 on infer-1"
        in found.evidence
    )
    assert "(team=training): driver 580.82.07 on train-1, train-2" in " ".join(found.evidence)
    assert "NVIDIADriver" in found.fix


def test_a_node_whose_version_is_not_its_daemonsets_image_is_still_an_error() -> None:
    found = _skew("550.163.01")
    assert found.severity is Severity.ERROR and found.root
