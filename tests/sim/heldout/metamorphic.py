"""Every held-out case transformed without changing its meaning, and answered again (metamorphic testing).

A doctor that answers from the chain's state gives the same answer when what it reads is renamed or surrounded by
what every real cluster also holds; an answer that changes shows it keyed on a particular name or shape of the cases
it was taught on. Each transformation takes a loaded case and returns a new one whose right answer is the same:

- ``nodes``: every node renamed consistently wherever its name appears (objects, Events, container logs, the
  expectation's nodes), keeping the name's shape (`renamed_node`);
- ``namespace``: the GPU stack's user-chosen namespaces (`stack_namespaces`) moved to other names, in every
  object's namespace, the references that name one (Service DNS names, ``ns/pod``, ``--namespace``, the kubelet's
  ``pod_ns(uid)``), the logs, and the expectation's fix regexes where they name it;
- ``noise``: a namespace of CPU workloads no GPU chain involves (`add_noise`), as the kubelet and the scheduler
  write them: Running and Completed pods, a CrashLoopBackOff pod with its BackOff Events, a pod Pending on
  Insufficient cpu with its FailedScheduling Event.

``python -m sim.heldout.metamorphic [SET ...]`` (from tests/, SET as ``heldout12``) prints each case whose answer a
transformation changes and each transformation's totals beside the live ones.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sim.heldout import harness as base
from sim.heldout import variants
from sim.heldout.variants import loader, sets

from gpuchain.doctor.logs import cluster_log_reader
from gpuchain.doctor.model import Report, Severity
from gpuchain.kube import NODE, POD, KubeError, MemoryCluster
from gpuchain.kube.kinds import kind_of
from gpuchain.kube.objects import Obj

#: pod key (namespace, name) -> (container, previous) -> log text
Logs = dict[tuple[str, str], dict[tuple[str, bool], str]]


def _state(cluster: MemoryCluster) -> tuple[list[Obj], Logs]:
    """Every object of ``cluster`` and every container log it answers, current and previous run."""
    objects = [o for kind in cluster.kinds() for o in cluster.snapshot(kind)]
    logs: Logs = {}
    for pod in cluster.snapshot(POD):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        names = [c["name"] for f in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(f) or []]
        for container in names:
            for previous in (False, True):
                try:
                    text = cluster.logs(
                        meta["name"], namespace=meta["namespace"], container=container, previous=previous
                    )
                except KubeError:  # no previous run
                    continue
                if text:
                    logs.setdefault((meta["namespace"], meta["name"]), {})[(container, previous)] = text
    return objects, logs


def _rebuilt(case: base.Case, objects: list[Obj], logs: Logs, expects: list[base.Expect]) -> base.Case:
    """``case`` over a new cluster holding ``objects`` and ``logs``, with ``expects``.

    Each object keeps its uid, creationTimestamp and generation, which ``create`` assigns afresh: a DaemonSet whose
    spec was edited has a generation its status's observedGeneration has not reached, and the doctor reads that."""
    cluster = MemoryCluster(objects)
    for o in objects:
        kind, meta = kind_of(o), o["metadata"]
        # MemoryCluster has no verb that sets these; the stored object is not yet handed out, so it is set in place.
        stored = cluster._bucket(kind)[cluster._key(kind, meta["name"], meta.get("namespace"))]["metadata"]
        stored.update({k: meta[k] for k in ("uid", "creationTimestamp", "generation") if k in meta})
    for (namespace, pod), texts in logs.items():
        for (container, previous), text in texts.items():
            cluster.set_logs(pod, namespace=namespace, container=container, text=text, previous=previous)
    cluster.calls.reset()
    return replace(case, cluster=cluster, read_log=cluster_log_reader(cluster), expects=expects)


def _walk(value: Any, sub: Callable[[str, str], str], key: str = "") -> Any:
    """``value`` with every string ``s`` held under dict key ``key`` replaced by ``sub(key, s)`` (keys kept)."""
    if isinstance(value, dict):
        return {k: _walk(v, sub, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, sub, key) for v in value]
    if isinstance(value, str):
        return sub(key, value)
    return value


# -- nodes ------------------------------------------------------------------------------------------------------------

#: Name parts a platform fixes: EKS ip-A-B-C-D / i-<id>, GKE gke-, AKS aks-…-vmss, aks-engine k8s-, Juju juju-,
#: kind's and kubeadm's <cluster>-control-plane / -worker, minikube.
_FIXED = {
    "ip",
    "i",
    "ec2",
    "internal",
    "compute",
    "gke",
    "aks",
    "k8s",
    "juju",
    "control",
    "plane",
    "worker",
    "minikube",
}
_QUAD = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+)")
_HEX = re.compile(r"(?=.*\d)[0-9a-f]{4,}")


def _digits(text: str) -> str:
    return "".join(str((int(c) + 7) % 10) if c.isdigit() else c for c in text)


def _octets(parts: list[str]) -> list[str]:
    """An IPv4 address's octets moved inside its network: the first (10 / 172 / 192, the private range) kept."""
    return [parts[0], *(str((int(p) + 77) % 256) for p in parts[1:])]


def _segment(part: str) -> str:
    """One dash-separated word of a node name, changed but of the same shape (digits stay digits, hex stays hex)."""
    if part in _FIXED:
        return part
    if part.startswith("vmss"):  # AKS: <pool>-<digits>-vmss<6 base-36 instance digits>
        return "vmss" + _digits(part[4:])
    if part.isdigit():
        return _digits(part)
    if _HEX.fullmatch(part):  # a hash: GKE's instance group, Juju's model id, EC2's instance id
        return "".join("abcdef"[("abcdef".index(c) + 3) % 6] if c in "abcdef" else _digits(c) for c in part)
    return "".join(chr((ord(c) - 97 + 7) % 26 + 97) if "a" <= c <= "z" else _digits(c) for c in part)


def renamed_node(name: str) -> str:
    """``name`` with its variable parts changed and its shape kept, so that what the platform writes still reads
    as that platform's: EKS ip-A-B-C-D.<region>.compute.internal keeps its form and domain, GKE
    gke-<cluster>-<pool>-<hash>-<id>, AKS aks-<pool>-<digits>-vmss<n>, aks-engine k8s-<pool>-<digits>-<n>, Juju
    juju-<hex>-<n> keep their fixed words; Alibaba's <region>.<ip> keeps its region; the user's words change."""
    if _QUAD.fullmatch(name):
        return ".".join(_octets(name.split(".")))
    region = re.fullmatch(r"([a-z]+-[a-z]+)\.(\d+\.\d+\.\d+\.\d+)", name)
    if region:
        return f"{region[1]}." + ".".join(_octets(region[2].split(".")))
    host, dot, domain = name.partition(".")
    eks = re.fullmatch(r"ip-(\d+)-(\d+)-(\d+)-(\d+)", host)
    if eks:
        return "ip-" + "-".join(_octets(list(eks.groups()))) + dot + domain
    return "-".join(_segment(p) for p in host.split("-")) + dot + domain


def _whole(names: list[str]) -> re.Pattern[str]:
    """Whole-name matches of ``names`` in any text: a string that is the name, or the name inside text but not
    inside a longer name (a DNS label or a dotted domain). A name that is one plain word ("cpu", "agent") matches
    only a whole string (spec.nodeName, an Event's host, a label's value): in text it is that word ("Insufficient
    cpu"), not the node."""

    def alternation(of: list[str]) -> str:
        return "|".join(re.escape(n) for n in sorted(of, key=len, reverse=True)) or "(?!)"

    distinct = [n for n in names if re.search(r"[\d.-]", n)]
    return re.compile(rf"^(?:{alternation(names)})$|(?<![\w.-])(?:{alternation(distinct)})(?![\w-]|\.\w)")


def rename_nodes(case: base.Case) -> base.Case:
    """Every node renamed (`renamed_node`) wherever its name appears, in one regex pass of whole-name matches."""
    objects, logs = _state(case.cluster)
    names = [o["metadata"]["name"] for o in objects if o.get("kind") == "Node"]
    mapping = {n: renamed_node(n) for n in names}
    assert len(set(mapping.values())) == len(mapping), f"{case.name}: two nodes renamed alike: {mapping}"
    whole = _whole(names)

    def sub(_key: str, text: str) -> str:
        return whole.sub(lambda m: mapping[m[0]], text)

    expects = [
        replace(e, nodes=[mapping.get(n, n) for n in e.nodes], fix_match=[sub("", m) for m in e.fix_match])
        for e in case.expects
    ]
    return _rebuilt(
        case,
        [_walk(o, sub) for o in objects],
        {(ns, sub("", pod)): {k: sub("", t) for k, t in texts.items()} for (ns, pod), texts in logs.items()},
        expects,
    )


# -- namespace --------------------------------------------------------------------------------------------------------

#: Namespaces a platform or a cloud fixes, never the GPU stack's own choice.
_FIXED_NAMESPACE = re.compile(r"default|kube-.*|openshift(-.*)?|gmp-.*|gke-.*|amazon-.*|aws-.*|azure-.*|cattle-.*")
#: What marks a DaemonSet or Deployment as part of the GPU chain: its name or an image of the operator's, a
#: plugin's, NFD's, an exporter's, a DRA driver's.
_STACK = re.compile(r"nvidia|gpu|dcgm|node-feature-discovery|\bnfd\b|mig-manager|cuda")
#: The namespaces moved to (one per stack namespace, in order; none a GPU word).
_NEW_NAMESPACES = ("platform-accel", "infra-compute", "team-hpc", "ops-devices", "stack-five", "stack-six")


def stack_namespaces(objects: list[Obj]) -> list[str]:
    """The user-chosen namespaces of the GPU stack: those holding a DaemonSet or Deployment of the chain (the
    operator's, by its name or images), less the ones a platform fixes."""
    found: list[str] = []
    for o in objects:
        if o.get("kind") not in ("DaemonSet", "Deployment"):
            continue
        ns = o["metadata"]["namespace"]
        spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
        images = [c.get("image", "") for f in ("initContainers", "containers") for c in spec.get(f) or []]
        words = " ".join([o["metadata"]["name"], *images])
        if _STACK.search(words) and not _FIXED_NAMESPACE.fullmatch(ns) and ns not in found:
            found.append(ns)
    return found


def _references(old: str, new: str) -> Callable[[str], str]:
    """Free text with each reference to namespace ``old`` made to ``new``: ``namespace "ns"``, ``-n ns``,
    ``--namespace=ns``, ``namespaces/ns``, ``ns/pod``, a Service's ``svc.ns.svc`` or ``svc.ns:port``, the kubelet's
    ``pod_ns(uid)`` (kubernetes pkg/kubelet/util/format/pod.go@v1.30.0 ``Pod``: name_namespace(uid))."""
    ns = re.escape(old)
    patterns = [
        re.compile(rf"((?:namespaces?|-n|--namespace)[ =:/]+[\"']?){ns}(?![\w-])", re.IGNORECASE),
        re.compile(rf"(?<![\w./-]){ns}(?=/[a-z0-9])"),
        re.compile(rf"(?<=[\w-]\.){ns}(?=\.svc\b|:\d)"),
        re.compile(rf"(?<=_){ns}(?=\()"),
    ]

    def sub(text: str) -> str:
        if old not in text:
            return text
        text = patterns[0].sub(lambda m: m[1] + new, text)
        for p in patterns[1:]:
            text = p.sub(new, text)
        return text

    return sub


def _other_uses(objects: list[Obj], ns: str) -> bool:
    """Whether ``ns`` also names something other than the namespace (a workload, an image, a label value: the
    chart's name, as gpu-operator is both), so that a regex naming it may mean that thing and is left alone."""
    token = re.compile(rf"(?<![\w-]){re.escape(ns)}(?![\w-])")
    for o in objects:
        meta = o["metadata"]
        if o.get("kind") != "Namespace" and token.search(meta["name"]):
            return True
        if any(token.search(str(v)) for v in (meta.get("labels") or {}).values()):
            return True
        spec = o.get("spec") or {}
        spec = (spec.get("template") or {}).get("spec") or spec
        if any(
            token.search(c.get("image", "")) or token.search(c.get("name", ""))
            for f in ("initContainers", "containers")
            for c in spec.get(f) or []
        ):
            return True
    return False


def move_namespaces(case: base.Case) -> base.Case:
    """The GPU stack's namespaces (`stack_namespaces`) moved to other names everywhere they are referred to."""
    objects, logs = _state(case.cluster)
    olds = stack_namespaces(objects)
    taken = {o["metadata"]["name"] for o in objects if o.get("kind") == "Namespace"}
    mapping = dict(zip(olds, (n for n in _NEW_NAMESPACES if n not in taken), strict=False))
    refs = [_references(old, new) for old, new in mapping.items()]

    def text(value: str) -> str:
        for r in refs:
            value = r(value)
        return value

    def sub(key: str, value: str) -> str:
        if value in mapping and (key.lower().endswith("namespace") or key == "value"):
            # metadata.namespace, involvedObject.namespace, a subject's namespace, an env var's value
            # (OPERATOR_NAMESPACE and the like: only an exact match; a label value stays, it names the chart)
            return mapping[value]
        return value if key == "image" else text(value)

    moved = []
    for o in objects:
        o = _walk(o, sub)
        if o.get("kind") == "Namespace" and o["metadata"]["name"] in mapping:
            o["metadata"]["name"] = mapping[o["metadata"]["name"]]
        moved.append(o)
    plain = {old: new for old, new in mapping.items() if not _other_uses(objects, old)}

    def regex(m: str) -> str:
        m = text(m)
        for old, new in plain.items():
            m = re.sub(rf"(?<![\w-]){re.escape(re.escape(old))}(?![\w-])", new, m)
            m = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, m)
        return m

    expects = [replace(e, fix_match=[regex(m) for m in e.fix_match]) for e in case.expects]
    return _rebuilt(
        case,
        moved,
        {(mapping.get(ns, ns), pod): {k: text(t) for k, t in texts.items()} for (ns, pod), texts in logs.items()},
        expects,
    )


# -- noise ------------------------------------------------------------------------------------------------------------

_NOISE_NAMESPACE = "storefront"


def _pod(name: str, owner: tuple[str, str], node: str | None, status: Obj, cpu: str = "250m") -> Obj:
    kind, owner_name = owner
    spec: Obj = {
        "containers": [
            {
                "name": name.split("-")[0],
                "image": f"registry.example.com/shop/{name.split('-')[0]}:1.4.2",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            }
        ],
        "restartPolicy": "Never" if kind == "Job" else "Always",
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": _NOISE_NAMESPACE,
            "labels": {"app": owner_name},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1" if kind != "Job" else "batch/v1",
                    "kind": kind,
                    "name": owner_name,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def _running(container: str) -> Obj:
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": container,
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-06-05T17:00:00Z"}},
            }
        ],
    }


def _event(pod: Obj, reason: str, message: str, component: str, count: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod['metadata']['name']}.18a4c0f2{count:08x}", "namespace": _NOISE_NAMESPACE},
        "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": _NOISE_NAMESPACE},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "count": count,
        "source": {"component": component, **({"host": pod["spec"]["nodeName"]} if "nodeName" in pod["spec"] else {})},
    }


def noise_objects(nodes: list[str]) -> list[Obj]:
    """A namespace of CPU workloads on ``nodes`` (every node, GPU ones included), none asking for a GPU:

    - a Deployment's Running pods, one per node;
    - a Job's Completed pod (phase Succeeded, exit 0);
    - an app pod in CrashLoopBackOff with the kubelet's Warning BackOff Event (kubernetes
      pkg/kubelet/kuberuntime/kuberuntime_manager.go@v1.30.0 ``doBackOff``: the waiting message "back-off %s
      restarting failed container=%s pod=%s", the Event "Back-off restarting failed container %s in pod %v",
      reason ``BackOff`` from pkg/kubelet/events/event.go ``BackOffStartContainer``; the pod formatted as
      pkg/kubelet/util/format/pod.go ``Pod``: name_namespace(uid));
    - a pod the scheduler cannot place, its PodScheduled condition and FailedScheduling Event saying
      "0/N nodes are available: N Insufficient cpu. preemption: 0/N nodes are available: N No preemption victims
      found for incoming pod." (pkg/scheduler/framework/types.go@v1.30.0 ``FitError.Error``, the reason from
      pkg/scheduler/framework/plugins/noderesources/fit.go, the preemption part from
      pkg/scheduler/framework/preemption/preemption.go; as tests/sim/heldout* cases quote it)."""
    objects: list[Obj] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": _NOISE_NAMESPACE}}]
    web = [
        _pod(f"web-7d9c6b5f4-{i:05x}", ("ReplicaSet", "web-7d9c6b5f4"), node, _running("web"))
        for i, node in enumerate(nodes)
    ]
    objects += web
    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": _NOISE_NAMESPACE, "labels": {"app": "web"}},
            "spec": {
                "replicas": len(nodes),
                "selector": {"matchLabels": {"app": "web-7d9c6b5f4"}},
                "template": {"metadata": {"labels": {"app": "web-7d9c6b5f4"}}, "spec": web[0]["spec"]},
            },
            "status": {"replicas": len(nodes), "readyReplicas": len(nodes), "availableReplicas": len(nodes)},
        }
    )
    done = {
        "phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [
            {
                "name": "report",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
            }
        ],
    }
    objects.append(_pod("report-29061440-x7k2p", ("Job", "report-29061440"), nodes[-1], done))
    crash_name, uid = "api-5f8b7c9d6-qw4rt", "8c1f4a2e-3b7d-4e6f-9a0c-5d2e1f3b4a6c"
    crash = _pod(crash_name, ("ReplicaSet", "api-5f8b7c9d6"), nodes[0], {})
    formatted = f"{crash_name}_{_NOISE_NAMESPACE}({uid})"
    crash["metadata"]["uid"] = uid
    crash["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "api",
                "ready": False,
                "restartCount": 14,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off 5m0s restarting failed container=api pod={formatted}",
                    }
                },
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
            }
        ],
    }
    objects += [
        crash,
        _event(crash, "BackOff", f"Back-off restarting failed container api in pod {formatted}", "kubelet", 61),
    ]
    n = len(nodes)
    unplaced = f"0/{n} nodes are available: {n} Insufficient cpu. preemption: 0/{n} nodes are available: {n} No preemption victims found for incoming pod."
    pending = _pod("batch-6c4d8f7b9-m2n8z", ("ReplicaSet", "batch-6c4d8f7b9"), None, {}, cpu="64")
    pending["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unplaced}],
    }
    objects += [pending, _event(pending, "FailedScheduling", unplaced, "default-scheduler", 3)]
    return objects


def add_noise(case: base.Case) -> base.Case:
    """``case`` with `noise_objects` on its nodes and the crash-looping app's log."""
    objects, logs = _state(case.cluster)
    assert not any(o.get("kind") == "Namespace" and o["metadata"]["name"] == _NOISE_NAMESPACE for o in objects)
    nodes = [o["metadata"]["name"] for o in objects if o.get("kind") == "Node"]
    noise = noise_objects(nodes)
    crashed = next(o for o in noise if o.get("status", {}).get("containerStatuses", [{}])[0].get("lastState"))
    logs[(_NOISE_NAMESPACE, crashed["metadata"]["name"])] = {
        ("api", False): "Error: connect ECONNREFUSED 10.96.41.7:5432\n    at TCPConnectWrap.afterConnect\n"
    }
    return _rebuilt(case, objects + noise, logs, case.expects)


#: Transformation -> what it does to a loaded case.
TRANSFORMS: dict[str, Callable[[base.Case], base.Case]] = {
    "nodes": rename_nodes,
    "namespace": move_namespaces,
    "noise": add_noise,
}


@dataclass(frozen=True)
class Row(variants.Row):
    """`sim.heldout.variants`' row (``variants``: each transformation's answer) and, per transformation whose
    findings differ from live although its answer may not, the error and warning findings it ``lost`` and
    ``gained`` (``severity:id@node``, a renamed node named by its original name)."""

    findings: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)


def _said(report: Report, back: dict[str, str]) -> set[str]:
    return {
        f"{f.severity.value}:{f.id}@{back.get(f.node or '-', f.node or '-')}"
        for f in report.findings
        if f.severity in (Severity.ERROR, Severity.WARNING)
    }


def rows(
    directories: list[str] | None = None, transforms: dict[str, Callable[[base.Case], base.Case]] = TRANSFORMS
) -> Iterator[Row]:
    """Each case of the held-out sets (all, or those named) scored live and after each of ``transforms`` (each
    from the loaded case, which the doctor only reads)."""
    for directory in sets(directories):
        load = loader(directory)
        for path in base.cases(directory):
            case = load(path)
            live = base.score(case)
            before = _said(live.report, {})
            back = {renamed_node(n["metadata"]["name"]): n["metadata"]["name"] for n in case.cluster.snapshot(NODE)}
            got, findings = {}, {}
            for name, transform in transforms.items():
                r = base.score(transform(case))
                got[name] = (r.root_right, r.fix_right)
                after = _said(r.report, back)
                if after != before:
                    findings[name] = (sorted(before - after), sorted(after - before))
            answer = (live.root_right, live.fix_right)
            yield Row(directory.name, case.name, case.root == "none", answer, got, findings)


def main(argv: list[str]) -> None:
    """Print every case a transformation answers otherwise than live, or whose findings it changes, then the
    totals."""
    totals = variants.Totals()
    moved: dict[str, int] = {}
    for row in rows(argv or None):
        totals.add(row)
        line = variants.changed(row)
        if line:
            print(line, flush=True)
        for name, (lost, gained) in row.findings.items():
            moved[name] = moved.get(name, 0) + 1
            print(f"{row.set}/{row.case}: {name} findings lost {lost}, gained {gained}", flush=True)
    print()
    print("\n".join(totals.lines(lambda name: "" if name == "live" else f"  findings changed {moved.get(name, 0)}")))


if __name__ == "__main__":
    main(sys.argv[1:])
