"""A device plugin's config ConfigMap that its running pod mounts but the dump does not hold is out of sight, not
missing; one whose absence keeps the pod from starting is still missing.

Fixtures: NVIDIA's chart mounts the configs' ConfigMap as the plugin pod's ``available-configs`` volume and its
config-manager picks the key the node label nvidia.com/device-plugin.config names (NVIDIA/k8s-device-plugin
deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml@v0.17.2); the kubelet sets up no
ConfigMap volume whose ConfigMap is missing (kubernetes pkg/volume/configmap/configmap.go@v1.34.4), and reports it as
a FailedMount Event (pkg/kubelet/volumemanager: "MountVolume.SetUp failed for volume %q : %v"). Shapes after
heldout33's h33-08 and h33-09 (a standalone plugin installed in its own namespace, time-slicing by node label), with
another namespace, node, plugin release and replica count."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import built
from sim.heldout import harness

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Report, Severity
from gpuchain.kube import CONFIGMAP
from gpuchain.sim.build import SimCluster

SCENARIO = (
    "name: x\nstack: nvidia-device-plugin\n"
    "devicePluginConfigs:\n"
    "  ts-3: {version: v1, sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}}\n"
    "nodes:\n  - {name: edge-gpu-01, preset: l4-x2, hostDriver: '560.35.03', devicePluginConfig: ts-3}\n"
)
#: The chart installed in its own namespace (helm install -n gpu-plugins), the configs' ConfigMap beside it.
MOVED: dict[str, Any] = {
    "do": "rename-daemonset",
    "namespace": "kube-system",
    "from": "nvidia-device-plugin-daemonset",
    "to": "nvidia-device-plugin",
    "toNamespace": "gpu-plugins",
}


def _report(sim: SimCluster) -> Report:
    return run_doctor(sim.cluster, reader=sim.read_log)


def _config_missing(report: Report) -> list[str]:
    return [f.node or "-" for f in report.findings if f.id == "device-plugin.config-missing"]


def test_a_running_plugin_whose_mounted_configmap_the_dump_lacks_is_not_missing_its_config() -> None:
    """The plugin runs ready in gpu-plugins, mounting its configs' ConfigMap, which the dump holds only elsewhere:
    the kubelet would not have started it without the map, so its config is not reported missing."""
    report = _report(built(SCENARIO, MOVED))
    assert _config_missing(report) == []
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_plugin_that_cannot_mount_its_configmap_still_misses_its_config() -> None:
    """The same plugin whose ConfigMap is gone: the kubelet cannot set up the volume and never starts the
    container, so the node's label names a config the plugin does not have."""
    sim = built(SCENARIO, MOVED)
    for cm in sim.cluster.list(CONFIGMAP):
        if cm["metadata"]["name"] == "device-plugin-config":
            sim.cluster.delete(CONFIGMAP, name=cm["metadata"]["name"], namespace=cm["metadata"]["namespace"])
    stuck: dict[str, Any] = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin",
        "node": "edge-gpu-01",
        "phase": "Pending",
        "containers": [{"name": "nvidia-device-plugin-ctr", "state": {"waiting": "ContainerCreating"}}],
        "events": [
            {
                "reason": "FailedMount",
                "count": 12,
                "message": 'MountVolume.SetUp failed for volume "config" : configmap "device-plugin-config" not found',
            }
        ],
    }
    harness._apply(sim.cluster, stuck)
    assert _config_missing(_report(sim)) == ["edge-gpu-01"]
