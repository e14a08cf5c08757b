"""A Talos node whose booted image has no NVIDIA system extensions: containerd refuses the nvidia handler, and the
repair is the driver's, an installer image with the extensions, not the toolkit's config edit of other distributions.

Facts: Talos reports its release in osImage as its os-release PRETTY_NAME "Talos (v1.7.6)"; the NVIDIA runtime
handler on Talos comes from the nvidia-container-toolkit extension's containerd drop-in (siderolabs/extensions
nvidia-gpu/nvidia-container-toolkit/nvidia-container-runtime/nvidia-container-runtime.part@v1.4.0), the module from
nonfree-kmod-nvidia; Talos' guide runs NVIDIA's device plugin with runtimeClassName nvidia (siderolabs/talos
website/content/v1.8/talos-guides/configuration/nvidia-gpu-proprietary.md@4701498). containerd's refusal: "no
runtime for %q is configured" (containerd internal/cri/config/config.go@v2.2.9), as the kubelet's
FailedCreatePodSandBox Event carries it.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import Edit, diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor.model import Finding, Severity

SANDBOX = (
    'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" '
    "is configured"
)


def _scenario(node: str, os_image: str, kernel: str, host_driver: bool) -> str:
    driver = ', hostDriver: "550.90.07"' if host_driver else ""
    return (
        f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {node}, preset: l4-x2, osImage: '{os_image}', "
        f"kernel: {kernel}, containerRuntime: 'containerd://1.7.18'{driver}}}\n"
    )


def _no_handler(node: str) -> list[Edit]:
    """The plugin's DaemonSet on runtimeClassName nvidia, its pod on ``node`` without a sandbox, no GPU capacity
    (held-out edits, applied by heldout9's loader, which knows ``daemonset``)."""
    edits: list[dict[str, Any]] = [
        {
            "do": "daemonset",
            "namespace": "kube-system",
            "name": "nvidia-device-plugin-daemonset",
            "spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}},
        },
        {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "namespace": "kube-system",
            "node": node,
            "phase": "Pending",
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "ready": False, "state": {"waiting": "ContainerCreating"}}
            ],
            "events": [{"reason": "FailedCreatePodSandBox", "count": 7, "message": SANDBOX}],
        },
    ]
    return [lambda sim, e=e: ninth._apply(sim.cluster, e) for e in edits]


def _errors(node: str, scenario: str, *edits: Edit) -> list[Finding]:
    return [f for f in diagnosed(scenario, *edits).findings if f.node == node and f.severity is Severity.ERROR]


def test_a_talos_node_without_the_nvidia_handler_is_the_driver_repaired_by_an_installer_with_the_extensions() -> None:
    """Talos v1.7.6 (no other node to copy a release from): reinstall the release it runs with the extensions."""
    node = "gpu-w1"
    (found,) = _errors(node, _scenario(node, "Talos (v1.7.6)", "6.6.43-talos", False), *_no_handler(node))
    assert (found.id, found.link) == ("driver.talos-extensions-missing", "driver")
    assert f"talosctl -n {node} upgrade --image factory.talos.dev/installer/<schematic id>:v1.7.6" in found.fix
    assert "get extensions" in found.fix and "siderolabs/nonfree-kmod-nvidia" in found.fix
    assert "nvidia-ctk runtime configure" not in found.fix


def test_the_same_refusal_on_another_distribution_stays_the_toolkits() -> None:
    """Ubuntu with the same sandbox refusal: the runtime's config, not an image's extensions."""
    node = "gpu-u1"
    errors = _errors(node, _scenario(node, "Ubuntu 22.04.4 LTS", "5.15.0-116-generic", True), *_no_handler(node))
    assert [f.link for f in errors] == ["toolkit"]
    assert not any(f.id == "driver.talos-extensions-missing" for f in errors)


def test_a_talos_node_whose_plugin_runs_is_quiet() -> None:
    """Talos with its extensions (the plugin runs, the node announces its GPUs): nothing to say."""
    node = "gpu-w2"
    assert not _errors(node, _scenario(node, "Talos (v1.7.6)", "6.6.43-talos", True))
