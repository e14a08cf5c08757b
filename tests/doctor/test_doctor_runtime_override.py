"""GPU pods refused by an NVIDIA runtime that ignores what the container toolkit set: the node's containerd starts them
with its own default runtime, so the repair is the containerd config key that overrides the toolkit's (a version 1
config's default_runtime table, a later drop-in) or, on an EKS GPU AMI, a newer AMI; not the toolkit's release.

Facts: containerd pkg/cri/config/config.go@v1.6.19 (the deprecated default_runtime table wins over
default_runtime_name), services/server/config/config.go@v1.6.19 (imports merged after the importing file; version 1
reads the plugin by its ID, [plugins.cri]); the toolkit's containerd writer (NVIDIA/nvidia-container-toolkit
internal/config/engine/containerd/config_v1.go@v1.13.0) sets default_runtime_name; the runtime hook's refusal
"device error: %s" with select_devices' "unknown device" (NVIDIA/libnvidia-container src/cli/configure.c@09df17a);
the device plugin's volume-mounts list under /var/run/nvidia-container-devices (k8s-device-plugin README@v0.14.0);
GPU Operator devicePlugin.env applied after its CDI env (NVIDIA/gpu-operator controllers/object_controls.go@v25.10.1).
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed, refused_at_start

from gpuchain.doctor.model import Finding, Severity

HOOK = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running prestart hook #0: exit status 1, "
    "stdout: , stderr: nvidia-container-cli: device error: /var/run/nvidia-container-devices/GPU-3b1e9c4d-0a7f-4e21-"
    "9d5c-6f8a2b1c0e7d: unknown device: unknown"
)


def _scenario(node: str, toolkit_env: str, os_image: str, labels: str = "") -> str:
    return f"""name: t
stack: gpu-operator
policy:
  driver: {{enabled: false}}
  devicePlugin:
    env: [{{name: DEVICE_LIST_STRATEGY, value: volume-mounts}}]
  toolkit:
    env: [{toolkit_env}]
nodes:
  - {{name: {node}, preset: l4-x2, hostDriver: "535.161.07", osImage: "{os_image}", containerRuntime: "containerd://1.6.28"{labels}}}
workloads:
  - {{name: infer, namespace: serve, count: 2, gpus: 1}}
"""


AS_MOUNTS = "{name: ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS, value: 'true'}"


def _errors(node: str, scenario: str) -> list[Finding]:
    report = diagnosed(scenario, refused_at_start("infer-", HOOK))
    return [f for f in report.findings if f.node == node and f.severity is Severity.ERROR]


def test_a_toolkit_set_for_volume_mounts_whose_list_the_runtime_refuses_is_overridden_by_containerds_config() -> None:
    """kubeadm on Ubuntu: the containerd config keys that keep another default runtime, not a toolkit release."""
    node = "gpu-a10-01"
    (found,) = _errors(node, _scenario(node, AS_MOUNTS, "Ubuntu 20.04.6 LTS"))
    assert (found.id, found.link) == ("toolkit.runtime-overridden", "toolkit")
    assert "[plugins.cri.containerd.default_runtime]" in found.fix and "containerd config dump" in found.fix
    assert "version = 2" in found.fix and "EKS" not in found.fix and "v1.14.1" not in found.fix


def test_on_an_eks_gpu_ami_the_node_group_moves_to_a_newer_ami() -> None:
    """Amazon Linux 2 in an EKS node group: the AMI's own containerd config, replaced with a newer AMI."""
    node = "ip-10-0-3-17.us-west-2.compute.internal"
    eks = ", labels: {eks.amazonaws.com/nodegroup: inference}"
    (found,) = _errors(node, _scenario(node, AS_MOUNTS, "Amazon Linux 2", eks))
    assert found.id == "toolkit.runtime-overridden"
    assert "aws eks update-nodegroup-version" in found.fix and "--nodegroup-name inference" in found.fix
    assert "toolkit.enabled=false" in found.fix


def test_a_toolkit_not_set_for_volume_mounts_keeps_the_hooks_own_answer() -> None:
    """The toolkit never set accept-nvidia-visible-devices-as-volume-mounts: the refusal is the catalog's own (set it,
    or the plugin's list back to envvar), no override is claimed."""
    node = "gpu-a10-02"
    other = "{name: ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, value: 'true'}"
    errors = _errors(node, _scenario(node, other, "Ubuntu 20.04.6 LTS"))
    assert [f.id for f in errors] == ["workload.runtime-hook-failed"]


def test_a_plugin_listing_by_volume_mounts_needs_no_cdi_from_containerd() -> None:
    """DEVICE_LIST_STRATEGY=volume-mounts in the policy: containerd 1.6's lack of CDI is not named under an operator
    (v25.10.0) whose CDI is containerd's own; without the strategy, it is."""
    node = "gpu-a10-03"
    native = "  validator: {version: v25.10.0}\n  devicePlugin:"
    quiet = _scenario(node, AS_MOUNTS, "Ubuntu 20.04.6 LTS").replace("  devicePlugin:", native)
    assert "node.runtime-no-cdi" not in diagnosed(quiet).ids
    listed = quiet.replace("  devicePlugin:\n    env: [{name: DEVICE_LIST_STRATEGY, value: volume-mounts}]\n", "")
    assert "node.runtime-no-cdi" in diagnosed(listed).ids
