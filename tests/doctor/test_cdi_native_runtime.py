"""``node.runtime-no-cdi`` holds only where the GPU Operator hands GPUs to the runtime's own CDI support.

Sources (src/gpuchain/doctor/cdi_runtime.py says more):
- NVIDIA/gpu-operator controllers/object_controls.go@v24.9.0: with ``cdi.enabled`` the device plugin lists devices as
  ``envvar,cdi-annotations`` under ``nvidia.cdi.k8s.io/`` and ``nvidia`` stays the default runtime, which injects
  them itself: containerd 1.6 serves (tests/sim/heldout27 h27-09 is such a healthy cluster on containerd 1.6.4).
- object_controls.go@v25.10.0 transformDevicePluginCtrForCDI: ``cdi-annotations,cdi-cri`` under ``cdi.k8s.io/``,
  which only containerd's own CDI support (1.7.0 on) resolves (canonical/k8s-snap#2388).
- deployments/gpu-operator/templates/clusterpolicy.yaml@a22dbf6: the validator's version is the chart's appVersion,
  so the validator pods' image tag (gpu-operator-validator:vX) dates the operator where the policy does not."""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed

from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NO_CDI = "node.runtime-no-cdi"
VALIDATOR = "nvcr.io/nvidia/cloud-native/gpu-operator-validator"


def _scenario(containerd: str, *, node: str = "gpu-rhel8-07", validator: str = "") -> str:
    pinned = f", validator: {{version: {validator}}}" if validator else ""
    return (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{driver: {{enabled: false}}, cdi: {{enabled: true}}{pinned}}}\n"
        f"nodes:\n  - {{name: {node}, preset: t4-x4, hostDriver: '535.183.06', "
        f"containerRuntime: 'containerd://{containerd}'}}\n"
    )


def _validator_image(image: str) -> Callable[[SimCluster], None]:
    """An edit: every validator pod's containers run ``image`` (a dump whose policy does not date the operator)."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            spec = pod["spec"]
            listed = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
            if not any("gpu-operator-validator" in str(c.get("image", "")) for c in listed):
                continue
            patch = {
                key: [{**c, "image": image} for c in spec.get(key) or []]
                for key in ("initContainers", "containers")
                if spec.get(key)
            }
            sim.cluster.patch(POD, name=name_of(pod), namespace=namespace_of(pod), patch={"spec": patch})

    return edit


def _plugin_env(**env: str) -> Callable[[SimCluster], None]:
    """An edit: the device plugin DaemonSet's main container gets ``env`` (as the operator's transform sets it)."""

    def edit(sim: SimCluster) -> None:
        ds = sim.cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="gpu-operator")
        template = ds["spec"]["template"]["spec"]
        first, *rest = template["containers"]
        kept = [e for e in first.get("env") or [] if e.get("name") not in env]
        first = {**first, "env": [*kept, *({"name": k, "value": v} for k, v in env.items())]}
        patch = {"spec": {"template": {"spec": {"containers": [first, *rest]}}}}
        sim.cluster.patch(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="gpu-operator", patch=patch)

    return edit


def test_an_operator_before_v25_10_dated_by_its_validator_pods_needs_no_containerd_1_7_for_cdi() -> None:
    """h27-09's class on another node and containerd build: CDI on, v24.9.0's validator pods, containerd 1.6.20."""
    report = diagnosed(_scenario("1.6.20"), _validator_image(f"{VALIDATOR}:v24.9.0"))
    assert NO_CDI not in report.ids


def test_validator_pods_of_v25_10_date_an_operator_that_relies_on_containerds_own_cdi() -> None:
    report = diagnosed(_scenario("1.6.33", node="a100-w3"), _validator_image(f"{VALIDATOR}:v25.10.1"))
    (found,) = [f for f in report.findings if f.id == NO_CDI]
    assert found.node == "a100-w3" and "1.6.33" in found.cause
    assert found.action is not None and found.action.changes == {"spec": {"cdi": {"enabled": False}}}


def test_containerd_1_7_serves_the_native_cdi_of_v25_10() -> None:
    assert NO_CDI not in diagnosed(_scenario("1.7.27"), _validator_image(f"{VALIDATOR}:v25.10.0")).ids


def test_the_device_plugins_cdi_cri_strategy_needs_containerds_cdi_whatever_release_shows() -> None:
    """The DaemonSet's env is the operator's rendering itself: it outranks the release read from images."""
    report = diagnosed(
        _scenario("1.6.4"),
        _validator_image(f"{VALIDATOR}:v24.9.0"),
        _plugin_env(DEVICE_LIST_STRATEGY="cdi-annotations,cdi-cri", CDI_ANNOTATION_PREFIX="cdi.k8s.io/"),
    )
    (found,) = [f for f in report.findings if f.id == NO_CDI]
    assert any("DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri" in e for e in found.evidence)


def test_envvar_and_nvidia_prefixed_annotations_go_through_the_nvidia_runtime_on_any_containerd() -> None:
    """v23.3.0 to v25.3.x's rendering (object_controls.go@v25.3.0), even under a policy pinned to v25.10.0's
    validator: the nvidia runtime reads nvidia.cdi.k8s.io/ annotations itself."""
    report = diagnosed(
        _scenario("1.6.4", validator="v25.10.0"),
        _plugin_env(DEVICE_LIST_STRATEGY="envvar,cdi-annotations", CDI_ANNOTATION_PREFIX="nvidia.cdi.k8s.io/"),
    )
    assert NO_CDI not in report.ids


def test_where_nothing_dates_the_operator_cdi_on_an_old_containerd_still_warns() -> None:
    report = diagnosed(_scenario("1.6.4"), _validator_image("ghcr.io/gpuchain/gpuchain:0.1.0"))
    assert NO_CDI in report.ids
