"""Kubelet releases whose device manager has a known defect (kubelet_defects.yaml), matched on the node's kubelet
version and what the node and its pods show, so a finding names the node's kubelet and the patch release that
repairs it instead of the device plugin or the GPU it looks like.

Two symptoms are read. A device resource whose allocatable reads 0 while its capacity still counts the GPUs, after
the device plugin registered again, with no GPU failure on record: on an affected kubelet that is its device manager
not updating allocatable, not a lost GPU. Pods whose containers had run, failed at admission with
UnexpectedAdmissionError: on an affected kubelet that is its restart admitting again the pods it was running, not
GPUs gone unhealthy. A kubelet outside the listed ranges, or a node that shows a GPU failure, is left to the checks
of the GPU and the plugin.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.xid_events import PLUGIN_XID
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import Release, release_of
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN
from gpuchain.remediation.model import node_view

#: The symptoms an entry may name (kubelet_defects.yaml says what each is).
SYMPTOMS = ("allocatable-zero", "running-pods-rejected", "besteffort-topology-refused", "admitted-before-registration")
#: The finding every entry's match gives: the node's own kubelet is the broken link.
FINDING = "node.kubelet-defect"
#: The kubelet's reason for a pod its admission refused (kubernetes pkg/kubelet/cm/admission/errors.go).
REFUSED = "UnexpectedAdmissionError"
#: The device manager's refusals for a resource it has no healthy or registered devices of (catalog.yaml): what its
#: admission says of pods it admits before the device plugin has registered again.
UNSERVED = ("kubelet.unhealthy-devices", "kubelet.device-plugin-unregistered")
#: The finding where no known release explains it but the plugin's own device list says the GPUs are healthy.
STALE = "node.kubelet-allocatable-stale"
#: Google's plugin's log of each device list it sends (beta_plugin.go "ListAndWatch: send devices %v"), and the
#: health of each device in it (the v1beta1 Device's String(): "&Device{ID:nvidia0,Health:Healthy,}").
SENT = "ListAndWatch: send devices"
HEALTH = re.compile(r"Health:(\w+)")
#: The catalog's words for a GPU NVML lost: a GPU that failed is the GPU's, whatever the kubelet's release.
LOST = "nvml.gpu-lost"


@dataclass(frozen=True, kw_only=True)
class KubeletDefect:
    """One defect of the kubelet's device manager, the releases it affects and the patch releases that fixed it."""

    id: str
    symptom: str
    affected: tuple[tuple[str, str], ...]  #: [first affected, first fixed) on one minor branch each
    fixed_from: str  #: the first minor release that had the fix from its start
    change: str
    workaround: str
    cause: str
    source: str
    line: str
    #: every release before this one has the defect and its branch no fix ("": none such)
    unfixed_before: str = ""

    def fixed_for(self, version: str) -> str:
        """The patch release of ``version``'s branch that carries the fix, where ``version`` is affected; on a branch
        that got no fix, the releases of later branches that carry it ("" where it is not affected, or names no
        release)."""
        seen = release_of(version)
        if seen is None:
            return ""
        if self.unfixed_before and seen < _at(self.unfixed_before):
            later = ", ".join(f"{_past_known(high)} or later" for _, high in self.affected)
            return f"a release of a later branch: {later}, or any from {self.fixed_from}"
        return next((_past_known(high) for low, high in self.affected if _at(low) <= seen < _at(high)), "")

    def cite(self) -> str:
        """The evidence line a finding carries for this entry."""
        return f"kubelet defect: {self.id} ({self.source})"


def _at(version: str) -> Release:
    """The release ``version`` names; the data's versions all name one (`_defect` checks)."""
    found = release_of(version)
    if found is None:
        raise ValueError(f"kubelet defect: {version!r} names no release")
    return found


def _past_known(release: str) -> str:
    """``release``, or where another known defect affects it, the patch release of its branch that fixes that one too
    (a backport that brought a regression), so a fix names a release free of both."""
    for other in kubelet_defects():
        seen = release_of(release)
        later = next((high for low, high in other.affected if seen and _at(low) <= seen < _at(high)), "")
        if later:
            return _past_known(later)
    return release


def _defect(raw: dict[str, Any]) -> KubeletDefect:
    found = KubeletDefect(
        **{**raw, "affected": tuple((str(low), str(high)) for low, high in raw["affected"])},
    )
    branches = [(_at(low), _at(high)) for low, high in found.affected]
    if found.symptom not in SYMPTOMS or not branches:
        raise ValueError(f"kubelet defect {found.id}: symptom or affected ranges are not ones gpuchain reads")
    if any(low.numbers[:2] != high.numbers[:2] or not low < high for low, high in branches):
        raise ValueError(f"kubelet defect {found.id}: each affected range is one minor branch, its fix after it")
    if any(high.numbers[:2] >= _at(found.fixed_from).numbers[:2] for _, high in branches):
        raise ValueError(f"kubelet defect {found.id}: fixed_from is the first minor release past every range")
    return found


@functools.cache
def kubelet_defects() -> tuple[KubeletDefect, ...]:
    """Every entry of kubelet_defects.yaml."""
    text = resources.files("gpuchain.doctor").joinpath("kubelet_defects.yaml").read_text()
    return tuple(_defect(raw) for raw in yaml.safe_load(text))


def _showing(symptom: str) -> tuple[KubeletDefect, ...]:
    """The entries that show as ``symptom``, at any release."""
    return tuple(d for d in kubelet_defects() if d.symptom == symptom)


def kubelet_defect(node: Obj, symptom: str) -> tuple[KubeletDefect, str] | None:
    """The known defect of ``node``'s kubelet (status.nodeInfo.kubeletVersion) that shows as ``symptom``, with the
    patch release of its branch that fixed it; None where its release has none known."""
    version = str(node_info(node).get("kubeletVersion", ""))
    for found in kubelet_defects():
        fixed = found.fixed_for(version) if found.symptom == symptom else ""
        if fixed:
            return found, fixed
    return None


def kubelet_upgrade(view: NodeView, found: KubeletDefect, fixed: str) -> str:
    """How the node gets a kubelet with the fix: its patch release (or any minor release from the one that had it
    from the start), through the managed cloud's pool upgrade where the node is one."""
    version = node_info(view.node).get("kubeletVersion", "?")
    target = (
        f"upgrade the node's kubelet from {version} to {fixed} or later (the patch release of its branch that "
        f"carries {found.change}; {found.fixed_from} and later have it from the start)"
        if release_of(fixed) is not None
        else f"upgrade the node's kubelet from {version}, whose branch got no fix, to {fixed}: they carry "
        f"{found.change}"
    )
    image = node_image(view.node)
    if image is not None and image.upgrade:
        return f"{target}: on {image.cloud}, move the node pool to a version with that kubelet ({image.upgrade})"
    return target


def kubelet_fix(view: NodeView, found: KubeletDefect, fixed: str, *, action: str, why: str) -> Fix:
    """The node work a kubelet defect asks for: ``action`` (`kubelet_upgrade`'s words, with what to do until then),
    no drain of its own; ``why`` says what keeps the simulator from applying it."""
    return Fix(FixOp.NODE, view.name, {"action": action, "drain": False, NOT_SIMULATED: why})


def recreate_pods(refs: list[tuple[str, str]]) -> str:
    """The commands that delete the first five of ``refs`` (namespace, name), so their controllers create them
    again: one delete per pod, since kubectl applies the last -n to every name of one command."""
    return " && ".join(f"kubectl delete pod -n {ns} {name}" for ns, name in refs[:5])


def gpu_failed(view: NodeView, log: str) -> bool:
    """Does anything on record say a GPU of the node failed: an Xid the plugin logged, NVML losing a GPU (in its
    log or the node's Events), a failure of a link under the plugin in its log, or a fault gpuchain's repair loop
    published on the node?"""
    events = "\n".join(str(e.get("message", "")) for e in view.events)
    said = catalog.known_error(log)
    return (
        bool(node_view(view.node).faults)
        or PLUGIN_XID.regex.search(log) is not None
        or catalog.find("\n".join([log, events]), LOST) is not None
        or (said is not None and said.entry.link != "device-plugin")
    )


def reported_healthy(log: str) -> tuple[int, str]:
    """How many devices the plugin's last device list to the kubelet names, where every one is Healthy, and that
    line: Google's plugin logs each list it sends ("ListAndWatch: send devices %v", GoogleCloudPlatform/
    container-engine-accelerators pkg/gpu/nvidia/beta_plugin.go); (0, "") where its log has none or one is not."""
    sent = [ln.strip() for ln in log.splitlines() if SENT in ln]
    if not sent:
        return 0, ""
    health = HEALTH.findall(sent[-1])
    return (len(health), sent[-1]) if health and all(h == "Healthy" for h in health) else (0, "")


def allocatable_held(ctx: Context, view: NodeView, *, res: str, cap: int, alloc: int) -> Finding | None:
    """``res`` counted in capacity but 0 in allocatable while the GPUs are healthy: on a kubelet whose device
    manager keeps a re-registered plugin's devices out of allocatable (the plugin's container restarted, so it
    registered again), or on any kubelet where the plugin's own last device list names them all Healthy (the
    kubelet is not counting what its plugin reports). None where a GPU failure is on record, or neither holds."""
    plugin = view.pod(DEVICE_PLUGIN)
    if alloc != 0 or cap <= 0 or plugin is None:
        return None
    statuses = (plugin.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    log = ctx.log(plugin, ctx.container(DEVICE_PLUGIN))
    known = kubelet_defect(view.node, "allocatable-zero") if restarts else None
    healthy, line = reported_healthy(log)
    if (known is None and healthy < cap) or gpu_failed(view, log):
        return None
    state = pod_state(plugin)
    ns = state.restart_in(ctx.namespace)
    version = node_info(view.node).get("kubeletVersion")
    restart = (
        f"systemctl restart kubelet, then kubectl -n {ns} delete pod {state.name}, so the device plugin registers "
        "with the restarted kubelet and allocatable counts the GPUs again"
    )
    said = [f"{res}: capacity {cap}, allocatable 0", f"status.nodeInfo.kubeletVersion: {version}"]
    if known is None:
        why = (
            f"the device plugin's last device list to the kubelet names {healthy} device(s), all Healthy, yet the "
            "kubelet counts none in allocatable: it is not counting what its plugin reports (the registration it "
            "keeps is not the plugin's current one)"
        )
        evidence = [*said, f"device plugin log: {line}"]
        fixes = ", ".join(f"{d.change} in {', '.join(h for _, h in d.affected)}" for d in _showing("allocatable-zero"))
        lasting = (
            f"if it recurs at the plugin's restarts, upgrade the kubelet (known races of this kind fixed: {fixes})"
        )
        fid = STALE
    else:
        found, fixed = known
        why = f"the node's kubelet ({version}) has a known defect: {found.cause}"
        evidence = [
            *said[:1],
            f"{said[1]} (fixed in {fixed})",
            f"{state.describe()}: its container restarted {restarts} time(s), so it registered again",
            found.cite(),
            f"release note: {found.line}",
            f"until then: {found.workaround}",
        ]
        lasting = f"so it does not come back at the plugin's next restart, {kubelet_upgrade(view, found, fixed)}"
        fid = FINDING
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{restart}; {lasting}",
            "drain": False,
            NOT_SIMULATED: "what a kubelet holds of a plugin's registration is a fact of the node no scenario names",
        },
    )
    return node_finding(
        view,
        fid=fid,
        sev=Severity.ERROR,
        link="node",
        cause=f"{res} is {cap} in capacity and 0 in allocatable, and {why} The GPUs have not failed: no Xid, lost "
        "GPU or published fault is on record.",
        evidence=evidence,
        fix=ctx.stack.render(action),
        action=action,
    )


def _refused_now_served(view: NodeView, message: str) -> list[str]:
    """The device resources the kubelet's admission ``message`` says it had no healthy or registered devices of,
    that the node now advertises whole (allocatable equal to a capacity above 0): the refusal came while the plugin
    was not yet registered again, not from GPUs that stay unhealthy. [] where the message is another refusal."""
    if catalog.find(message, *UNSERVED) is None:
        return []
    status = view.node.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    named = [r for r in capacity if "/" in r and r in message] or [r for r in capacity if r.startswith("nvidia.com/")]
    return [r for r in named if 0 < _count(capacity.get(r)) == _count(allocatable.get(r, capacity.get(r)))]


def _count(quantity: object) -> int:
    """A device resource's quantity as a number (0 where it is none)."""
    return int(str(quantity)) if str(quantity).isdigit() else 0


def running_rejected(ctx: Context, view: NodeView, refused: list[Obj]) -> Finding | None:
    """GPU pods failed at admission (``refused``: the kubelet's UnexpectedAdmissionError Events) because the device
    manager had no healthy or registered devices for them, while the node now advertises those devices whole, on a
    kubelet whose restart admits its running pods again before the device plugin has registered (the failed pods
    are not in the snapshot, which leaves finished pods out: the Events name them). None where the kubelet's
    release has no such defect, the refusal is another, the GPUs are still short, or a GPU failed."""
    known = kubelet_defect(view.node, "running-pods-rejected")
    if known is None or not refused:
        return None
    message = str(refused[0].get("message", ""))
    served = _refused_now_served(view, message)
    plugin = view.pod(DEVICE_PLUGIN)
    log = ctx.log(plugin, ctx.container(DEVICE_PLUGIN)) if plugin is not None else ""
    if not served or gpu_failed(view, log):
        return None
    ran = sorted(
        {
            (str((e.get("involvedObject") or {}).get("namespace")), str((e.get("involvedObject") or {}).get("name")))
            for e in refused
        }
    )
    found, fixed = known
    action = kubelet_fix(
        view,
        found,
        fixed,
        action=f"{kubelet_upgrade(view, found, fixed)}; until it runs, restart this node's kubelet only with its GPU "
        "pods drained",
        why="a kubelet's release is a fact of the node no scenario names",
    )
    recreate = recreate_pods(ran)
    return node_finding(
        view,
        fid=FINDING,
        sev=Severity.ERROR,
        link="node",
        cause=f"pods that were running on the node with their GPUs failed at admission, and the node's kubelet "
        f"({node_info(view.node).get('kubeletVersion')}) has a known defect: {found.cause} The GPUs have not "
        "failed: no Xid, lost GPU or published fault is on record.",
        evidence=[
            f"event {REFUSED} (kubelet): {message}",
            f"pods failed at admission: {', '.join(f'{ns}/{name}' for ns, name in ran[:5])}",
            f"now advertised whole: {', '.join(served)} (allocatable equals capacity)",
            f"status.nodeInfo.kubeletVersion: {node_info(view.node).get('kubeletVersion')} (fixed in {fixed})",
            found.cite(),
            f"release note: {found.line}",
            f"until then: {found.workaround}",
        ],
        fix=f"{recreate}   # the failed pods, so their controllers create them again; then "
        + ctx.stack.render(action).removeprefix("# "),
        action=action,
    )
