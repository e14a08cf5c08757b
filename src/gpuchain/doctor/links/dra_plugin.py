"""NVIDIA's DRA driver kubelet plugin in the device-plugin link's place: it publishes the node's GPUs as
ResourceSlices instead of node capacity, and its chart's init container waits for the driver.

Facts from NVIDIA/k8s-dra-driver-gpu: the chart (deployments/helm/nvidia-dra-driver-gpu, templates/
kubeletplugin.yaml) runs init container ``init-container`` with ``hack/kubelet-plugin-prestart.sh``, which
loops every 10 s and leaves only once ``nvidia-smi`` from the driver under ``NVIDIA_DRIVER_ROOT`` (the chart's
``nvidiaDriverRoot``, default ``/``) exits 0; its own hint for a driver the GPU Operator manages is
``--set nvidiaDriverRoot=/run/nvidia/driver`` (GKE's install path is ``/home/kubernetes/bin/nvidia``).
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import PROVIDED_BY, install_driver
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.failures import not_ready
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import HELM_RELEASE, owner_daemonset
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER

WHAT = "NVIDIA DRA kubelet plugin pod"
#: The chart a fix upgrades (helm repo nvidia = https://helm.ngc.nvidia.com/nvidia, as NVIDIA's docs add it).
CHART = "nvidia/nvidia-dra-driver-gpu"
#: Where the GPU Operator's driver container puts the driver on the host (its driverInstallDir).
OPERATOR_DRIVER_ROOT = next(root for root, link in PROVIDED_BY if link == "driver")


def _driver_root(pod: Obj) -> str:
    """The NVIDIA_DRIVER_ROOT the pod's containers are given ("/" where unset or empty, as the prestart script
    reads it)."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for env in c.get("env") or []:
            if env.get("name") == "NVIDIA_DRIVER_ROOT":
                return str(env.get("value") or "/")
    return "/"


def _where_driver_is(ctx: Context, view: NodeView) -> tuple[str, str]:
    """Where this node's driver is on the host, and what says so: the GPU Operator's driver container on the
    node, the stack's own driver root (GKE's installer), else the host's own install under /."""
    driver = view.pod(DRIVER)
    if driver is not None:
        return OPERATOR_DRIVER_ROOT, f"driver pod {name_of(driver)} on the node installs it at {OPERATOR_DRIVER_ROOT}"
    if ctx.stack.driver_root:
        return ctx.stack.driver_root, f"{ctx.stack.title} installs it at {ctx.stack.driver_root}"
    return "/", "no driver container runs on the node: the host's own driver, under /"


def _held_for_driver(ctx: Context, view: NodeView, pod: Obj, state: PodState) -> Result:
    """The plugin held in its init container, which waits for a driver under its NVIDIA_DRIVER_ROOT: pointed
    elsewhere than where this node's driver is, the chart's value is the fault (device-plugin link); pointed
    right, no working driver answers there (driver link)."""
    given = _driver_root(pod)
    wanted, why = _where_driver_is(ctx, view)
    ns = (pod.get("metadata") or {}).get("namespace") or ctx.namespace
    held = f"init container {state.waiting_init}: NVIDIA_DRIVER_ROOT={given}"
    rerun = ctx.stack.render(Fix.delete_pod(ns, name_of(pod)))
    if given.rstrip("/") != wanted.rstrip("/"):
        ds = owner_daemonset(ctx, pod)
        release = ((ds.get("metadata") or {}).get("labels") or {}).get(HELM_RELEASE) or "<release>"
        finding = node_finding(
            view,
            "device-plugin.not-ready",
            Severity.ERROR,
            "device-plugin",
            f"NVIDIA's DRA kubelet plugin is held in its init container {state.waiting_init}, which waits until "
            f"nvidia-smi runs from the driver under NVIDIA_DRIVER_ROOT={given}; this node's driver is at {wanted}, "
            "so it never finishes and the node's GPUs are published to no ResourceSlice.",
            [state.describe(), held, why],
            f"helm upgrade {release} {CHART} -n {ns} --reuse-values --set nvidiaDriverRoot={wanted}   # the chart's "
            "driver root where this node's driver is; its pods restart with it",
        )
        return Result(LinkState.BROKEN, f"DRA plugin waits for a driver at {given}", (finding,))
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{install_driver(ctx)} (nvidia-smi must run from {wanted}); then {rerun}",
            NOT_SIMULATED: "whether the host's driver answers is a fact of the node no scenario names",
        },
    )
    finding = node_finding(
        view,
        "driver.not-installed",
        Severity.ERROR,
        "driver",
        f"NVIDIA's DRA kubelet plugin is held in its init container {state.waiting_init}, which leaves only once "
        f"nvidia-smi runs from the driver under NVIDIA_DRIVER_ROOT={given}, where this node's driver is: no working "
        "driver answers there, so no GPU is published for the node.",
        [state.describe(), held, why],
        ctx.stack.render(action),
        action,
    )
    return Result(LinkState.BROKEN, "no driver answers for the DRA plugin", (finding,))


def check_dra_plugin(ctx: Context, view: NodeView, pod: Obj, state: PodState, log: str) -> Result:
    """The device-plugin link served by NVIDIA's DRA kubelet plugin: ready is working (its GPUs are
    ResourceSlices, never node capacity), held in its init container is the driver it waits for, else its
    pod's failure read as any operand's."""
    if state.ready:
        return Result(LinkState.OK, "NVIDIA DRA kubelet plugin Running: GPUs published as ResourceSlices")
    if state.waiting_init and not state.failing:
        return _held_for_driver(ctx, view, pod, state)
    return not_ready(
        ctx,
        view,
        DEVICE_PLUGIN,
        "device-plugin",
        WHAT,
        state,
        log,
        f"the {WHAT} is {state.status}, so the node's GPUs are published to no ResourceSlice.",
    )
