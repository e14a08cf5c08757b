"""Held-out scenarios for the doctor (issue 26, item 5): cluster states from public reports, written
before the checks were changed, never used to write them.

A held-out file is an ordinary scenario (``base``, the simulator's schema) for the world around the
fault, plus ``edits`` that put the report's own evidence onto the rendered objects: pod and
init-container states, log lines, Events, node capacity, a DaemonSet renamed or moved, as the real
components write them. The simulator's fault flags are deliberately not used for the fault itself,
so a held-out case does not replay the evidence the doctor's checks were written against.

``expect`` says what a right answer is, written before the doctor was run on the file:
``root`` the link that is broken first (``none`` for a healthy cluster), ``nodes`` where, and
``fix`` what a repairing fix must do (``does``, prose) with the machine check: the root finding's
fix op is one of ``ops`` (when given) and its text or action matches one of ``match`` (regexes).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuchain.doctor.admission_reasons import UNEXPECTED_ADMISSION, refusal
from gpuchain.doctor.diagnose import run_doctor
from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.doctor.node import SANDBOX_FAILED, VOLUME_WAITS
from gpuchain.doctor.pods import sandbox_created
from gpuchain.doctor.releases import version_of
from gpuchain.kube import DAEMONSET, EVENT, NODE, POD, KubeError, MemoryCluster
from gpuchain.kube.objects import READY_TO_START, Obj
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.shapes import kubelet_conditions

HERE = Path(__file__).parent


@dataclass
class Expect:
    root: str
    nodes: list[str]
    fix_does: str
    fix_ops: list[str]
    fix_match: list[str]


@dataclass
class Case:
    name: str
    source: str
    expects: list[Expect]
    cluster: MemoryCluster
    read_log: Any
    kind: str = "fault"  #: fault | two-faults | healthy

    @property
    def root(self) -> str:
        return "+".join(e.root for e in self.expects)

    @property
    def nodes(self) -> list[str]:
        return [n for e in self.expects for n in e.nodes]


@dataclass
class Result:
    case: Case
    report: Report
    root_right: bool
    fix_right: bool | None  #: None: no fix expected (healthy)
    got: list[str] = field(default_factory=list)


def _pods(cluster: MemoryCluster, ds: str, node: str | None, namespace: str | None = None) -> list[Obj]:
    out = []
    for p in cluster.list(POD):
        owners = [o.get("name") for o in p["metadata"].get("ownerReferences") or []]
        if ds not in owners and not p["metadata"]["name"].startswith(ds + "-"):
            continue
        if namespace and p["metadata"]["namespace"] != namespace:
            continue
        if node and p["spec"].get("nodeName") != node:
            continue
        out.append(p)
    return out


def _status(state: dict[str, Any]) -> dict[str, Any]:
    """``{waiting: R, message: M}`` / ``{terminated: R, exitCode: N, message: M}`` / ``{running: true}``."""
    if "waiting" in state:
        w = {"reason": state["waiting"]}
        if state.get("message"):
            w["message"] = state["message"]
        return {"waiting": w}
    if "terminated" in state:
        t = {"reason": state["terminated"], "exitCode": state.get("exitCode", 1)}
        if state.get("message"):
            t["message"] = state["message"]
        return {"terminated": t}
    return {"running": {"startedAt": "2026-06-05T18:00:00Z"}}


def _set_container(statuses: list[dict[str, Any]], spec: dict[str, Any]) -> None:
    entry = next((s for s in statuses if s.get("name") == spec["name"]), None)
    if entry is None:
        entry = {"name": spec["name"], "ready": False, "restartCount": 0}
        statuses.append(entry)
    entry["state"] = _status(spec.get("state", {}))
    entry["ready"] = bool(spec.get("ready", False))
    # The kubelet's Started is true only for a running container whose startup probe passed (prober_manager.go
    # UpdatePodStatus@v1.37.2): a waiting or ended container is not started.
    entry["started"] = "running" in entry["state"]
    entry["restartCount"] = int(spec.get("restarts", entry.get("restartCount", 0)))
    if "last" in spec:
        entry["lastState"] = _status(spec["last"])
    elif entry["restartCount"] or entry["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff":
        # A container that restarted, or backs off after a crash, ended a run before: the kubelet keeps that run as
        # lastState.terminated (kuberuntime convertToAPIContainerStatuses), whose log `kubectl logs` then serves. A
        # case that quotes no exit keeps the run the simulator had, or an Error exit.
        if "terminated" not in (entry.get("lastState") or {}):
            entry["lastState"] = {"terminated": {"reason": "Error", "exitCode": 1}}
    else:
        entry.pop("lastState", None)


def _apply(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    what = edit["do"]
    if what == "pod":
        pods = _pods(cluster, edit["daemonset"], edit.get("node"), edit.get("namespace"))
        assert pods, f"no pod of {edit['daemonset']} on {edit.get('node')}"
        for pod in pods:
            _ensure_spec(cluster, pod, edit)
            pod = cluster.get(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
            status = copy.deepcopy(pod.get("status") or {})
            if "phase" in edit:
                status["phase"] = edit["phase"]
            if edit.get("unschedulable"):
                status["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": edit["unschedulable"],
                    }
                ]
                # None: a merge patch removes the key (the pod never started a container)
                status["containerStatuses"] = None
                status["initContainerStatuses"] = None
                status.pop("hostIP", None)
                spec = copy.deepcopy(pod["spec"])
                node = spec.get("nodeName")
                spec["nodeName"] = None
                # As the DaemonSet controller writes every pod it creates: pinned to its node by affinity
                # (kubernetes pkg/controller/daemon/util ReplaceDaemonSetPodNodeNameNodeAffinity).
                spec["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                            ]
                        }
                    }
                }
                cluster.patch(
                    POD, name=pod["metadata"]["name"], patch={"spec": spec}, namespace=pod["metadata"]["namespace"]
                )
            for c in edit.get("init", []):
                status.setdefault("initContainerStatuses", [])
                _set_container(status["initContainerStatuses"], c)
            inits = status.get("initContainerStatuses") or []
            blocked = [
                i
                for i, cs in enumerate(inits)
                if cs.get("name") in {c["name"] for c in edit.get("init", [])}
                and ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") != 0
            ]
            for cs in inits[blocked[0] + 1 :] if blocked else []:
                cs.update(ready=False, restartCount=0, state={"waiting": {"reason": "PodInitializing"}})
                cs.pop("lastState", None)
            for c in edit.get("containers", []):
                status.setdefault("containerStatuses", [])
                _set_container(status["containerStatuses"], c)
            if edit.get("init") and not edit.get("containers"):
                for cs in status.get("containerStatuses") or []:
                    cs["ready"] = False
                    cs["state"] = {"waiting": {"reason": "PodInitializing"}}
                status["phase"] = edit.get("phase", "Pending")
            if edit.get("containers") and not any(c.get("ready") for c in edit["containers"]):
                status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [
                    {"type": "Ready", "status": "False"}
                ]
            cluster.patch_status(
                POD, name=pod["metadata"]["name"], status=status, namespace=pod["metadata"]["namespace"]
            )
            for container, text in (edit.get("logs") or {}).items():
                cluster.set_logs(
                    pod["metadata"]["name"], namespace=pod["metadata"]["namespace"], container=container, text=text
                )
            for ev in edit.get("events", []):
                _event(cluster, pod, ev)
    elif what == "node":
        node = cluster.get(NODE, name=edit["node"])
        patch: dict[str, Any] = {}
        if "labels" in edit:
            patch["metadata"] = {"labels": edit["labels"]}
        if "unschedulable" in edit or "taints" in edit:
            spec = {}
            if "unschedulable" in edit:
                spec["unschedulable"] = edit["unschedulable"]
            if "taints" in edit:
                spec["taints"] = list(node["spec"].get("taints") or []) + edit["taints"]
            patch["spec"] = spec
        if patch:
            cluster.patch(NODE, name=edit["node"], patch=patch)
        if "capacity" in edit or "allocatable" in edit or "nodeInfo" in edit:
            status = copy.deepcopy(cluster.get(NODE, name=edit["node"])["status"])
            for key in ("capacity", "allocatable"):
                for res, val in (edit.get(key) or {}).items():
                    # None: a merge patch removes the resource (the kubelet no longer reports it)
                    status[key][res] = None if val is None else str(val)
            status.setdefault("nodeInfo", {}).update(edit.get("nodeInfo") or {})
            cluster.patch_status(NODE, name=edit["node"], status=status)
    elif what == "rename-daemonset":
        _rename(cluster, edit["namespace"], edit["from"], edit["to"], edit.get("toNamespace"), edit.get("nodes"))
    elif what == "add-daemonset":
        _add(cluster, edit)
    elif what == "delete-daemonset":
        for pod in _pods(cluster, edit["name"], None, edit["namespace"]):
            cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
        cluster.delete(DAEMONSET, name=edit["name"], namespace=edit["namespace"])
    else:
        raise ValueError(f"unknown edit {what!r}")


def _ensure_spec(cluster: MemoryCluster, pod: Obj, edit: dict[str, Any]) -> None:
    """The report's container names on the pod: an init container the simulator does not render is
    added (before the others); a lone main container takes the report's name."""
    spec = copy.deepcopy(pod["spec"])
    image = spec["containers"][0].get("image", "")
    inits = spec.setdefault("initContainers", [])
    names = {c["name"] for c in inits}
    for c in reversed(edit.get("init", [])):
        if c["name"] not in names:
            inits.insert(0, {"name": c["name"], "image": image})
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for c in edit.get("containers", []):
        if c["name"] not in {x["name"] for x in spec["containers"]} and len(spec["containers"]) == 1:
            old = spec["containers"][0]["name"]
            spec["containers"][0]["name"] = c["name"]
            for st in statuses:
                if st.get("name") == old:
                    st["name"] = c["name"]
    cluster.patch(POD, name=pod["metadata"]["name"], patch={"spec": spec}, namespace=pod["metadata"]["namespace"])
    if statuses:
        cluster.patch_status(
            POD,
            name=pod["metadata"]["name"],
            status={"containerStatuses": statuses},
            namespace=pod["metadata"]["namespace"],
        )


def _add(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    """A DaemonSet of another release (its own chart, namespace and labels) with a ready pod on each of
    ``nodes``; later ``pod`` edits give pods their reported state."""
    ns, name = edit["namespace"], edit["name"]
    if ns not in {n["metadata"]["name"] for n in cluster.list(_ns_kind())}:
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    labels = dict(edit.get("labels") or {"app.kubernetes.io/name": name})
    containers = [{"name": c, "image": edit.get("image", "")} for c in edit["containers"]]
    template = {"metadata": {"labels": labels}, "spec": {"containers": containers}}
    if edit.get("nodeSelector"):
        template["spec"]["nodeSelector"] = edit["nodeSelector"]
    if edit.get("tolerations"):
        template["spec"]["tolerations"] = edit["tolerations"]
    nodes = edit["nodes"]
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": template},
            "status": {
                "desiredNumberScheduled": len(nodes),
                "currentNumberScheduled": len(nodes),
                "numberReady": len(nodes),
                "numberAvailable": len(nodes),
            },
        }
    )
    for i, node in enumerate(nodes):
        cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{'abcdefgh'[i % 8]}{i:04d}",
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "controller": True}
                    ],
                },
                "spec": {"nodeName": node, "containers": containers},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {"name": c["name"], "ready": True, "restartCount": 0, "state": _status({})} for c in containers
                    ],
                },
            }
        )


#: The kubelet names an Event "<object>.<UnixNano in hex>" (client-go tools/record/event.go makeEvent), so a list,
#: which the API server returns in name order, gives one object's Events oldest first. A case's Events are created
#: in the order its file writes them, one nanosecond apart from a fixed start, so every run lists them the same way.
_EVENT_CLOCK = itertools.count(1_765_000_000_000_000_000)


def _event(cluster: MemoryCluster, pod: Obj, ev: dict[str, Any]) -> None:
    name = f"{pod['metadata']['name']}.{next(_EVENT_CLOCK):x}"
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": pod["metadata"]["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "namespace": pod["metadata"]["namespace"],
            },
            "type": ev.get("type", "Warning"),
            "reason": ev["reason"],
            "message": ev["message"],
            "count": ev.get("count", 1),
            "source": {"component": ev.get("component", "kubelet"), "host": pod["spec"].get("nodeName", "")},
        }
    )


def _rename(cluster: MemoryCluster, ns: str, old: str, new: str, new_ns: str | None, nodes: list[str] | None) -> None:
    """Copy DaemonSet ``ns/old`` (and its pods on ``nodes``, or all) as ``new_ns/new``; the old one
    goes when every pod moved."""
    target_ns = new_ns or ns
    ds = copy.deepcopy(cluster.get(DAEMONSET, name=old, namespace=ns))
    pods = _pods(cluster, old, None, ns)
    moving = [p for p in pods if nodes is None or p["spec"].get("nodeName") in nodes]
    for p in moving:
        logs = {}
        for c in [*(p["spec"].get("initContainers") or []), *p["spec"]["containers"]]:
            with contextlib.suppress(KubeError):  # no log for that container
                logs[c["name"]] = cluster.logs(p["metadata"]["name"], namespace=ns, container=c["name"])
        cluster.delete(POD, name=p["metadata"]["name"], namespace=ns)
        q = copy.deepcopy(p)
        suffix = q["metadata"]["name"].rsplit("-", 1)[-1]
        q["metadata"] = {
            **{k: v for k, v in q["metadata"].items() if k in ("labels", "annotations")},
            "name": f"{new}-{suffix}",
            "namespace": target_ns,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": new, "controller": True}],
        }
        cluster.create(q)
        for c, text in logs.items():
            if text:
                cluster.set_logs(q["metadata"]["name"], namespace=target_ns, container=c, text=text)
    ds["metadata"] = {
        **{k: v for k, v in ds["metadata"].items() if k in ("labels", "annotations")},
        "name": new,
        "namespace": target_ns,
    }
    if target_ns not in {n["metadata"]["name"] for n in cluster.list(_ns_kind())}:
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target_ns}})
    count = len(moving)
    ds["status"] = {
        **(ds.get("status") or {}),
        "desiredNumberScheduled": count,
        "currentNumberScheduled": count,
        "numberReady": sum(1 for p in moving if _ready(p)),
        "numberAvailable": sum(1 for p in moving if _ready(p)),
    }
    cluster.create(ds)
    if len(moving) == len(pods):
        cluster.delete(DAEMONSET, name=old, namespace=ns)
    else:
        left = len(pods) - len(moving)
        cluster.patch_status(
            DAEMONSET,
            name=old,
            status={"desiredNumberScheduled": left, "currentNumberScheduled": left, "numberReady": left},
            namespace=ns,
        )


def _ns_kind() -> Any:
    from gpuchain.kube import NAMESPACE

    return NAMESPACE


def _ready(pod: Obj) -> bool:
    return all(cs.get("ready") for cs in (pod.get("status") or {}).get("containerStatuses") or [])


#: The first Kubernetes release whose kubelet writes PodReadyToStartContainers by default (the gate's beta, 1.29).
READY_TO_START_SINCE = (1, 29)


#: The kubelet's Event reasons for a pod it made no sandbox for: the runtime refused one, or a volume is not mounted
#: yet (the kubelet makes no sandbox before the pod's volumes are, `gpuchain.doctor.node.VOLUME_WAITS`).
NO_SANDBOX_YET = (SANDBOX_FAILED, *VOLUME_WAITS)


#: The kubelet release from which a refused pod's status message reads "Pod was rejected: <message>"; before it,
#: "Pod <message>" (pkg/kubelet/kubelet.go rejectPod; gpuchain.doctor.admission_reasons reads both).
REJECTED_SINCE = (1, 26)


def _rejections_in_status(cluster: MemoryCluster, kubelets: dict[str, tuple[int, ...] | None]) -> None:
    """A Failed pod the kubelet refused at admission carries the refusal in its own status as well as in its Event:
    rejectPod records the Event and sets the pod's phase, reason and message together (kubernetes pkg/kubelet/kubelet.go
    @v1.37.2), so a case that wrote the Event has the status the kubelet wrote beside it (where the case set none)."""
    refused = {
        (str((ev.get("involvedObject") or {}).get("namespace")), str((ev.get("involvedObject") or {}).get("name"))): ev
        for ev in cluster.list(EVENT)
        if ev.get("reason") == UNEXPECTED_ADMISSION or refusal(str(ev.get("reason") or "")) is not None
    }
    for pod in cluster.list(POD):
        meta, status = pod["metadata"], pod.get("status") or {}
        ev = refused.get((meta["namespace"], meta["name"]))
        if ev is None or status.get("phase") != "Failed" or status.get("reason"):
            continue
        kubelet = kubelets.get(pod["spec"].get("nodeName", "")) or REJECTED_SINCE
        prefix = "Pod was rejected: " if kubelet >= REJECTED_SINCE else "Pod "
        written = {"reason": ev["reason"], "message": prefix + str(ev.get("message") or "")}
        cluster.patch_status(POD, name=meta["name"], status=written, namespace=meta["namespace"])


def as_the_kubelet_writes(cluster: MemoryCluster) -> None:
    """Each pod's conditions as the kubelet derives them from its containers' states (kubernetes
    pkg/kubelet/status/generate.go@v1.37.2: Initialized once every init container has exited 0 or, a restartable
    sidecar, started; ContainersReady and Ready once every container is ready), after a case's edits set those
    states: an edit writes containers, and the kubelet's conditions follow them, written by the simulator's own
    ``kubelet_conditions``. A pod that a FailedCreatePodSandBox, FailedMount or FailedAttachVolume
    Event names and none of whose containers has started has no sandbox, which a kubelet of 1.29 or later says as
    PodReadyToStartContainers False; an older kubelet writes no such condition. Pods with no container status
    (never bound) keep theirs."""
    sandboxless = {
        (str((ev.get("involvedObject") or {}).get("namespace")), str((ev.get("involvedObject") or {}).get("name")))
        for ev in cluster.list(EVENT)
        if ev.get("reason") in NO_SANDBOX_YET
    }
    kubelets = {
        n["metadata"]["name"]: version_of(str(n["status"].get("nodeInfo", {}).get("kubeletVersion", "")))
        for n in cluster.list(NODE)
    }
    _rejections_in_status(cluster, kubelets)
    for pod in cluster.list(POD):
        status = pod.get("status") or {}
        mains = status.get("containerStatuses") or []
        if not mains:
            continue
        sidecars = {c["name"] for c in pod["spec"].get("initContainers") or [] if c.get("restartPolicy") == "Always"}
        incomplete = [
            str(cs.get("name"))
            for cs in status.get("initContainerStatuses") or []
            if ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") != 0
            and not (cs.get("name") in sidecars and "running" in (cs.get("state") or {}))
        ]
        meta = pod["metadata"]
        kubelet = kubelets.get(pod["spec"].get("nodeName", "")) or (0,)
        # A kubelet before 1.29 writes no PodReadyToStartContainers (its gate was off by default).
        sandbox = sandbox_created(pod) if kubelet >= READY_TO_START_SINCE else None
        if sandbox is None and kubelet >= READY_TO_START_SINCE and (meta["namespace"], meta["name"]) in sandboxless:
            sandbox = False
        written = kubelet_conditions(
            str(status.get("phase")),
            incomplete=incomplete,
            unready=[str(cs.get("name")) for cs in mains if not cs.get("ready")],
            sandbox=sandbox,
        )
        ours = {c["type"] for c in written} | {READY_TO_START}
        conditions = written + [c for c in status.get("conditions") or [] if c.get("type") not in ours]
        if conditions != status.get("conditions"):
            cluster.patch_status(POD, name=meta["name"], status={"conditions": conditions}, namespace=meta["namespace"])


def load(path: Path, apply: Callable[[MemoryCluster, dict[str, Any]], None] = _apply) -> Case:
    """A held-out file built: its ``base`` scenario, then each edit through ``apply`` (a later set passes
    its own, which adds edit kinds and hands the rest to this one)."""
    doc = yaml.safe_load(path.read_text())
    base = dict(doc["base"])
    base.setdefault("name", doc["name"])
    sim = build(parse_scenario(yaml.safe_dump(base), str(path)))
    for edit in doc.get("edits") or []:
        apply(sim.cluster, edit)
    as_the_kubelet_writes(sim.cluster)
    exps = doc["expect"] if isinstance(doc["expect"], list) else [doc["expect"]]
    expects = [
        Expect(
            e["root"],
            list(e.get("nodes") or []),
            (e.get("fix") or {}).get("does", ""),
            list((e.get("fix") or {}).get("ops") or []),
            list((e.get("fix") or {}).get("match") or []),
        )
        for e in exps
    ]
    return Case(
        doc["name"],
        doc["source"],
        expects,
        sim.cluster,
        sim.read_log,
        doc.get("kind", "fault"),
    )


def _fix_text(f: Finding) -> str:
    action = json.dumps(f.action.to_dict()) if f.action else ""
    return f"{f.fix}\n{action}"


def score(case: Case, report: Report | None = None) -> Result:
    """The doctor's report on ``case`` (run live on its cluster unless ``report`` is given: one made
    another way, from a dump of it, `sim.heldout.variants`) judged against its expectation."""
    if report is None:
        report = run_doctor(case.cluster, reader=case.read_log)
    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    roots = [f for f in errors if f.root] or errors
    got = [f"{f.id}@{f.node or '-'}" for f in report.findings if f.severity != Severity.INFO]
    if case.root == "none":
        return Result(case, report, not errors, None, got)
    root_right, fix_right = True, True
    for exp in case.expects:
        # cluster-wide findings (node None) count for every expected node
        on = {n: [f for f in roots if f.node in (n, None)] for n in exp.nodes}
        right = all(any(f.link == exp.root for f in fs) for fs in on.values()) and not any(
            f.link != exp.root for fs in on.values() for f in fs if f.node is not None
        )
        fixes = [f for fs in on.values() for f in fs if f.link == exp.root]
        fixed = right and all(
            (not exp.fix_ops or (f.action is not None and f.action.op.value in exp.fix_ops))
            and any(re.search(m, _fix_text(f), re.IGNORECASE) for m in exp.fix_match)
            for f in fixes
        )
        root_right, fix_right = root_right and right, fix_right and fixed
    return Result(case, report, root_right, fix_right, got)


def expect_digest(path: Path) -> str:
    """sha256 of a file's ``expect`` block as data: the expectations are frozen once scored (SCORE.md),
    and tests/sim/test_sim_heldout.py checks them against FROZEN."""
    import hashlib

    doc = yaml.safe_load(path.read_text())
    return hashlib.sha256(json.dumps(doc["expect"], sort_keys=True).encode()).hexdigest()


def frozen(here: Path = HERE) -> dict[str, str]:
    """The digests recorded in ``here``'s FROZEN file (another held-out set keeps its own)."""
    lines = (here / "FROZEN").read_text().splitlines()
    return dict(line.split()[::-1] for line in lines if line and not line.startswith("#"))


def cases(here: Path = HERE) -> list[Path]:
    """The case files of the held-out set in ``here``."""
    return sorted(here.glob("*.yaml"))


@dataclass(frozen=True)
class HeldOutSet:
    """One held-out set: its directory and the loader its edits need. Every later set's harness is
    one of these, so a set adds its cases and its loader, never another copy of this plumbing."""

    here: Path
    load: Callable[[Path], Case]

    def cases(self) -> list[Path]:
        return cases(self.here)

    def frozen(self) -> dict[str, str]:
        return frozen(self.here)

    def results(self) -> list[Result]:
        """Every case of the set, loaded and scored against its frozen expectation."""
        return [score(self.load(p)) for p in self.cases()]

    def main(self) -> None:
        """Print the set's score table (``python -m sim.<set>.harness``)."""
        print(table(self.results()))


def table(results: list[Result]) -> str:
    faults = [r for r in results if r.case.root != "none"]
    healthy = [r for r in results if r.case.root == "none"]
    lines = [
        f"- root link and nodes right: {sum(r.root_right for r in faults)} of {len(faults)}",
        f"- repairing fix: {sum(bool(r.fix_right) for r in faults)} of {len(faults)}",
        f"- healthy with no error finding: {sum(r.root_right for r in healthy)} of {len(healthy)}",
        "",
        "| case | expected | root | fix | doctor said (error/warning findings) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        exp = f"{r.case.root} @ {', '.join(r.case.nodes) or '-'}"
        fix = "-" if r.fix_right is None else ("yes" if r.fix_right else "no")
        lines.append(
            f"| {r.case.name} | {exp} | {'yes' if r.root_right else 'no'} | {fix} | {'; '.join(r.got[:4]) or 'nothing'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([score(load(p)) for p in cases()]))
