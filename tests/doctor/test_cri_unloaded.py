"""containerd running without its CRI plugin after the NVIDIA runtime was written into its config: the toolkit link,
with the repair that gives the CRI plugin a config it loads (gpuchain.doctor.cri_unloaded).

Fixtures: the kubelet's Event is its own wording (kubernetes pkg/kubelet/kuberuntime/kuberuntime_sandbox.go
"Failed to create pod sandbox: %v") around gRPC's answer for a service nobody registered (grpc/grpc-go server.go
"unknown service %v", code Unimplemented); the CRI service name is runtime.v1.RuntimeService from Kubernetes 1.26
(k8s.io/cri-api pkg/apis/runtime/v1) and runtime.v1alpha2.RuntimeService before; containerd's refusal is
pkg/cri/config/config.go@v1.7.24's. The case it generalises is tests/sim/heldout34 h34-02 (a kind worker, containerd
1.7.24, the device plugin on RuntimeClass nvidia); these use other node names, containerd releases and stacks."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, no_gpus
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity, catalog
from gpuchain.doctor.model import Report

CRI_V1 = (
    "Failed to create pod sandbox: rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService"
)
CRI_V1ALPHA2 = CRI_V1.replace("runtime.v1.", "runtime.v1alpha2.")
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}


def _plugin(node: str, runtime: str) -> str:
    return (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: {node}, preset: l4-x2, hostDriver: 550.127.05, containerRuntime: '{runtime}'}}\n"
    )


def _on_runtime_class(sim: Any) -> None:
    """The device plugin's DaemonSet on RuntimeClass nvidia (its chart's runtimeClassName), and that class."""
    ninth._apply(sim.cluster, {"do": "create", "object": RUNTIME_CLASS})
    spec = {"template": {"spec": {"runtimeClassName": "nvidia"}}}
    ninth._apply(
        sim.cluster,
        {"do": "daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "spec": spec},
    )


def _no_sandbox(daemonset: str, node: str, event: str, container: str, namespace: str | None = None) -> dict[str, Any]:
    edit: dict[str, Any] = {
        "do": "pod",
        "daemonset": daemonset,
        "node": node,
        "phase": "Pending",
        "containers": [{"name": container, "state": {"waiting": "ContainerCreating"}}],
        "events": [{"reason": "FailedCreatePodSandBox", "message": event, "count": 9}],
    }
    if namespace:
        edit["namespace"] = namespace
    return edit


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_the_catalog_knows_the_cri_services_absence_and_containerds_refusals() -> None:
    assert catalog.find(CRI_V1, "grpc.cri-unimplemented") is not None
    assert catalog.find(CRI_V1ALPHA2, "grpc.cri-unimplemented") is not None
    # containerd 1.7's server log line (services/server/server.go) and 2.0's, whose plugin id is a field.
    v17 = 'level=warning msg="failed to load plugin io.containerd.grpc.v1.cri" error="invalid plugin config: x"'
    v20 = 'level=warning msg="failed to load plugin" error="invalid plugin config: x" id=io.containerd.cri.v1.runtime'
    assert catalog.find(v17, "containerd.cri-plugin-not-loaded") is not None
    assert catalog.find(v20, "containerd.cri-plugin-not-loaded") is not None
    # The device plugin API's own unknown service stays the registration entry's.
    assert catalog.find("unknown service v1beta1.Registration", "grpc.cri-unimplemented") is None


def test_a_worker_whose_containerd_serves_no_cri_under_an_nvidia_runtime_class_is_the_toolkit() -> None:
    node = "gpu-lab-worker3"
    event = _no_sandbox("nvidia-device-plugin-daemonset", node, CRI_V1, "nvidia-device-plugin-ctr")
    report = diagnosed(_plugin(node, "containerd://1.7.22"), no_gpus(node), _on_runtime_class, event)
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.cri-unloaded", "toolkit", node)
    assert "--config-source=command" in root.fix and 'io.containerd.grpc.v1.cri".containerd.runtimes.runc]' in root.fix
    assert "catalog: grpc.cri-unimplemented" in " ".join(root.evidence)


def test_containerd_2_gets_its_cri_runtime_plugins_section_and_an_older_kubelets_v1alpha2_is_read_alike() -> None:
    node = "a100-node-7"
    event = _no_sandbox("nvidia-device-plugin-daemonset", node, CRI_V1ALPHA2, "nvidia-device-plugin-ctr")
    report = diagnosed(_plugin(node, "containerd://2.0.4"), no_gpus(node), _on_runtime_class, event)
    (root,) = _roots(report)
    assert root.id == "toolkit.cri-unloaded"
    assert 'plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]' in root.fix


def test_the_operators_toolkit_told_to_read_the_file_is_switched_to_containerds_dump() -> None:
    # The toolkit's installer reads RUNTIME_CONFIG_SOURCE from v1.18.0 (NVIDIA/nvidia-container-toolkit
    # cmd/nvidia-ctk-installer/container/runtime/runtime.go@v1.18.0, default "command,file").
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: w2, preset: a100-40gb-x8, containerRuntime: 'containerd://1.7.27'}\n"
    env = [{"name": "RUNTIME_CONFIG_SOURCE", "value": "file"}]
    event = _no_sandbox("nvidia-device-plugin-daemonset", "w2", CRI_V1, "nvidia-device-plugin", "gpu-operator")

    def policy(sim: Any) -> None:
        ninth._apply(sim.cluster, {"do": "policy", "spec": {"toolkit": {"env": env}}})

    (root,) = _roots(diagnosed(scenario, policy, no_gpus("w2"), event))
    assert (root.id, root.link, root.node) == ("toolkit.cri-unloaded", "toolkit", "w2")
    assert "RUNTIME_CONFIG_SOURCE" in root.fix and '"value":"command"' in root.fix.replace(" ", "")


def test_no_cri_on_a_node_no_nvidia_runtime_was_written_to_stays_the_node_with_containerds_repair() -> None:
    # The same answer from containerd on a node whose pods name no NVIDIA runtime and whose stack runs no toolkit:
    # nothing says the NVIDIA runtime was written into its config (containerd's own "cri" disabled, as Docker's
    # containerd.io package ships it, reads the same).
    node = "gpu-lab-worker3"
    event = _no_sandbox("nvidia-device-plugin-daemonset", node, CRI_V1, "nvidia-device-plugin-ctr")
    (root,) = _roots(diagnosed(_plugin(node, "containerd://1.7.22"), no_gpus(node), event))
    assert (root.id, root.link) == ("node.sandbox-failed", "node")
    assert "disabled_plugins" in root.fix


def test_a_healthy_node_on_the_nvidia_runtime_class_is_quiet() -> None:
    report = diagnosed(_plugin("gpu-lab-worker3", "containerd://1.7.22"), _on_runtime_class)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_not_ready_worker_whose_runtime_serves_no_cri_is_the_toolkit_not_the_node() -> None:
    # The kubelet's Ready condition as it writes it when the runtime does not answer its status calls
    # (kubernetes pkg/kubelet/nodestatus/setters.go: reason KubeletNotReady, "container runtime is down").
    from gpuchain.kube import NODE

    node = "worker-12"

    def not_ready(sim: Any) -> None:
        status = dict(sim.cluster.get(NODE, name=node)["status"])
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "container runtime is down",
        }
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [ready]
        sim.cluster.patch_status(NODE, name=node, status=status)

    event = _no_sandbox("nvidia-device-plugin-daemonset", node, CRI_V1, "nvidia-device-plugin-ctr")
    report = diagnosed(_plugin(node, "containerd://1.6.36"), no_gpus(node), _on_runtime_class, not_ready, event)
    (root,) = _roots(report)
    assert (root.id, root.node) == ("toolkit.cri-unloaded", node)
    assert not [f for f in report.findings if f.id == "node.not-ready"]
