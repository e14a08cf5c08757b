"""A precompiled driver image without NVIDIA's GL/EGL/Vulkan libraries, seen where a graphics pod fails.

Ubuntu's precompiled driver images installed no libnvidia-gl-<branch>-server until NVIDIA/gpu-driver-container#619:
the driver loads and CUDA runs, but a pod that asks for graphics finds no Vulkan driver ("vkCreateInstance: Found no
drivers!"). The doctor names the driver on the node of the failing pod and turns precompiled drivers off; a standard
driver image, or a pod that asks for no graphics, gets no such finding."""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp
from gpuchain.kube import DAEMONSET
from gpuchain.sim.build import SimCluster

KERNEL = "5.15.0-1071-aws"
SCENARIO = (
    "name: t\nstack: gpu-operator\n"
    "nodes:\n"
    f"  - {{name: viz-1, preset: t4-x4, kernel: {KERNEL}, osImage: Ubuntu 22.04.5 LTS}}\n"
    f"  - {{name: viz-2, preset: t4-x4, kernel: {KERNEL}, osImage: Ubuntu 22.04.5 LTS}}\n"
    f"  - {{name: viz-3, preset: t4-x4, kernel: {KERNEL}, osImage: Ubuntu 22.04.5 LTS}}\n"
)
LOADER = (
    "starting headless renderer\n"
    "ERROR: [Loader Message] Code 0 : vkCreateInstance: Found no drivers!\n"
    "renderer: failed to create Vulkan instance (VK_ERROR_INCOMPATIBLE_DRIVER)\n"
)
DS = f"nvidia-driver-daemonset-{KERNEL}-ubuntu22.04"


def _driver_image(image: str) -> Callable[[SimCluster], None]:
    def edit(sim: SimCluster) -> None:
        spec = {"containers": [{"name": "nvidia-driver-ctr", "image": image}]}
        sim.cluster.patch(DAEMONSET, name=DS, namespace="gpu-operator", patch={"spec": {"template": {"spec": spec}}})

    return edit


def _graphics_pod(node: str, capabilities: str) -> Callable[[SimCluster], None]:
    """A crash-looping graphics pod on ``node`` whose Vulkan loader finds no driver."""

    def edit(sim: SimCluster) -> None:
        name = f"viewer-{node}"
        sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "viz"}})
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "viz", "labels": {"app": "viewer"}},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "viewer",
                            "image": "registry.example.org/viz/viewer:1.4",
                            "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": capabilities}],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "False"}],
                    "containerStatuses": [
                        {
                            "name": "viewer",
                            "ready": False,
                            "restartCount": 7,
                            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
                            "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                        }
                    ],
                },
            }
        )
        sim.cluster.set_logs(name, namespace="viz", container="viewer", text=LOADER)

    return edit


def _graphics(image: str, capabilities: str = "graphics,compute,utility") -> list[Finding]:
    report = diagnosed(
        SCENARIO,
        {"do": "rename-daemonset", "namespace": "gpu-operator", "from": "nvidia-driver-daemonset", "to": DS},
        _driver_image(image),
        _graphics_pod("viz-2", capabilities),
    )
    return [f for f in report.findings if f.id == "driver.precompiled-no-graphics"]


def test_a_precompiled_image_without_gl_is_the_driver_fault_on_the_graphics_pods_node() -> None:
    (found,) = _graphics(f"nvcr.io/nvidia/driver:550-{KERNEL}-ubuntu22.04")
    assert (found.node, found.severity, found.root) == ("viz-2", Severity.ERROR, True)
    assert "libnvidia-gl-550-server" in found.cause
    assert "catalog: vulkan-loader.no-drivers" in " ".join(found.evidence)
    assert "release: driver-container.precompiled-no-gl" in " ".join(found.evidence)
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    assert found.action.changes["spec"] == {"driver": {"usePrecompiled": False}}
    assert "gpu-driver-container#619" in found.fix


def test_a_standard_driver_image_gets_no_such_finding() -> None:
    assert not _graphics("nvcr.io/nvidia/driver:550.163.01-ubuntu22.04")


def test_a_pod_that_asks_for_no_graphics_gets_no_such_finding() -> None:
    assert not _graphics(f"nvcr.io/nvidia/driver:550-{KERNEL}-ubuntu22.04", capabilities="compute,utility")
