"""The snapshot indexed once for the checks: pods by node and operand, events by object, config keys."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import yaml

from gpuchain.doctor.snapshot import Snapshot
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.operator.operands import DRIVER, OPERANDS, Operand, is_gpu_node
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import active_policy


@dataclass(frozen=True)
class NodeView:
    """One node with everything on it that the checks read."""

    name: str
    node: Obj
    labels: dict[str, str]
    operand_pods: dict[str, Obj]  #: operand state -> its pod on this node
    workloads: list[Obj]  #: other pods bound to this node
    events: list[Obj]  #: Warning events about the node or its operand pods

    def pod(self, operand: Operand) -> Obj | None:
        """The operand's pod on this node, if its DaemonSet placed one."""
        return self.operand_pods.get(operand.state)

    @property
    def kernel(self) -> str:
        """status.nodeInfo.kernelVersion."""
        return str(((self.node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", "?"))


@dataclass
class Context:
    """Cluster-wide facts shared by every node's checks."""

    snapshot: Snapshot
    policy_obj: Obj | None
    policy: ClusterPolicySpec
    policy_problems: list[str]
    views: list[NodeView]
    pending: list[Obj]
    configmaps: dict[str, dict[str, str]]
    runtime_classes: set[str]
    driver_kernels: set[str] = field(default_factory=set)  #: kernels where a driver pod runs ready

    @property
    def namespace(self) -> str:
        """The operator's namespace."""
        return self.snapshot.namespace

    @property
    def policy_name(self) -> str:
        """The active ClusterPolicy's name (for fix commands)."""
        return name_of(self.policy_obj) if self.policy_obj else "cluster-policy"

    def log(self, pod: Obj, container: str) -> str:
        """A container's log if the gather step read it, else ""."""
        return self.snapshot.logs.get((self.namespace, name_of(pod), container), "")

    def plugin_configs(self) -> dict[str, str] | None:
        """The device plugin ConfigMap's keys -> YAML (None when the policy names no ConfigMap)."""
        name = self.policy.device_plugin.config.name
        if not name:
            return None
        return self.configmaps.get(name, {})


def _operand_of(pod: Obj, by_name: dict[str, Operand]) -> Operand | None:
    app = labels_of(pod).get("app")
    if app in by_name:
        return by_name[app]
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ref.get("name") in by_name:
            return by_name[ref["name"]]
    return None


def index(snapshot: Snapshot) -> Context:
    """Build the context: one pass over pods and events, whatever the cluster size."""
    policy_obj = active_policy(snapshot.policies)
    parsed = parse_policy((policy_obj or {}).get("spec"))
    problems = [str(p) for p in parsed] if isinstance(parsed, list) else []
    policy = parsed if isinstance(parsed, ClusterPolicySpec) else ClusterPolicySpec()
    by_name = {o.name: o for o in OPERANDS}
    operand_pods: dict[str, dict[str, Obj]] = defaultdict(dict)
    workloads: dict[str, list[Obj]] = defaultdict(list)
    pod_node: dict[tuple[str, str], str] = {}
    pending = []
    for pod in snapshot.pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # a server that ignores field selectors (kmock) returns finished pods too
        meta = pod.get("metadata", {})
        node = (pod.get("spec") or {}).get("nodeName")
        op = _operand_of(pod, by_name) if meta.get("namespace") == snapshot.namespace else None
        if node:
            pod_node[(str(meta.get("namespace")), str(meta.get("name")))] = node
            if op is not None:
                operand_pods[node][op.state] = pod
            else:
                workloads[node].append(pod)
        elif op is None and (pod.get("status") or {}).get("phase") == "Pending":
            pending.append(pod)
    events: dict[str, list[Obj]] = defaultdict(list)
    for ev in snapshot.events:
        if ev.get("type") != "Warning":
            continue
        ref = ev.get("involvedObject") or {}
        if ref.get("kind") == "Node":
            events[str(ref.get("name"))].append(ev)
        elif ref.get("kind") == "Pod":
            node = pod_node.get((str(ref.get("namespace")), str(ref.get("name"))))
            if node:
                events[node].append(ev)
    views = []
    for n in snapshot.nodes:
        labels = labels_of(n)
        if not is_gpu_node(labels):
            continue
        name = name_of(n)
        views.append(
            NodeView(name, n, labels, operand_pods.get(name, {}), workloads.get(name, []), events.get(name, []))
        )
    configmaps = {name_of(cm): dict(cm.get("data") or {}) for cm in snapshot.configmaps}
    ctx = Context(
        snapshot,
        policy_obj,
        policy,
        problems,
        sorted(views, key=lambda v: v.name),
        pending,
        configmaps,
        {name_of(rc) for rc in snapshot.runtime_classes},
    )
    for v in views:
        driver_pod = v.pod(DRIVER)
        if driver_pod is not None and _ready(driver_pod):
            ctx.driver_kernels.add(v.kernel)
    return ctx


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def replicas_in(config_yaml: str) -> int | None:
    """Time-slicing/MPS replicas of ``nvidia.com/gpu`` in a device plugin config, if any."""
    try:
        data = yaml.safe_load(config_yaml) or {}
    except yaml.YAMLError:
        return None
    sharing = data.get("sharing") or {}
    for kind in ("timeSlicing", "mps"):
        for res in (sharing.get(kind) or {}).get("resources") or []:
            if str(res.get("name", "")).removeprefix("nvidia.com/") == "gpu":
                return int(res.get("replicas", 0)) or None
    return None
