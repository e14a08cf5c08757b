"""aks-engine GPU agents provisioned with the nvidia-device-plugin addon off (issue 26): in aks-engine the addon is
what installs the NVIDIA driver and runtime on an N-series agent (parts/k8s/cloud-init/artifacts/cse_main.sh), so the
agent has no driver; the repair is the addon in apimodel.json and the agents provisioned again."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor import Severity


def _agent(name: str, pool: str, *, extra: str = "") -> str:
    return (
        f"    - {{name: {name}, preset: l4-x2, osImage: Ubuntu 18.04.6 LTS, kernel: 5.4.0-1094-azure, "
        f'containerRuntime: "containerd://1.6.21", nfd: false, labels: {{agentpool: {pool}, accelerator: nvidia, '
        f"kubernetes.azure.com/role: agent{extra}, node.kubernetes.io/instance-type: Standard_NC24ads_A100_v4}}}}\n"
    )


def _without_stack(extra: str = "") -> str:
    return (
        "name: aks-engine\nsource: test\nkind: fault\nbase:\n  stack: none\n  nodes:\n"
        + _agent("k8s-infer-11223344-vmss000000", "infer", extra=extra)
        + _agent("k8s-infer-11223344-vmss000001", "infer", extra=extra)
        + _agent("k8s-infer-11223344-vmss000002", "infer", extra=extra)
        + "edits:\n"
        + "".join(
            f"  - {{do: node, node: k8s-infer-11223344-vmss00000{i}, labels: {{nvidia.com/gpu.present: null}}}}\n"
            for i in range(3)
        )
        + "expect:\n  root: none\n"
    )


def test_aks_engine_agents_with_no_gpu_stack_are_each_the_driver_the_addon_installs(tmp_path: Path) -> None:
    report = diagnosed_case(tmp_path, _without_stack())
    found = [f for f in report.findings if f.id == "driver.aks-engine-addon-off"]
    assert sorted(f.node or "" for f in found) == [f"k8s-infer-11223344-vmss00000{i}" for i in range(3)]
    assert all(f.link == "driver" and f.severity == Severity.ERROR for f in found)
    assert "apimodel.json" in found[0].fix and '"name": "nvidia-device-plugin", "enabled": true' in found[0].fix
    assert "stack.missing" not in report.ids


def test_aks_managed_gpu_nodes_keep_the_stack_missing_finding(tmp_path: Path) -> None:
    """AKS's own node images carry the driver: their labels say so, and no aks-engine addon is the repair."""
    report = diagnosed_case(tmp_path, _without_stack(", kubernetes.azure.com/node-image-version: AKSUbuntu-2204gen2"))
    assert "driver.aks-engine-addon-off" not in report.ids and "stack.missing" in report.ids


PLUGIN_LOG = """
  - do: pod
    daemonset: nvidia-device-plugin-daemonset
    namespace: kube-system
    node: k8s-late-55667788-0
    containers: [{name: nvidia-device-plugin-ctr, ready: false, restarts: 12, state: {waiting: CrashLoopBackOff}, last: {terminated: Error, exitCode: 1}}]
    logs:
      nvidia-device-plugin-ctr: |
        2020/06/02 10:00:01 Loading NVML
        2020/06/02 10:00:01 Failed to initialize NVML: could not load NVML library.
        2020/06/02 10:00:01 If this is a GPU node, did you set the docker default runtime to `nvidia`?
"""


def test_an_agent_whose_plugin_cannot_load_nvml_is_the_driver_not_the_default_runtime(tmp_path: Path) -> None:
    doc = (
        "name: aks-engine\nsource: test\nkind: fault\nbase:\n  stack: nvidia-device-plugin\n  nodes:\n"
        + _agent("k8s-late-55667788-0", "late").replace("containerd://1.6.21", "docker://19.3.14")
        + "    - {name: k8s-first-55667788-0, preset: l4-x2, hostDriver: 470.82.01}\n"
        + "edits:\n  - {do: node, node: k8s-late-55667788-0, capacity: {nvidia.com/gpu: null}, "
        "allocatable: {nvidia.com/gpu: null}}" + PLUGIN_LOG + "expect:\n  root: none\n"
    )
    report = diagnosed_case(tmp_path, doc)
    (found,) = [f for f in report.findings if f.id == "driver.aks-engine-addon-off"]
    assert found.node == "k8s-late-55667788-0" and "late agents" in found.fix
    assert "toolkit.runtime-not-default" not in report.ids


def test_an_agent_whose_driver_gfd_has_seen_is_not_taken_for_one_without_it(tmp_path: Path) -> None:
    report = diagnosed_case(tmp_path, _without_stack(", nvidia.com/cuda.driver-version.full: 470.82.01"))
    assert "driver.aks-engine-addon-off" not in report.ids
