"""Classes of failure users report on the public trackers (issue 26), each on a small simulated cluster edited the way
the components leave it: the link the doctor names and the action that repairs. The report a class was read from and
the upstream source its facts stand on are named at each test."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


# -- the standalone plugin on k3s / RKE2, under runc ------------------------------------------------------------------
# Report: k3s-io/k3s#4070 (NVML fails in the plugin; the k3s side answers: keep k3s's config and give the pod
# runtimeClassName nvidia); k3s-io/k3s#9702 (the agent's --default-runtime). Source: k3s-io/k3s
# pkg/agent/containerd/runtimes.go (the nvidia runtime is added, not as the default). The plugin's lines:
# NVIDIA/k8s-device-plugin internal/plugin/manager/factory.go@v0.15.0 ("Incompatible platform detected") and
# cmd/nvidia-device-plugin/main.go@v0.17.1 ("No devices found. Waiting indefinitely.").

RUNC_LOG = (
    "I0101 00:00:00.000000       1 factory.go:107] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "I0101 00:00:00.000000       1 factory.go:107] Detected non-Tegra platform: /sys/devices/soc0/family file not found\n"
    "E0101 00:00:00.000000       1 factory.go:115] Incompatible platform detected\n"
    "E0101 00:00:00.000000       1 factory.go:116] If this is a GPU node, did you configure the NVIDIA Container "
    "Toolkit?\n"
    "I0101 00:00:00.000000       1 main.go:287] No devices found. Waiting indefinitely.\n"
)


def _plugin_under_runc(distribution: str) -> Report:
    scenario = (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: nas, hostDriver: 535.183.01, distribution: {distribution}}}\n"
    )
    running: dict[str, Any] = {"name": "nvidia-device-plugin-ctr", "state": {"running": True}}
    return diagnosed(scenario, no_gpus("nas"), plugin_pod("nas", running, RUNC_LOG))


def test_a_plugin_without_nvml_on_k3s_gets_the_nvidia_runtime_class_not_a_containerd_config_edit() -> None:
    (root,) = _roots(_plugin_under_runc("k3s"))
    assert (root.id, root.link, root.node) == ("toolkit.runtime-not-default", "toolkit", "nas")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.changes == {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}
    assert "default-runtime: nvidia in /etc/rancher/k3s/config.yaml" in root.fix
    assert "nvidia-ctk runtime configure" not in root.fix


def test_on_rke2_the_same_names_rke2s_config() -> None:
    (root,) = _roots(_plugin_under_runc("rke2"))
    assert root.link == "toolkit" and "/etc/rancher/rke2/config.yaml" in root.fix and "rke2-agent" in root.fix


def test_on_kubeadm_the_node_default_runtime_is_still_the_repair() -> None:
    (root,) = _roots(_plugin_under_runc("kubeadm"))
    assert root.link == "toolkit" and "--set-as-default" in root.fix
    assert root.action is not None and root.action.op is FixOp.NODE
