"""A sharing config whose per-resource ``rename`` NVIDIA's device plugin ignores.

Every release of NVIDIA's plugin since its config file (v0.12.0 .. v0.20.0) clears ``sharing.<strategy>.resources[]
.rename`` when it loads its config (or sets it to <name>.shared with renameByDefault) and warns "Setting the 'rename'
field in sharing.%s.resources is not yet supported in the config. Ignoring..." (NVIDIA/k8s-device-plugin#353). The
replicas keep the resource's own name; pods that ask for the renamed one wait for ever. The repair is renameByDefault
(or the name the plugin advertises)."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, pending_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report
from gpuchain.sim.build import SimCluster


def _scenario(sharing: str) -> str:
    return (
        "name: t\nstack: gpu-operator\n"
        "policy: {driver: {version: 550.127.05}}\n"
        "devicePluginConfigs:\n"
        f"  sliced: {{version: v1, sharing: {{timeSlicing: {sharing}}}}}\n"
        "  whole: {version: v1}\n"
        "nodes:\n"
        "  - {name: n1, preset: l4-x2, devicePluginConfig: sliced}\n"
        "  - {name: n2, preset: l4-x2, devicePluginConfig: whole}\n"
        "  - {name: n3, preset: l4-x2, devicePluginConfig: sliced}\n"
    )


IGNORED = "{resources: [{name: nvidia.com/gpu, rename: nvidia.com/gpu-ts, replicas: 3}]}"
BY_DEFAULT = "{renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 3}]}"


def _advertised(resource: str) -> list[dict[str, Any]]:
    """The sliced nodes as NVIDIA's plugin leaves them: six replicas of two GPUs under ``resource``, none other."""
    edits = []
    for node in ("n1", "n3"):
        count = {"nvidia.com/gpu": None, "nvidia.com/gpu-ts": None, "nvidia.com/gpu.shared": None, resource: "6"}
        edits.append({"do": "node", "node": node, "capacity": count, "allocatable": dict(count)})
    return edits


def _waiting(resource: str) -> Any:
    def edit(sim: SimCluster) -> None:
        sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        pod = pending_gpu_pod(1, f"0/3 nodes are available: 3 Insufficient {resource}.", name="notebook")
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        limits[resource] = limits.pop("nvidia.com/gpu")
        sim.cluster.create(pod)

    return edit


def _renamed(report: Report) -> list[Any]:
    return [f for f in report.findings if f.id == "device-plugin.rename-ignored"]


def test_a_per_resource_rename_the_plugin_ignores_while_a_pod_waits_for_it_is_the_plugins_config() -> None:
    report = diagnosed(_scenario(IGNORED), *_advertised("nvidia.com/gpu"), _waiting("nvidia.com/gpu-ts"))
    found = _renamed(report)
    assert sorted(f.node for f in found) == ["n1", "n3"]
    assert all(f.severity is Severity.ERROR and f.root and f.link == "device-plugin" for f in found)
    assert "renameByDefault: true under sharing.timeSlicing" in found[0].fix
    assert "ml/notebook" in " ".join(found[0].evidence)


def test_the_rename_by_default_the_plugin_honours_is_quiet() -> None:
    report = diagnosed(_scenario(BY_DEFAULT), *_advertised("nvidia.com/gpu.shared"))
    assert not _renamed(report)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_ignored_rename_nothing_asks_for_is_a_warning() -> None:
    report = diagnosed(_scenario(IGNORED), *_advertised("nvidia.com/gpu"))
    found = _renamed(report)
    assert found and all(f.severity is Severity.WARNING for f in found)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
