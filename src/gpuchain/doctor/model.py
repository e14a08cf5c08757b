"""What the doctor reports: findings, each node's chain, and the whole report (plain data)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(enum.StrEnum):
    """error: something is broken (exit code 1); warning: probably unintended; info: explained, not a fault."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class LinkState(enum.StrEnum):
    """One link of one node's chain, as the terminal view shows it."""

    OK = "ok"
    DEGRADED = "degraded"  #: works, with a finding (lost GPU, unexpected count)
    BROKEN = "broken"  #: the first broken link; the walk stops here
    NOT_REACHED = "not-reached"  #: above a broken link: waiting, not at fault
    SKIPPED = "skipped"  #: not deployed here (disabled, opted out, not requested)
    NOT_JUDGED = "not-judged"  #: the source lacks what the check needs (a dump without the ClusterPolicy)


#: The links, bottom-up, in the order the doctor walks them.
LINKS = ("driver", "toolkit", "device-plugin", "gfd", "exporter", "mig")
#: The links that must work for anything above them to work.
FOUNDATION = ("driver", "toolkit", "device-plugin")


class FixOp(enum.StrEnum):
    """What kind of change a fix is."""

    LABEL_NODE = "label-node"  #: changes: {key: value, or None to remove}
    LABEL_NAMESPACE = "label-namespace"  #: changes: {key: value, or None to remove} of namespace ``target``
    PATCH_POLICY = "patch-policy"  #: changes: a merge patch of the stack's ClusterPolicy
    PATCH_DAEMONSET = "patch-daemonset"  #: changes: a patch of DaemonSet ``target`` (ns/name); strategic on containers
    CREATE = "create"  #: changes: the object to create
    NODE = "node"  #: work on the node itself (changes["action"]): reimage, restart containerd, upgrade driver
    HARDWARE = "hardware"  #: no command fixes it: changes["action"] names what a person must do
    INSTALL = "install"  #: install a stack (changes["chart"], changes["namespace"])
    UNINSTALL = "uninstall"  #: remove a Helm release (changes["release"], changes["namespace"])
    DELETE = "delete"  #: delete an object (changes: kind, namespace, name); its controller recreates it
    SET_ENV = "set-env"  #: changes: {"env": {name: value}} of the DaemonSet ``target``'s containers
    #: changes: {"container": name, "limits": {resource: quantity}, "kind": "ds" (default) or "deploy"} of ``target``
    SET_LIMITS = "set-limits"
    #: changes: {"patch": merge patch (a JSON patch with "type": "json"), "recreate": bool} of a user's workload
    #: ``target`` ("Kind/namespace/name");
    #: recreate where the object does not take the change in place (a running Job's template, a pod's selector)
    PATCH_WORKLOAD = "patch-workload"
    #: changes: {"remove": ["key:effect", ...]}: taints taken off node ``target``
    TAINT_NODE = "taint-node"


#: The doctor's exit code when the cluster has no GPU node: 0 is "healthy", 1 "broken", 2 bad input.
NO_GPU_NODE = 3

#: ``Fix.changes`` key naming why the simulator cannot apply a fix (nothing in a scenario models
#: what it changes); tests assert the reason rather than pass silently.
NOT_SIMULATED = "notSimulated"


@dataclass(frozen=True)
class Fix:
    """A fix as data: what to change on which object. The stack renders it as commands; the
    simulator applies it to the scenario's facts and re-diagnoses."""

    op: FixOp
    target: str  #: node name, policy name, "namespace/name" of a DaemonSet, "" for install
    changes: dict[str, Any] = field(default_factory=dict)

    @property
    def outside_cluster(self) -> bool:
        """Work on the node or its hardware: no change to the cluster's objects makes it."""
        return self.op in (FixOp.NODE, FixOp.HARDWARE)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"op": self.op.value, "target": self.target, "changes": self.changes}

    @classmethod
    def delete_pod(cls, namespace: str, name: str, **more: Any) -> Fix:
        """Delete pod ``namespace/name`` so its controller starts it again; ``more`` are keys after the
        pod's (a ``fact`` for the simulator, `NOT_SIMULATED`)."""
        return cls(FixOp.DELETE, f"{namespace}/{name}", {"kind": "Pod", "namespace": namespace, "name": name, **more})


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One diagnosis. ``id`` is stable (scripts and tests match on it); ``fix`` is the command
    (or the action, for hardware) as text; ``action`` the same fix as data, where there is one."""

    id: str
    severity: Severity
    link: str
    cause: str
    evidence: tuple[str, ...]
    fix: str
    node: str | None = None
    root: bool = False
    consequences: tuple[str, ...] = ()
    action: Fix | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``-o json``)."""
        return {
            "action": self.action.to_dict() if self.action else None,
            "id": self.id,
            "severity": self.severity.value,
            "link": self.link,
            "node": self.node,
            "root": self.root,
            "cause": self.cause,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "consequences": list(self.consequences),
        }


@dataclass(frozen=True)
class Link:
    """A link's state on one node and a one-line summary of why."""

    name: str
    state: LinkState
    summary: str

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return {"state": self.state.value, "summary": self.summary}


@dataclass(frozen=True)
class NodeChain:
    """One GPU node walked bottom-up."""

    node: str
    links: tuple[Link, ...]
    findings: tuple[Finding, ...] = ()

    @property
    def broken_link(self) -> str | None:
        """The first broken link, if any."""
        return next((lk.name for lk in self.links if lk.state is LinkState.BROKEN), None)

    @property
    def healthy(self) -> bool:
        """No finding at all on this node."""
        return not self.findings

    def state(self, link: str) -> LinkState:
        """The state of one link by name."""
        return next(lk.state for lk in self.links if lk.name == link)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "node": self.node,
            "brokenLink": self.broken_link,
            "links": {lk.name: lk.to_dict() for lk in self.links},
            "findings": [f.id for f in self.findings],
        }


@dataclass(frozen=True, kw_only=True)
class FindingGroup:
    """The same finding on several nodes, shown once with the node list."""

    id: str
    severity: Severity
    root: bool
    nodes: tuple[str, ...]
    first: Finding

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {**self.first.to_dict(), "node": None, "nodes": list(self.nodes), "count": len(self.nodes)}


@dataclass(kw_only=True)
class Report:
    """The doctor's answer for a cluster."""

    chains: list[NodeChain]
    findings: list[Finding]
    gpu_nodes: int
    api_calls: dict[str, int] = field(default_factory=dict)
    cluster_nodes: int = 0  #: every node seen, GPU or not (a report of no GPU node says how many)
    seconds: float = 0.0
    stack: dict[str, Any] = field(default_factory=dict)  #: the stack found (`Stack.to_dict`)
    #: what the source lacks and what the doctor therefore did not judge, one line each (a dump
    #: without the ClusterPolicy: whether a missing operand DaemonSet is a fault)
    not_judged: list[str] = field(default_factory=list)
    #: what was examined: {"kind": "live", "context", "server"}, {"kind": "dump", "directory"} or
    #: {"kind": "scenario", "name"}; said with a report of no GPU node, so a wrong context shows
    target: dict[str, str] = field(default_factory=dict)

    @property
    def broken(self) -> bool:
        """Is any finding an error (the command then exits 1)?"""
        return any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def exit_code(self) -> int:
        """What ``gpuchain doctor`` exits with: 1 something is broken, 3 no GPU node was found (nothing
        was walked, so nothing can be called healthy: often the wrong cluster), else 0."""
        if self.broken:
            return 1
        return NO_GPU_NODE if not self.gpu_nodes else 0

    @property
    def ids(self) -> set[str]:
        """Every finding id named anywhere."""
        return {f.id for f in self.findings}

    @property
    def root_causes(self) -> list[FindingGroup]:
        """Root-cause findings grouped by id, errors first."""
        return [g for g in self.groups() if g.root]

    def groups(self) -> list[FindingGroup]:
        """Findings grouped by id (errors, then warnings, then info; roots first)."""
        order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
        by_id: dict[str, list[Finding]] = {}
        for f in self.findings:
            by_id.setdefault(f.id, []).append(f)
        groups = [
            FindingGroup(
                id=fid,
                severity=fs[0].severity,
                root=any(f.root for f in fs),
                nodes=tuple(f.node for f in fs if f.node),
                first=fs[0],
            )
            for fid, fs in by_id.items()
        ]
        return sorted(groups, key=lambda g: (order[g.severity], not g.root, g.id))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``gpuchain doctor -o json``)."""
        return {
            "broken": self.broken,
            "target": self.target,
            "stack": self.stack,
            "gpuNodes": self.gpu_nodes,
            "clusterNodes": self.cluster_nodes,
            "notJudged": self.not_judged,
            "rootCauses": [g.id for g in self.root_causes],
            "findings": [g.to_dict() for g in self.groups()],
            "nodes": [c.to_dict() for c in self.chains],
            "apiCalls": self.api_calls,
            "seconds": round(self.seconds, 4),
        }
