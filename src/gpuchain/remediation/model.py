"""What the node side publishes and the controller reads: names, and the two JSON annotations.

The controller runs somewhere else and sees only the API server, so everything it needs about a
node's GPUs travels on the Node object:

- condition ``GPUHealthy`` (``False`` while any device is unhealthy; the message names UUIDs and
  XIDs for people),
- annotation ``gpuchain.io/gpu-faults``: the unhealthy devices, structured for the controller,
- annotation ``gpuchain.io/gpu-pods``: which containers hold which device, from the kubelet's
  pod-resources API (``{"GPU-…": ["ns/pod/container", …]}``).

This module only encodes and decodes them (pure); the publisher writes them, the controller reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuchain.common.labels import GPU_PRESENT
from gpuchain.gpu.probes import PROBES, probe_resolution
from gpuchain.gpu.xid import Resolution, XidTable, worst, xid_table
from gpuchain.kube.gpu_resources import node_gpu_resources

CONDITION_TYPE = "GPUHealthy"
FAULTS_ANNOTATION = "gpuchain.io/gpu-faults"
PODS_ANNOTATION = "gpuchain.io/gpu-pods"
TAINT_KEY = "gpuchain.io/gpu-reset-required"
CORDONED_BY_ANNOTATION = "gpuchain.io/cordoned-by"
"""Who cordoned the node. The remediator writes ``CORDONED_BY_REMEDIATOR`` and only ever
uncordons nodes carrying exactly that value: another tool or a person may use the same key."""
CORDONED_BY_REMEDIATOR = "remediator"

REASON_HEALTHY = "GPUsHealthy"
REASON_XID = "GPUXidError"
REASON_LOST = "GPULost"


class AnnotationError(ValueError):
    """A published annotation is not the JSON shape this module writes; the message names it."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One unhealthy device as the node publishes it.

    ``uuid`` is the failed GPU or MIG device; ``gpu`` its physical GPU; ``covers`` every device id
    the failure takes down (a whole GPU covers its MIG devices too), which is what pods are matched
    against; ``xids`` the counted XIDs; ``lost`` the GPU stopped answering; ``repeated`` the XIDs
    that crossed their count-in-window threshold on the node (they need the threshold's resolution).
    """

    uuid: str
    gpu: str
    xids: tuple[int, ...] = ()
    lost: bool = False
    covers: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    """Conditions read from the GPU's counters (``gpu.probes``), e.g. ``row-remap-pending``."""
    repeated: tuple[int, ...] = ()
    resolution: Resolution | None = None
    """What the node's publisher computed with the node's own XID table (``gpu-health
    --xid-resolution`` overrides and thresholds); None in annotations written before nodes
    published it, in faults built without a node, and when the value is not one this version knows."""
    unknown_resolution: str = ""
    """A published resolution this version does not know (a newer gpu-health during a rolling
    upgrade): the fault is judged by the shipped table instead, and its summary, which Events and
    the remediator's report carry, says so. One fault's unreadable verdict is no reason to leave the
    whole node alone, a lost GPU included."""

    def needs(self, table: XidTable | None = None) -> Resolution:
        """The most disruptive resolution any of its evidence asks for, by the XID table (``table``:
        one with the config's overrides): a lost GPU needs the node rebooted, a probe what the
        probe needs, an XID its row's resolution (its threshold's when repeated). A fault without
        evidence (the event stream broke) needs a reset: nothing vouches for the GPU."""
        if self.lost:
            return Resolution.REBOOT_NODE
        rows = table or xid_table()
        found = [rows.needs(x, x in self.repeated) for x in self.xids]
        found.extend(probe_resolution(p) for p in self.probes)
        return worst(found) if found else Resolution.RESET_GPU

    @property
    def action(self) -> Resolution:
        """What the remediator acts on: the node's verdict, so an XID the node's operator declared
        harmless (``109=none``) or escalated (``13=reboot@2/1h``) is treated as the node's repair
        loop treats it; ``needs()`` by the shipped table when the node published no verdict."""
        return self.resolution if self.resolution is not None else self.needs()

    @property
    def harmless(self) -> bool:
        """Nothing to do for its pods or its node: the GPU still answers and every XID and probe it
        has needs nothing (NVIDIA's IGNORE; a retired-page count at its limit): it is reported."""
        return bool(self.xids or self.probes) and not self.lost and self.action is Resolution.NONE

    def summary(self) -> str:
        """``GPU-…: XID 79 (GPU has fallen off the bus)`` — the form condition messages and Events use."""
        rows = xid_table()
        parts = [f"XID {x} ({rows.describe(x).meaning}{', repeated' if x in self.repeated else ''})" for x in self.xids]
        parts.extend(PROBES.get(p, p) for p in self.probes)
        if self.lost:
            parts.append("lost (not answering)")
        unknown = (
            f" (published resolution {self.unknown_resolution!r} is unknown to this gpuchain: judged as "
            f"{self.action.value} by its own table)"
            if self.unknown_resolution
            else ""
        )
        return f"{self.uuid}: {', '.join(parts) or 'unhealthy'}{unknown}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"gpu": self.gpu, "xids": list(self.xids)}
        if self.lost:
            data["lost"] = True
        if self.covers and self.covers != (self.uuid,):
            data["covers"] = list(self.covers)
        if self.probes:
            data["probes"] = list(self.probes)
        if self.repeated:
            data["repeated"] = list(self.repeated)
        if self.resolution is not None:
            data["resolution"] = self.resolution.value
        elif self.unknown_resolution:
            data["resolution"] = self.unknown_resolution  # written back as the node published it
        return data


def encode_faults(faults: Mapping[str, Fault]) -> str:
    """The faults annotation value: ``{uuid: {gpu, xids, lost?, covers?, probes?, repeated?,
    resolution?}}`` with sorted keys (stable)."""
    return json.dumps({u: f.to_json() for u, f in sorted(faults.items())}, sort_keys=True, separators=(",", ":"))


_RESOLUTIONS = frozenset(r.value for r in Resolution)


def decode_faults(text: str | None) -> dict[str, Fault]:
    """Parse the faults annotation (absent or empty: no faults). An entry without ``resolution``
    (written by a gpu-health from before nodes published their verdict), or with one this version
    does not know (``Fault.unknown_resolution``), is judged by the shipped XID table. Raises
    AnnotationError naming the key for what is not the shape gpu-health writes."""
    data = load_annotation(FAULTS_ANNOTATION, text=text, empty={})
    faults: dict[str, Fault] = {}
    for uuid, item in data.items():
        if not isinstance(item, dict):
            raise AnnotationError(f"{FAULTS_ANNOTATION}: {uuid}: expected an object, got {type(item).__name__}")
        try:
            xids = tuple(int(x) for x in item.get("xids", ()))
            covers = tuple(str(c) for c in item.get("covers", ())) or (uuid,)
            probes = tuple(str(p) for p in item.get("probes", ()))
            repeated = tuple(int(x) for x in item.get("repeated", ()))
            verdict = item.get("resolution")
            resolution = Resolution(verdict) if isinstance(verdict, str) and verdict in _RESOLUTIONS else None
            unknown = "" if verdict is None or resolution is not None else str(verdict)
            faults[uuid] = Fault(
                uuid=uuid,
                gpu=str(item.get("gpu", uuid)),
                xids=xids,
                lost=bool(item.get("lost", False)),
                covers=covers,
                probes=probes,
                repeated=repeated,
                resolution=resolution,
                unknown_resolution=unknown,
            )
        except (TypeError, ValueError) as exc:
            raise AnnotationError(f"{FAULTS_ANNOTATION}: {uuid}: {exc}") from None
    return faults


def encode_pods(pods: Mapping[str, tuple[str, ...]]) -> str:
    """The pods annotation value: ``{device uuid: ["ns/pod/container", ...]}``, devices with no pod left out."""
    return json.dumps({u: sorted(refs) for u, refs in sorted(pods.items()) if refs}, separators=(",", ":"))


def decode_pods(text: str | None) -> dict[str, tuple[str, ...]]:
    """Parse the pods annotation. Raises AnnotationError naming the key and the bad entry."""
    data = load_annotation(PODS_ANNOTATION, text=text, empty={})
    pods: dict[str, tuple[str, ...]] = {}
    for uuid, refs in data.items():
        if not isinstance(refs, list) or not all(isinstance(r, str) and r.count("/") == 2 for r in refs):
            raise AnnotationError(f"{PODS_ANNOTATION}: {uuid}: expected a list of 'namespace/pod/container'")
        pods[uuid] = tuple(refs)
    return pods


def load_annotation(key: str, *, text: str | None, empty: dict[str, Any]) -> dict[str, Any]:
    """The JSON object an annotation holds (``empty`` when absent or empty); AnnotationError naming
    ``key`` when it is not JSON or not an object."""
    if not text:
        return empty
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"{key}: not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict):
        raise AnnotationError(f"{key}: expected a JSON object, got {type(data).__name__}")
    return data


@dataclass(frozen=True, kw_only=True)
class Condition:
    """The GPUHealthy condition as found on a Node."""

    status: str
    reason: str = ""
    message: str = ""
    last_transition: str = ""

    @property
    def healthy(self) -> bool:
        return self.status == "True"


def find_condition(node: Mapping[str, Any], kind: str = CONDITION_TYPE) -> Condition | None:
    """The node's condition of type ``kind``, or None when it has none."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return Condition(
                status=str(c.get("status", "Unknown")),
                reason=str(c.get("reason", "")),
                message=str(c.get("message", "")),
                last_transition=str(c.get("lastTransitionTime", "")),
            )
    return None


def condition_for(faults: Mapping[str, Fault]) -> tuple[str, str, str]:
    """(status, reason, message) of GPUHealthy for these faults."""
    if not faults:
        return "True", REASON_HEALTHY, "all GPUs healthy"
    reason = REASON_LOST if any(f.lost for f in faults.values()) else REASON_XID
    message = "; ".join(f.summary() for _, f in sorted(faults.items()))
    return "False", reason, f"{len(faults)} unhealthy: {message}"


@dataclass(frozen=True, kw_only=True)
class NodeGpus:
    """The controller's view of one node: what its publisher said, and what the node looks like."""

    name: str
    condition: Condition | None
    faults: Mapping[str, Fault] = field(default_factory=dict)
    pods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False
    cordoned_by_us: bool = False
    gpu_node: bool = True
    error: str | None = None
    """Set when an annotation could not be read: the node is reported and left alone."""
    resource_version: str | None = None
    """The version this view was read at: patches that replace a list (taints) carry it as a precondition."""

    @property
    def unhealthy(self) -> bool:
        return self.condition is not None and not self.condition.healthy

    @property
    def tainted(self) -> bool:
        return any(t.get("key") == TAINT_KEY for t in self.taints)


def node_view(node: Mapping[str, Any]) -> NodeGpus:
    """Read a Node object into a NodeGpus; a bad annotation sets ``error`` instead of raising."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    spec = node.get("spec") or {}
    condition = find_condition(node)
    gpu_node = (
        condition is not None
        or labels.get(GPU_PRESENT) == "true"
        or any(n > 0 for n in node_gpu_resources(node).values())
    )
    error = None
    faults: dict[str, Fault] = {}
    pods: dict[str, tuple[str, ...]] = {}
    try:
        faults = decode_faults(annotations.get(FAULTS_ANNOTATION))
        pods = decode_pods(annotations.get(PODS_ANNOTATION))
    except AnnotationError as exc:
        error = str(exc)
    return NodeGpus(
        name=str(meta.get("name", "")),
        condition=condition,
        faults=faults,
        pods=pods,
        taints=tuple(spec.get("taints") or ()),
        unschedulable=bool(spec.get("unschedulable", False)),
        cordoned_by_us=annotations.get(CORDONED_BY_ANNOTATION) == CORDONED_BY_REMEDIATOR,
        gpu_node=gpu_node,
        error=error,
        resource_version=meta.get("resourceVersion"),
    )
