"""A device plugin with a MIG strategy (single, mixed) serves a MIG-enabled GPU only through its MIG devices; MIG mode
survives a reboot, the GPU and compute instances do not (NVIDIA/k8s-device-plugin#343, the maintainer's answer). So
a running plugin with such a strategy and NVML loaded that finds no device ("No devices found. Waiting
indefinitely.", cmd/nvidia-device-plugin/main.go) on a node whose capacity still names nvidia.com/gpu at 0 (it
served GPUs before) is the MIG link: the layout applied again and kept across reboots. With the default strategy
(none, its argument winning over the MIG_STRATEGY variable) the same wait stays the plugin's.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: a100-40gb-x8}\n"
WAITS = "Initializing NVML.\nRetreiving plugins.\nNo devices found. Waiting indefinitely.\n"


def _report(args: list[str]) -> Report:
    def plugin(sim: SimCluster) -> None:
        pod = next(
            p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset")
        )
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        container = {**pod["spec"]["containers"][0], "args": args}
        sim.cluster.patch(POD, name=name, namespace=ns, patch={"spec": {"containers": [container]}})
        sim.cluster.set_logs(name, namespace=ns, container=container["name"], text=WAITS)

    capacity = {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": 0}, "allocatable": {"nvidia.com/gpu": 0}}
    return diagnosed(PLUGIN, plugin, capacity)


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.node == "n1"]


def test_a_single_strategy_plugin_that_finds_no_device_is_the_mig_layout_gone() -> None:
    (root,) = _roots(_report(["--mig-strategy=single"]))
    assert (root.id, root.link) == ("mig.no-instances", "mig")
    assert "nvidia-mig-parted apply" in root.fix and "systemctl enable nvidia-mig-manager.service" in root.fix
    assert "mig strategy single" in " ".join(root.evidence)


def test_without_a_mig_strategy_the_wait_stays_the_plugins() -> None:
    assert [f.link for f in _roots(_report(["--mig-strategy=none"]))] == ["device-plugin"]
