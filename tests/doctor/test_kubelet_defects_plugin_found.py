"""A device plugin that registered only the GPUs it found at its start (links/plugin_found.py): Google's GPU device
plugin lists /dev/nvidia<N> once when it starts and logs each ("Found Nvidia GPU %q",
GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go discoverGPUs); its releases since
GoogleCloudPlatform/container-engine-accelerators#110 look again every 10 s ("Found %v GPUs, while only %v are
registered", hasAdditionalGPUsInstalled), rolled out to the Kubernetes addon by kubernetes/kubernetes#77035. The
log lines are that wording; node names, machine types and versions are stand-ins."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import built, diagnosed
from doctor.test_doctor_pending_workloads import pending_pod

from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.model import Report
from gpuchain.doctor.snapshot import Snapshot, gather

#: A GKE node of an A100 machine type with 4 GPUs (cloud.google.com/compute/docs/gpus: a2-highgpu-4g), its pool's
#: label (so the type is GKE's own), as Google's plugin runs there.
GKE = "name: t\nstack: gke\nnodes:\n  - {name: g1, preset: t4-x4, labels: {cloud.google.com/gke-nodepool: pool-a}}\n"
FOUR = {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
INSUFFICIENT = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
PLUGIN_DS, PLUGIN_CTR = "nvidia-gpu-device-plugin-large-cos", "nvidia-gpu-device-plugin"


def _node(advertised: int, kubelet: str) -> dict[str, Any]:
    labels = {
        "node.kubernetes.io/instance-type": "a2-highgpu-4g",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }
    gpus = {"nvidia.com/gpu": advertised}
    return {
        "do": "node",
        "node": "g1",
        "labels": labels,
        "capacity": gpus,
        "allocatable": gpus,
        "nodeInfo": {"kubeletVersion": kubelet},
    }


def _plugin(log: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": PLUGIN_DS,
        "namespace": "kube-system",
        "node": "g1",
        "containers": [{"name": PLUGIN_CTR, "ready": True, "restarts": restarts, "state": {"running": True}}],
        "logs": {PLUGIN_CTR: log},
    }


def _found(*devices: str) -> str:
    """The plugin's start: each device file it found, then its registration (manager.go wording)."""
    lines = [f'I0611 08:00:01.2 1 manager.go:79] Found Nvidia GPU "{d}"' for d in devices]
    return "\n".join([*lines, "I0611 08:00:01.5 1 manager.go:185] device-plugin registered with the kubelet"])


def _every_log_read(*edits: Any) -> Report:
    """As a `kubectl cluster-info dump` reads it: every container's log there, not only the ones a live gather asks
    for (a running plugin on a node that announces GPUs is not one)."""
    sim = built(GKE, *edits)
    snap = gather(sim.cluster)
    logs = {}
    for pod in snap.pods:
        meta = pod["metadata"]
        for c in pod["spec"].get("containers") or []:
            text = sim.read_log(meta["namespace"], meta["name"], c["name"])
            if text:
                logs[(meta["namespace"], meta["name"], c["name"])] = text
    return diagnose(Snapshot(**{**snap.__dict__, "logs": logs}))


def test_a_plugin_whose_log_found_two_of_four_gpus_is_restarted_not_the_node() -> None:
    report = _every_log_read(
        _node(2, "v1.20.15-gke.100"), _plugin(_found("nvidia0", "nvidia1")), pending_pod("train", INSUFFICIENT, FOUR)
    )
    (found,) = [f for f in report.findings if f.id == "device-plugin.registered-at-start"]
    assert (found.link, found.node) == ("device-plugin", "g1")
    assert "node.gpus-missing" not in report.ids
    assert f"kube-system delete pod {PLUGIN_DS}" in found.fix
    assert "container-engine-accelerators#110" in found.fix and "nvidia-smi -L" in found.fix
    assert "2 of the node's 4 GPUs" in found.cause


def test_a_log_that_names_fewer_gpus_than_the_node_advertises_is_not_this() -> None:
    report = _every_log_read(
        _node(2, "v1.20.15-gke.100"), _plugin(_found("nvidia0")), pending_pod("train", INSUFFICIENT, FOUR)
    )
    assert "device-plugin.registered-at-start" not in report.ids and "node.gpus-missing" in report.ids


def test_a_plugin_that_looks_again_and_still_has_two_leaves_it_to_the_node() -> None:
    again = (
        _found("nvidia0", "nvidia1") + "\nI0611 08:00:11.5 1 manager.go:101] Found 2 GPUs, while only 2 are registered."
    )
    report = _every_log_read(_node(2, "v1.20.15-gke.100"), _plugin(again), pending_pod("train", INSUFFICIENT, FOUR))
    assert "device-plugin.registered-at-start" not in report.ids and "node.gpus-missing" in report.ids


def test_a_plugin_that_restarted_and_found_the_same_leaves_it_to_the_node() -> None:
    report = _every_log_read(
        _node(2, "v1.20.15-gke.100"),
        _plugin(_found("nvidia0", "nvidia1"), restarts=1),
        pending_pod("train", INSUFFICIENT, FOUR),
    )
    assert "device-plugin.registered-at-start" not in report.ids and "node.gpus-missing" in report.ids


def test_without_its_log_googles_plugin_before_115_is_still_the_plugin() -> None:
    """A live gather reads no log of a running plugin on a node that announces GPUs: the addon's plugin of a kubelet
    before 1.15 (kubernetes/kubernetes#77035 not in it) is the one that looked once."""
    report = diagnosed(GKE, _node(1, "v1.13.12-gke.8"), _plugin(""), pending_pod("train", INSUFFICIENT, FOUR))
    (found,) = [f for f in report.findings if f.id == "device-plugin.registered-at-start"]
    assert found.link == "device-plugin" and "1 of the node's 4 GPUs" in found.cause


def test_without_its_log_a_later_gke_leaves_a_short_node_to_the_node() -> None:
    report = diagnosed(GKE, _node(1, "v1.16.15-gke.4300"), _plugin(""), pending_pod("train", INSUFFICIENT, FOUR))
    assert "device-plugin.registered-at-start" not in report.ids and "node.gpus-missing" in report.ids


def test_a_gke_node_that_advertises_all_its_gpus_says_nothing() -> None:
    report = _every_log_read(_node(4, "v1.13.12-gke.8"), _plugin(_found("nvidia0", "nvidia1", "nvidia2", "nvidia3")))
    assert "device-plugin.registered-at-start" not in report.ids and "node.gpus-missing" not in report.ids
