"""Pods that request no nvidia.com/gpu (or "0") and set NVIDIA_VISIBLE_DEVICES see the node's GPUs through the NVIDIA
runtime: an error where the device plugin has given those GPUs to other running pods, a warning where it has not, and
nothing where the runtime ignores the variable in unprivileged containers.

Facts: the runtime hook honours NVIDIA_VISIBLE_DEVICES in unprivileged containers unless the toolkit's config.toml
sets accept-nvidia-visible-devices-envvar-when-unprivileged = false (NVIDIA/nvidia-container-toolkit
internal/config/config.go@v1.17.0, the GPU Operator toolkit's env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_
UNPRIVILEGED); the plugin then passes GPU pods' devices as volume mounts (k8s-device-plugin README@v0.17.0,
deviceListStrategy volume-mounts). CUDA base images set NVIDIA_VISIBLE_DEVICES=all (nvidia/cuda Dockerfiles).
Bottlerocket's NVIDIA variants ignore the variable in unprivileged containers from 1.19.2 (bottlerocket-os/
bottlerocket CHANGELOG.md@v1.19.5).
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, FixOp, Severity

PLUGIN = """name: t
stack: nvidia-device-plugin
nodes:
  - {name: worker-gpu-3, preset: t4-x4, hostDriver: "535.183.01"}
workloads:
  - {name: notebook, namespace: lab, count: 1, gpus: 0, node: worker-gpu-3, visibleDevices: VISIBLE}
"""
HOLDERS = "  - {name: train, namespace: lab, count: 2, gpus: 2, node: worker-gpu-3}\n"


def _unrequested(scenario: str) -> list[Finding]:
    return [f for f in diagnosed(scenario).findings if f.id == "workload.gpu-without-request"]


def test_a_pod_without_a_request_beside_pods_holding_the_gpus_is_an_error_with_the_toolkit_setting() -> None:
    """Every GPU of the node given to other pods: the pod that asked for none uses them too, an isolation fault of the
    toolkit's runtime, repaired by its accept-nvidia-visible-devices-envvar-when-unprivileged = false (with the
    plugin's volume-mounts list) or NVIDIA_VISIBLE_DEVICES=void in the pod."""
    (found,) = _unrequested(PLUGIN.replace("VISIBLE", "all") + HOLDERS)
    assert (found.severity, found.link, found.node) == (Severity.ERROR, "toolkit", "worker-gpu-3")
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in found.fix
    assert "DEVICE_LIST_STRATEGY=volume-mounts" in found.fix and "NVIDIA_VISIBLE_DEVICES=void" in found.fix
    assert any(e.startswith("GPU pods running on the node: lab/train-") for e in found.evidence)


def test_on_the_operator_the_policy_sets_both_toolkit_keys_and_the_plugins_list() -> None:
    """With a ClusterPolicy, the repair is its toolkit and device plugin env, the config key named beside it."""
    operator = PLUGIN.replace("nvidia-device-plugin", "gpu-operator").replace("VISIBLE", '"0,1"') + HOLDERS
    (found,) = _unrequested(operator)
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    spec = found.action.changes["spec"]
    assert {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"} in spec["toolkit"][
        "env"
    ]
    assert {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"} in spec["devicePlugin"]["env"]
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in found.fix


def test_with_no_gpu_held_by_another_pod_it_is_a_warning() -> None:
    """No pod holds a GPU of the node: nothing is shared yet, a warning."""
    (found,) = _unrequested(PLUGIN.replace("VISIBLE", "all"))
    assert found.severity is Severity.WARNING


def test_a_pod_that_sets_void_or_a_runtime_that_ignores_the_variable_is_quiet() -> None:
    """NVIDIA_VISIBLE_DEVICES=void injects no GPU; Bottlerocket 1.19.2's NVIDIA variant ignores the variable."""
    assert not _unrequested(PLUGIN.replace("VISIBLE", "void") + HOLDERS)
    bottlerocket = PLUGIN.replace("VISIBLE", "all").replace(
        'hostDriver: "535.183.01"', 'hostDriver: "535.183.01", osImage: "Bottlerocket OS 1.19.2 (aws-k8s-1.29-nvidia)"'
    )
    assert not _unrequested(bottlerocket + HOLDERS)
