"""A pod on an NVIDIA runtime mode's RuntimeClass (nvidia-cdi, nvidia-legacy, nvidia-experimental) whose handler
k3s's or RKE2's containerd was never given. Sources: k3s-io/k3s pkg/agent/containerd/nvidia.go@2570a9b (the
autodetect's potentialRuntimes: nvidia and nvidia-experimental only); k3s-io/k3s#11065 "Add the nvidia runtime cdi"
and its backports #11092-#11095 (nvidia-cdi registered from v1.31.2+k3s1, v1.30.6+k3s1, v1.29.10+k3s1,
v1.28.15+k3s1), as cited by tests/sim/heldout32 h32-01; containerd internal/cri/config/config.go@v2.2.9 ("no runtime
for %q is configured") in the kubelet's FailedCreatePodSandBox wording. Node names, versions, the handler and which
pod asks for it differ from the held-out cases (h32-01: the plugin on nvidia-cdi, k3s v1.31.1; h32-06: a workload on
nvidia-cdi, RKE2 v1.30.5).
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from sim.heldout9.harness import _apply as apply_edit

from gpuchain.doctor.links.runtime_handler import _cdi_release, missing_mode, mode_handler_repair
from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.doctor.node import DISTRIBUTIONS, KUBEADM
from gpuchain.kube import POD, RUNTIME_CLASS

PLUGIN = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: gpu-7, preset: l4-x2, hostDriver: 550.90.07, "
    "distribution: {dist}}}\nworkloads:\n  - {{name: serve, namespace: default, count: 1}}\n"
)
K3S, RKE2 = (d for d in DISTRIBUTIONS if d is not KUBEADM)


def _sandbox(handler: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "gpu-7",
        "phase": "Pending",
        "containers": [{"name": "nvidia-device-plugin-ctr", "ready": False, "state": {"waiting": "ContainerCreating"}}],
        "events": [
            {
                "reason": "FailedCreatePodSandBox",
                "count": 4,
                "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
                f'runtime: no runtime for "{handler}" is configured',
            }
        ],
    }


def _on_class(handler: str, kubelet: str) -> list[Any]:
    """Edits in heldout9's words (the ``daemonset`` spec merge its loader adds)."""
    return [lambda sim, e=e: apply_edit(sim.cluster, e) for e in _class_edits(handler, kubelet)]


def _class_edits(handler: str, kubelet: str) -> list[dict[str, Any]]:
    return [
        {
            "do": "daemonset",
            "namespace": "kube-system",
            "name": "nvidia-device-plugin-daemonset",
            "spec": {"template": {"spec": {"runtimeClassName": handler}}},
        },
        {
            "do": "node",
            "node": "gpu-7",
            "capacity": {"nvidia.com/gpu": None},
            "allocatable": {"nvidia.com/gpu": None},
            "nodeInfo": {"kubeletVersion": kubelet},
        },
    ]


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR and f.node == "gpu-7"]


def test_k3s_plugin_on_nvidia_cdi_is_the_toolkit_with_the_release_of_its_minor() -> None:
    report = diagnosed(PLUGIN.format(dist="k3s"), *_on_class("nvidia-cdi", "v1.29.9+k3s1"), _sandbox("nvidia-cdi"))
    (found,) = _errors(report)
    assert found.id == "toolkit.runtime-not-configured" and found.link == "toolkit"
    assert "'nvidia-cdi' runtime handler" in found.cause
    assert "v1.29.10+k3s1" in found.fix and "k3s-io/k3s#11065" in found.fix
    assert "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl" in found.fix
    assert "runtimeClassName: nvidia " in found.fix
    assert "nvidia-ctk runtime configure" not in found.fix


def test_rke2_nvidia_legacy_gets_the_template_not_a_release() -> None:
    report = diagnosed(
        PLUGIN.format(dist="rke2"), *_on_class("nvidia-legacy", "v1.31.4+rke2r1"), _sandbox("nvidia-legacy")
    )
    (found,) = _errors(report)
    assert found.id == "toolkit.runtime-not-configured"
    assert "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl" in found.fix
    assert "nvidia-container-runtime.legacy" in found.fix and "rke2-killall.sh" in found.fix
    # No release is known to register nvidia-legacy: none is offered.
    assert "#11065" not in found.fix


@pytest.mark.parametrize("handler", ["kata-qemu", "runsc"])
def test_a_non_nvidia_handler_stays_on_the_node_link(handler: str) -> None:
    report = diagnosed(PLUGIN.format(dist="k3s"), *_on_class(handler, "v1.30.4+k3s1"), _sandbox(handler))
    ids = {(f.id, f.link) for f in _errors(report)}
    assert ("node.sandbox-failed", "node") in ids
    assert not any(f.link == "toolkit" for f in _errors(report))


def test_kubeadm_nvidia_cdi_is_the_toolkit_with_its_own_containerd_repair() -> None:
    report = diagnosed(PLUGIN.format(dist="kubeadm"), *_on_class("nvidia-cdi", "v1.31.1"), _sandbox("nvidia-cdi"))
    (found,) = _errors(report)
    assert found.id == "toolkit.runtime-not-configured"
    assert "config.toml.tmpl" not in found.fix and "#11065" not in found.fix


def test_a_k3s_plugin_serving_on_nvidia_cdi_stays_quiet() -> None:
    report = diagnosed(PLUGIN.format(dist="k3s"), *_on_class("nvidia-cdi", "v1.31.2+k3s1")[:1])
    assert _errors(report) == []


def test_the_handler_and_the_release_are_read_from_the_words() -> None:
    assert missing_mode('failed to get sandbox runtime: no runtime for "nvidia-cdi" is configured') == "nvidia-cdi"
    assert missing_mode('no runtime for \\"nvidia-experimental\\" is configured') == "nvidia-experimental"
    assert missing_mode('no runtime for "nvidia" is configured') == ""  # the plain handler: its own repair
    assert missing_mode('no runtime for "kata" is configured') == ""
    assert _cdi_release(K3S, "v1.28.9+k3s1") == "v1.28.15+k3s1"
    assert _cdi_release(RKE2, "v1.30.5+rke2r1") == "v1.30.6+rke2r1"
    assert "v1.31.2+k3s1" in _cdi_release(K3S, "")
    assert mode_handler_repair(KUBEADM, "nvidia-cdi") is None
    assert mode_handler_repair(K3S, "kata") is None


def test_a_workload_on_nvidia_cdi_beside_a_running_plugin_is_the_missing_handler_first() -> None:
    """The plugin runs on the nvidia RuntimeClass (so the kubelet found it, even where the snapshot lists no
    RuntimeClass); a workload on nvidia-cdi gets no sandbox: the handler, not the class, is what stops pods now."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "infer-0", "namespace": "apps", "labels": {"app": "infer"}},
        "spec": {
            "nodeName": "gpu-7",
            "runtimeClassName": "nvidia-cdi",
            "containers": [
                {"name": "infer", "image": "example/infer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "infer",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        },
    }
    edits = [
        {
            "do": "daemonset",
            "namespace": "kube-system",
            "name": "nvidia-device-plugin-daemonset",
            "spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}},
        },
        {"do": "node", "node": "gpu-7", "nodeInfo": {"kubeletVersion": "v1.28.11+rke2r1"}},
        {"do": "create", "object": pod},
        {
            **_sandbox("nvidia-cdi"),
            "daemonset": "infer",
            "namespace": "apps",
            "containers": [{"name": "infer", "ready": False, "state": {"waiting": "ContainerCreating"}}],
        },
    ]

    def no_class(sim: Any) -> None:  # the snapshot lists no RuntimeClass (as in h32-06)
        for rc in sim.cluster.list(RUNTIME_CLASS):
            sim.cluster.delete(RUNTIME_CLASS, name=rc["metadata"]["name"])
        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith("nvidia-device-plugin"):
                meta = p["metadata"]
                sim.cluster.patch(
                    POD, name=meta["name"], namespace=meta["namespace"], patch={"spec": {"runtimeClassName": "nvidia"}}
                )

    applied = [lambda sim, e=e: apply_edit(sim.cluster, e) for e in edits]
    report = diagnosed(PLUGIN.format(dist="rke2"), *applied, no_class)
    (found,) = _errors(report)
    assert found.id == "toolkit.runtime-not-configured"
    assert "v1.28.15+rke2r1" in found.fix and "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl" in found.fix
