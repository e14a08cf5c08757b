"""A device plugin release that refuses a MIG-enabled GPU without MIG devices under the mixed strategy.

Device plugin releases v0.13.0 to v0.15.x fail to start with "device %v has an invalid MIG configuration" on a GPU in
MIG mode with no MIG device, whatever the strategy; from v0.16.0 the mixed strategy only warns about it and serves the
node's other GPUs (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.16.0, releases.yaml). Under mig-strategy single an empty
GPU is the MIG layout's fault (`device_plugin._mig_empty`); under mixed, a GPU left without slices is a layout the user
may want (slices created later, on demand), and what refuses the node is the plugin's release: the device plugin link.
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.model import LinkState, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.releases import showing
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The message only the refusing releases log as an error (catalog.yaml).
REFUSED_UNDER_MIXED = "k8s-device-plugin.mig-device-invalid"
#: The strategy as GFD labels the node, and as the plugin takes it (env MIG_STRATEGY, flag --mig-strategy).
STRATEGY_LABEL = "nvidia.com/mig.strategy"
STRATEGY_ARG = re.compile(r"--mig-strategy[= ](\w+)")


def _templated(ctx: Context, pod: Obj | None) -> Obj | None:
    """The pod as its DaemonSet makes it now (its template's spec): the release the next pod runs."""
    if pod is None:
        return None
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec")
    return {"metadata": pod.get("metadata") or {}, "spec": template} if template else None


def _strategy(ctx: Context, view: NodeView, pod: Obj | None) -> str:
    """The plugin's MIG strategy: the node's GFD label, else its container's env or flag (pod, then template)."""
    if view.labels.get(STRATEGY_LABEL):
        return view.labels[STRATEGY_LABEL]
    for spec in ((p or {}).get("spec") or {} for p in (pod, _templated(ctx, pod))):
        for container in spec.get("containers") or []:
            env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or []}
            flag = STRATEGY_ARG.search(" ".join(str(a) for a in container.get("args") or []))
            if env.get("MIG_STRATEGY") or flag:
                return env.get("MIG_STRATEGY") or (flag.group(1) if flag else "")
    return ""


def mixed_refusal(ctx: Context, *, view: NodeView, said: str, evidence: list[str], layout: str) -> Result | None:
    """The device plugin link broken by its release where it refuses a MIG GPU without MIG devices under the mixed
    strategy, with the release that only warns (the plugin's image or chart, as `release_repair` sets it) and, until
    then, ``layout`` (the MIG layout's repair). None under another strategy or for another message."""
    plugin = view.pod(DEVICE_PLUGIN)
    if said != REFUSED_UNDER_MIXED or _strategy(ctx, view, plugin) != "mixed":
        return None
    shown = showing("log", said)
    release = release_repair(ctx, view=view, pod=plugin, operand=DEVICE_PLUGIN, shown=shown) or release_repair(
        ctx, view=view, pod=_templated(ctx, plugin), operand=DEVICE_PLUGIN, shown=shown
    )
    entry = catalog.entry(said)
    fix = f"{release.fix}; until then: {layout}" if release else entry.fix
    return Result(
        LinkState.BROKEN,
        "device plugin release refuses a MIG GPU without MIG devices",
        (
            node_finding(
                view,
                fid="device-plugin.not-ready",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=f"the device plugin runs with mig-strategy mixed and refuses to start: {entry.cause}",
                evidence=[
                    *evidence,
                    f"mig strategy mixed ({STRATEGY_LABEL} or the plugin's MIG_STRATEGY)",
                    *(release.evidence if release else ()),
                ],
                fix=fix,
                action=release.action if release else None,
            ),
        ),
    )
