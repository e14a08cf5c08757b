"""Whether GPU pods on a node need the container runtime's own CDI support, and a finding where its containerd lacks
it.

NVIDIA's GPU Operator has had ``spec.cdi`` since v23.3.0 (api/v1/clusterpolicy_types.go@v23.3.0, ``enabled`` and
``default`` both false), and what ``cdi.enabled=true`` asks of the runtime changed with v25.10.0:

- v23.3.0 to v25.3.x (controllers/object_controls.go@v24.9.0, @v25.3.0): the toolkit keeps ``nvidia`` the default
  runtime and reads the annotation prefix ``nvidia.cdi.k8s.io/`` (NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_
  PREFIXES; mode ``cdi`` only with ``cdi.default``), and the device plugin lists devices as ``envvar,cdi-annotations``
  under that prefix. The nvidia runtime itself edits the container's spec from them, so any containerd serves.
- from v25.10.0 (object_controls.go@v25.10.0 transformToolkitCtrForCDI, "we leverage native CDI support in
  containerd / cri-o"; transformDevicePluginCtrForCDI): ``cdi.enabled`` defaults to true (its values.yaml and the
  CRD default), ``nvidia`` is no longer the default runtime (NVIDIA_RUNTIME_SET_AS_DEFAULT=false) and the device
  plugin lists devices as ``cdi-annotations,cdi-cri`` under the standard prefix ``cdi.k8s.io/``: only the runtime's
  own CDI support turns them into devices, which containerd has from 1.7.0 (containerd v1.7.0 release notes, as
  quoted in canonical/k8s-snap#2388).

The device plugin's DaemonSet says which of the two a cluster runs (its DEVICE_LIST_STRATEGY and CDI_ANNOTATION_PREFIX;
NVIDIA/k8s-device-plugin api/config/v1/consts.go@v0.17.0: ``cdi-cri`` fills the AllocateResponse's CDIDevices, which
only the runtime reads); where it does not, the operator's release does (`operator_at_least`)."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import operand_daemonset
from gpuchain.doctor.links.releases import operator_at_least
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN

#: containerd injects CDI devices from 1.7.0 on.
CDI_CONTAINERD = (1, 7, 0)
#: The first GPU Operator release whose CDI is the runtime's own (see the module's docstring).
NATIVE_CDI_OPERATOR = "v25.10.0"
#: The device plugin's list strategies that hand devices to the nvidia runtime rather than to the runtime's own CDI
#: support (NVIDIA/k8s-device-plugin api/config/v1/consts.go@v0.17.0).
RUNTIME_HOOK_STRATEGIES = frozenset({"envvar", "volume-mounts"})
#: The CDI specification's annotation prefix (tags.cncf.io/container-device-interface pkg/cdi/annotations.go), the
#: device plugin's default CDI_ANNOTATION_PREFIX: annotations under it are the runtime's to resolve.
STANDARD_PREFIX = "cdi.k8s.io/"


def _plugin_env(ctx: Context) -> dict[str, str]:
    """The literal env of the device plugin's main container in the stack's DaemonSet ({} where none is listed), with
    the ClusterPolicy's spec.devicePlugin.env over it: the operator applies that env after its own CDI env
    (NVIDIA/gpu-operator controllers/object_controls.go TransformDevicePlugin@v25.10.1), so a strategy set there is
    the one the plugin runs with even where the dump's DaemonSet predates the policy's edit."""
    ds: Obj = operand_daemonset(ctx, DEVICE_PLUGIN) or {}
    containers = ((((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    env = (containers[0].get("env") if containers else None) or []
    policy = ((((ctx.policy_obj or {}).get("spec") or {}).get("devicePlugin")) or {}).get("env") or []
    return {str(e.get("name")): str(e.get("value")) for e in (*env, *policy) if isinstance(e, dict) and "value" in e}


def native_cdi(ctx: Context) -> tuple[bool, str]:
    """Whether the stack hands GPUs to workload containers through the runtime's own CDI support, and the line that
    says so: the device plugin's list strategy where its DaemonSet sets one (no envvar or volume-mounts strategy, and
    cdi-cri or cdi-annotations under the standard prefix), else the operator's release (v25.10.0 or later, or none
    shown)."""
    env = _plugin_env(ctx)
    listed = env.get("DEVICE_LIST_STRATEGY", "")
    if listed:
        strategies = {s.strip() for s in listed.split(",") if s.strip()}
        prefix = env.get("CDI_ANNOTATION_PREFIX", STANDARD_PREFIX)
        native = not strategies & RUNTIME_HOOK_STRATEGIES and (
            "cdi-cri" in strategies or ("cdi-annotations" in strategies and prefix == STANDARD_PREFIX)
        )
        return native, f"device plugin DEVICE_LIST_STRATEGY={listed}" + (
            f", CDI_ANNOTATION_PREFIX={env['CDI_ANNOTATION_PREFIX']}" if "CDI_ANNOTATION_PREFIX" in env else ""
        )
    return operator_at_least(ctx, NATIVE_CDI_OPERATOR), ""


def runtime_no_cdi(
    ctx: Context, view: NodeView, *, scheme: str, release: tuple[int, ...] | None, runtime: str
) -> Finding | None:
    """``node.runtime-no-cdi``: the ClusterPolicy turns CDI on, the stack then relies on the runtime's own CDI
    support (`native_cdi`), and this node's containerd (``release``, from ``runtime``, its nodeInfo line) predates it:
    GPU pods here start without their GPUs. None where any of that does not hold."""
    cdi = ((((ctx.policy_obj or {}).get("spec") or {}).get("cdi")) or {}).get("enabled")
    if not (ctx.stack.policy_cdi and cdi is True and scheme == "containerd" and release and release < CDI_CONTAINERD):
        return None
    native, said = native_cdi(ctx)
    if not native:
        return None
    have, need = ".".join(map(str, release)), ".".join(map(str, CDI_CONTAINERD))
    off = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"cdi": {"enabled": False}}})
    return Finding(
        id="node.runtime-no-cdi",
        severity=Severity.ERROR,
        link="toolkit",
        cause="the ClusterPolicy has CDI on, so GPUs reach containers through the runtime's CDI support, and "
        f"this node's containerd ({have}) predates it ({need}): GPU pods here start without their GPUs.",
        evidence=tuple(
            e
            for e in (
                f"status.nodeInfo.containerRuntimeVersion: {runtime}",
                f"spec.cdi.enabled=true in {ctx.policy_ref}",
                said,
            )
            if e
        ),
        fix=ctx.stack.render(off) + f"   # or upgrade containerd on {view.name} to 1.7 or later",
        node=view.name,
        action=off,
    )
