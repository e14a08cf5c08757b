"""Tegra (Jetson) nodes under a device plugin that found no NVML (links/tegra.py): a plugin release before Tegra
support is told to move to one (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.13.0: "Add a CUDA-based resource manager
that can be used to expose integrated devices on Tegra-based systems"); a plugin with Tegra support that detects no
Tegra platform, the node's toolkit to the release that injects its platform files (NVIDIA/nvidia-container-toolkit
CHANGELOG.md@v1.11.0: "Inject platform files into container on Tegra-based systems"). An x86 node with the same
plugin lines keeps the runtime repair, and a Jetson whose plugin serves stays quiet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod
from sim.heldout9.harness import _apply

from gpuchain.doctor import Severity
from gpuchain.doctor.links.tegra import is_tegra
from gpuchain.doctor.model import Finding, Report
from gpuchain.sim.build import SimCluster

#: The plugin's lines when NVML does not load, before Tegra support (NVIDIA/k8s-device-plugin
#: cmd/nvidia-device-plugin/main.go@v0.12.3: "Loading NVML", "Failed to initialize NVML: %v.", "If this is a GPU
#: node, did you set the docker default runtime to `nvidia`?").
NVML_ONLY = (
    "2023/01/09 10:00:01 Loading NVML\n"
    "2023/01/09 10:00:01 Failed to initialize NVML: could not load NVML library.\n"
    "2023/01/09 10:00:01 If this is a GPU node, did you set the docker default runtime to `nvidia`?\n"
)
#: A release with Tegra support that finds neither platform (internal/rm/rm.go@v0.14.0 logWithReason, "Incompatible
#: platform detected", "platform detection failed"; go-nvlib's reasons for NVML and Tegra).
NO_PLATFORM = (
    "I0301 09:12:00.100000       1 rm.go:57] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "I0301 09:12:00.100100       1 rm.go:57] Detected non-Tegra platform: /sys/devices/soc0/family file not found\n"
    "E0301 09:12:00.100200       1 rm.go:64] Incompatible platform detected\n"
    "E0301 09:12:00.100300       1 main.go:123] error starting plugins: error creating plugin manager: unable to "
    "create plugin manager: platform detection failed\n"
)
#: A release with Tegra support serving a Jetson (internal/rm/rm.go and internal/plugin/server.go@v0.15.0).
SERVING = (
    "I0512 08:02:11.523391       1 factory.go:104] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "I0512 08:02:11.523498       1 factory.go:104] Detected Tegra platform: /etc/nv_tegra_release found\n"
    "I0512 08:02:11.607219       1 server.go:154] Registered device plugin for 'nvidia.com/gpu' with Kubelet\n"
)

ARM64 = {"kubernetes.io/arch": "arm64"}


def _cluster(node: str, *, kernel: str, runtime: str, arm: bool = True) -> str:
    labels = "{kubernetes.io/arch: arm64}" if arm else "{}"
    return (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: {node}, preset: l4-x2, distribution: k3s, kernel: {kernel}, containerRuntime: '{runtime}', "
        f"labels: {labels}}}\n"
    )


def _plugin(tag: str, **spec: Any) -> Callable[[SimCluster], None]:
    """An edit: the plugin DaemonSet's template runs ``tag`` with ``spec`` (held-out format, sim/heldout9)."""
    template = {
        "containers": [{"name": "nvidia-device-plugin-ctr", "image": f"nvcr.io/nvidia/k8s-device-plugin:{tag}"}]
    }
    edit = {
        "do": "daemonset",
        "namespace": "kube-system",
        "name": "nvidia-device-plugin-daemonset",
        "spec": {"template": {"spec": {**template, **spec}}},
    }
    return lambda sim: _apply(sim.cluster, edit)


def _crashing(node: str, *, kernel: str, runtime: str, tag: str, log: str, arm: bool = True, **spec: Any) -> Finding:
    """The one root error on ``node`` (``_cluster``'s) whose plugin ``tag`` announces no GPU and exits after ``log``."""
    report = diagnosed(
        _cluster(node, kernel=kernel, runtime=runtime, arm=arm),
        no_gpus(node),
        _plugin(tag, **spec),
        plugin_pod(node, crash_looping("nvidia-device-plugin-ctr"), log),
    )
    (root,) = _roots(report, node)
    return root


def _roots(report: Report, node: str) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR and f.root and f.node == node]


def test_plugin_before_tegra_support_on_a_jetson_moves_the_plugin() -> None:
    root = _crashing(
        "orin-nx-7", kernel="5.10.120-tegra", runtime="containerd://1.6.8-k3s1", tag="v0.12.3", log=NVML_ONLY
    )
    assert (root.id, root.link) == ("device-plugin.tegra-unsupported", "device-plugin")
    assert "k8s-device-plugin:v0.13.0" in root.fix and "v1.11.0" in root.fix
    assert "release: k8s-device-plugin.no-tegra" in " ".join(root.evidence)


def test_tegra_plugin_without_the_platform_files_moves_the_toolkit() -> None:
    root = _crashing(
        "nano-3",
        kernel="4.9.337-tegra",
        runtime="containerd://1.6.8-k3s1",
        tag="v0.14.0",
        log=NO_PLATFORM,
        runtimeClassName="nvidia",
    )
    assert (root.id, root.link) == ("toolkit.tegra-platform-missing", "toolkit")
    assert "upgrade the NVIDIA Container Toolkit" in root.fix and "v1.11.0 or later" in root.fix


def test_tegra_plugin_on_k3s_without_the_runtime_class_is_given_it() -> None:
    """k3s never makes nvidia its containerd's default: a plugin asking for no RuntimeClass gets no platform files
    from any toolkit release, so the RuntimeClass comes first."""
    root = _crashing(
        "nano-4", kernel="4.9.337-tegra", runtime="containerd://1.7.11-k3s2", tag="v0.14.0", log=NO_PLATFORM
    )
    assert root.id == "toolkit.runtime-not-default" and "runtimeClassName" in root.fix


def test_x86_node_with_the_same_lines_keeps_the_runtime_repair() -> None:
    root = _crashing(
        "gpu-a",
        kernel="5.15.0-105-generic",
        runtime="containerd://1.7.20-k3s1",
        tag="v0.12.3",
        log=NVML_ONLY,
        arm=False,
    )
    assert root.id == "toolkit.runtime-not-default" and "runtimeClassName" in root.fix


def test_k3s_with_docker_is_told_dockers_default_runtime() -> None:
    """k3s run with --docker hands pods to Docker: neither its containerd's RuntimeClass nor containerd's config is the
    repair there, Docker's default runtime is (nvidia-container-toolkit CHANGELOG.md@v1.11.0, nvidia-ctk runtime
    configure for Docker's daemon.json)."""
    root = _crashing(
        "gpu-b", kernel="5.4.0-107-generic", runtime="docker://20.10.14", tag="v0.11.0", log=NVML_ONLY, arm=False
    )
    assert root.id == "toolkit.runtime-not-default"
    assert "runtimeClassName" not in root.fix and "--runtime=containerd" not in root.fix
    assert "nvidia-ctk runtime configure --runtime=docker --set-as-default" in root.fix and "daemon.json" in root.fix


def test_jetson_served_by_a_tegra_release_is_quiet() -> None:
    report = diagnosed(
        _cluster("orin-agx-2", kernel="5.15.136-tegra", runtime="containerd://1.7.15-k3s1"),
        {"do": "node", "node": "orin-agx-2", "capacity": {"nvidia.com/gpu": 1}, "allocatable": {"nvidia.com/gpu": 1}},
        _plugin("v0.15.0", runtimeClassName="nvidia"),
        plugin_pod(
            "orin-agx-2",
            {"name": "nvidia-device-plugin-ctr", "ready": True, "restarts": 0, "state": {"running": True}},
            SERVING,
        ),
    )
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_tegra_is_arm64_with_an_l4t_kernel_or_image() -> None:
    def node(arch: str, kernel: str, image: str = "Ubuntu 20.04.6 LTS") -> dict[str, Any]:
        info = {"architecture": arch, "kernelVersion": kernel, "osImage": image}
        return {"metadata": {"labels": {}}, "status": {"nodeInfo": info}}

    assert is_tegra(node("arm64", "5.10.192-tegra"))
    assert is_tegra(node("arm64", "5.10.0", "NVIDIA L4T 35.4.1"))
    assert not is_tegra(node("arm64", "5.15.84-v8+"))  # a Raspberry Pi
    assert not is_tegra(node("amd64", "4.9.253-tegra"))
