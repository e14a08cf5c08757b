"""NVIDIA's DRA kubelet plugin left running from before the driver's current incarnation.

The plugin enumerates the GPUs and the driver once, at its start: it publishes each GPU with the driver's release as
the device attribute ``driverVersion`` (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go@v25.8.0, the
release NVML gives, semver-normalised: 570.172.08 is "570.172.8") and writes the CDI specs whose edits mount the
driver's libraries, by their versioned names, into each claim's containers (cdi.go: the common edits under the driver
root). A driver reloaded under it at another release (the driver container recreated, an upgrade) leaves the plugin
serving the old driver's view: new claims get CDI edits naming libraries that are no longer there, so the runtime
cannot create their containers ("no such file or directory" for libcuda.so.<old release>), and the plugin keeps
saying so until it is restarted. The GPU Operator's k8s-driver-manager drains the plugin across driver reloads from
v0.12.0, where the node carries nvidia.com/gpu.deploy.dra-driver (NVIDIA/k8s-driver-manager cmd/driver-manager/
main.go@v0.12.0 evictKubeletPlugin, NVIDIA/k8s-driver-manager#203: "Otherwise the `kubelet-plugin` keeps serving
CDI specs enumerated against the old driver and GPU claims fail until it is manually restarted").

What says the plugin is older than the driver: its ResourceSlice's driverVersion against the driver the node runs
(`driver_running`), or a container on the node whose runtime cannot mount a driver library of another release than
the node's driver. A plugin container that started after the driver's current run enumerated that driver, and is
not this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.dra_conflict import GPU_DRA_DRIVERS
from gpuchain.doctor.driver_running import Running, release_key, running_driver
from gpuchain.doctor.evidence import refused_message
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Fix, LinkState, Severity
from gpuchain.doctor.pods import PodState, first_running
from gpuchain.doctor.releases import release_of
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER

#: A driver library by its versioned file name (libcuda.so.570.172.08, libnvidia-ml.so.580.95.05), as a CDI spec's
#: mounts name them, in a runtime's refusal that says the file is not there (ENOENT, as Go and runc write it).
MISSING_LIBRARY = re.compile(
    r"(?P<path>/[\w./-]*?/?lib[\w-]+\.so\.(?P<release>\d{3}\.\d{1,3}(?:\.\d{1,3})?))\b[^\n]{0,400}?no such file"
)
#: The node label by which the driver manager knows the DRA driver's kubelet plugin runs on the node, which it stops
#: before it replaces the driver (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0).
DRA_DRIVER_DEPLOY = "nvidia.com/gpu.deploy.dra-driver"
#: The first k8s-driver-manager release that drains the DRA kubelet plugin across a driver reload.
DRAINS_PLUGIN = "v0.12.0"
#: The driver manager's setting by which it pauses, across a reload, the pods of DaemonSets that select on a node
#: label of the user's (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0).
EVICTION_LABEL = "NODE_LABEL_FOR_GPU_POD_EVICTION"


@dataclass(frozen=True)
class Stale:
    """What shows the plugin serves an older driver: the release it serves and the evidence lines."""

    release: str
    evidence: tuple[str, ...]


def _slice_release(ctx: Context, view: NodeView) -> tuple[str, str] | None:
    """The driver release the GPU DRA driver's ResourceSlices of this node publish (its devices' driverVersion),
    with the slice's name; None where no device carries one. The slices are read once a diagnosis for every node
    (`Context.memo`), not once for each node whose plugin is asked."""
    known = ctx.memo.get("dra_slice_releases")
    if not isinstance(known, dict):
        found: dict[str, tuple[str, str]] = {}
        for s in ctx.snapshot.resource_slices:
            spec = s.get("spec") or {}
            node = spec.get("nodeName")
            if spec.get("driver") not in GPU_DRA_DRIVERS or not isinstance(node, str) or node in found:
                continue
            for device in spec.get("devices") or []:
                attribute = ((device.get("attributes") or {}).get("driverVersion")) or {}
                if attribute.get("version"):
                    found[node] = (str(attribute["version"]), name_of(s))
                    break
        known = ctx.memo["dra_slice_releases"] = found
    return cast("tuple[str, str] | None", known.get(view.name))


def _missing_libraries(view: NodeView, now: tuple[int, ...]) -> list[tuple[Obj, str, str]]:
    """The pods on this node whose containers the runtime cannot create because a driver library of another release
    than ``now`` is not there: each with the library's path and release."""
    out = []
    for pod in view.workloads:
        said = MISSING_LIBRARY.search(refused_message(view, pod))
        if said and release_key(said.group("release")) != now:
            out.append((pod, said.group("path"), said.group("release")))
    return out


def _driver_restarted(pod: Obj | None) -> str:
    """The evidence line of the driver container's restarts ("" where it never restarted)."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("restartCount"):
            return f"driver pod {name_of(pod or {})}: container {cs.get('name')} restarted {cs['restartCount']} time(s)"
    return ""


def stale(ctx: Context, view: NodeView, pod: Obj) -> tuple[Stale, Running] | None:
    """Whether the DRA plugin ``pod`` serves another driver release than the node runs, and which; None where
    nothing shows it, or the plugin started after the driver's current run."""
    driver = running_driver(ctx, view)
    now = release_key(driver.release) if driver else None
    if driver is None or now is None:
        return None
    driver_pod = view.pod(DRIVER)
    plugin_start, driver_start = first_running(pod)[1], first_running(driver_pod)[1]
    if plugin_start and driver_start and plugin_start > driver_start:
        return None  # it enumerated the driver that runs now
    published = _slice_release(ctx, view)
    if published is not None and release_key(published[0]) != now:
        return Stale(published[0], (f"ResourceSlice {published[1]}: devices' driverVersion {published[0]}",)), driver
    missing = _missing_libraries(view, now)
    if not missing:
        return None
    first, path, release = missing[0]
    evidence = (
        f"pod {namespace_of(first)}/{name_of(first)}: the runtime cannot mount {path} (no such file): a library of "
        f"driver {release}",
        f"{len(missing)} pods on the node refused alike" if len(missing) > 1 else "",
    )
    return Stale(release, evidence), driver


def _manager_version(ctx: Context) -> str:
    """The k8s-driver-manager release the ClusterPolicy names ("" where it names none)."""
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}
    return str((spec.get("manager") or {}).get("version") or "")


def _prevent(ctx: Context, view: NodeView) -> str:
    """How the plugin is kept from outliving the next driver reload: the GPU Operator's driver manager draining it
    (its release, the node label it goes by), else a restart of the plugin with each driver upgrade."""
    if view.pod(DRIVER) is None:
        return (
            "restart the DRA kubelet plugin after every driver upgrade on the node (kubectl rollout restart of its "
            "DaemonSet), as it reads the driver once, at its start"
        )
    running = release_of(_manager_version(ctx), "k8s-driver-manager")
    steps = [
        *(
            ()
            if running is not None and not running < (release_of(DRAINS_PLUGIN) or running)
            else (f"run k8s-driver-manager {DRAINS_PLUGIN} or later (spec.driver.manager.version of {ctx.policy_ref})",)
        ),
        *(() if view.labels.get(DRA_DRIVER_DEPLOY) else (f"label the node {DRA_DRIVER_DEPLOY}=true",)),
        f"have the DRA plugin's DaemonSet select nodes by {DRA_DRIVER_DEPLOY}=true",
    ]
    return (
        f"to keep it from recurring at the next driver reload, {', '.join(steps)}: the driver manager then drains the "
        "kubelet plugin before it reloads the driver (NVIDIA/k8s-driver-manager#203); for a DRA driver the operator "
        f"does not deploy, set {EVICTION_LABEL} in spec.driver.manager.env to a node label its DaemonSet's "
        "nodeSelector requires, which the driver manager pauses across the reload"
    )


def check_stale_plugin(ctx: Context, *, view: NodeView, pod: Obj, state: PodState) -> Result | None:
    """The ready DRA plugin that serves a driver older than the node's current one (`stale`): recreated, it
    enumerates the running driver and rewrites its CDI specs; None where nothing shows it stale."""
    found = stale(ctx, view, pod)
    if found is None:
        return None
    old, driver = found
    ns = namespace_of(pod) or ctx.namespace
    action = Fix.delete_pod(ns, name_of(pod), **{NOT_SIMULATED: "NVIDIA's DRA plugin is not simulated"})
    finding = node_finding(
        view,
        fid="device-plugin.dra-stale-driver",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the NVIDIA DRA kubelet plugin pod {name_of(pod)} serves driver {old.release}, which it enumerated at "
        f"its start, while the node runs driver {driver.release}: the driver was reloaded under it, and the plugin "
        "reads the driver only once, so it keeps publishing the old driver's devices and writing CDI edits that "
        "mount the old driver's libraries, and GPU claims' containers cannot be created until the plugin is recreated.",
        evidence=[
            state.describe(),
            *old.evidence,
            driver.said_by,
            _driver_restarted(view.pod(DRIVER)),
        ],
        fix=ctx.stack.render(action)
        + f"   # the recreated kubelet plugin enumerates driver {driver.release} and rewrites its CDI specs; the "
        f"claims' pods start on the kubelet's next retry; {_prevent(ctx, view)}",
        action=action,
    )
    return Result(
        LinkState.BROKEN, f"DRA plugin serves driver {old.release}, the node runs {driver.release}", (finding,)
    )
