"""The snapshot indexed once for the checks: pods by node and operand, events by object, config keys."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from typing import Generic, TypeVar, cast, overload

import yaml

from gpuchain.doctor.admission_reasons import rejected_by_kubelet, rejection_event
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.stacks.base import daemonsets_in, gpu_node_term, is_gpu_node
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import Obj, is_ready, labels_of, name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, Operand, enabled
from gpuchain.operator.policy import ClusterPolicySpec

T = TypeVar("T")
R = TypeVar("R")

#: What a check that needs the policy says when the source has none (see `Context.policy_unknown`).
NO_POLICY = "the dump has no ClusterPolicy"


class _once(Generic[T, R]):
    """``functools.cached_property`` without its lock (Python 3.11 takes one on every first read, dropped in
    3.12): a view is read by one diagnosis, and a second working-out would give the same answer."""

    def __init__(self, fn: Callable[[T], R]) -> None:
        self.fn, self.name = fn, fn.__name__

    @overload
    def __get__(self, obj: None, owner: type[T]) -> _once[T, R]: ...

    @overload
    def __get__(self, obj: T, owner: type[T]) -> R: ...

    def __get__(self, obj: T | None, owner: type[T]) -> R | _once[T, R]:
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.name] = value
        return value


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """One node with everything on it that the checks read."""

    name: str
    node: Obj
    labels: dict[str, str]
    operand_pods: dict[str, Obj]  #: operand state -> its pod on this node
    workloads: list[Obj]  #: other pods bound to this node
    events: list[Obj]  #: Warning events about the node or its operand pods
    #: operand state -> the label that opts it out where the stack's is not the operand's own (`Stack.deploy_labels`)
    deploy_labels: dict[str, str] = field(default_factory=dict)
    #: no label or capacity marks the node as a GPU node: it is walked for the device plugin failing on it
    unmarked: bool = False

    @_once
    def pods(self) -> tuple[Obj, ...]:
        """Each operand pod on this node once: one pod serves several operands in gpuchain's node
        agent layout, and its failure is one failure, not one per role. Worked out on first use
        (`index` sets it as it builds the view): the links ask for it some seven times a node."""
        return _distinct(self.operand_pods)

    @_once
    def states(self) -> tuple[tuple[Obj, PodState], ...]:
        """Each of `pods` with its state (`pod_state`), worked out on first use: the walk asks whether any
        of them fails, or waits in an init container, for each node and some links (three passes over a
        node's pods), and at 10,000 nodes each remembered lookup of a state costs (bench.doctor.live)."""
        return tuple([(p, pod_state(p)) for p in self.pods])  # a list, not a generator: 10,000 of them

    def pod(self, operand: Operand) -> Obj | None:
        """The operand's pod on this node, if its DaemonSet placed one."""
        return self.operand_pods.get(operand.state)

    @property
    def kernel(self) -> str:
        """status.nodeInfo.kernelVersion."""
        return str(((self.node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", "?"))


@dataclass(kw_only=True)
class Context:
    """Cluster-wide facts shared by every node's checks."""

    snapshot: Snapshot
    stack: Stack
    policy_obj: Obj | None
    policy: ClusterPolicySpec
    policy_problems: list[str]
    views: list[NodeView]
    pending: list[Obj]
    configmaps: dict[str, dict[str, str]]
    runtime_classes: set[str]
    driver_kernels: set[str] = field(default_factory=set)  #: kernels where a driver pod runs ready
    #: cluster-wide answers a node's check works out once (by the asking function's name), where every
    #: node's check would otherwise read every node again
    memo: dict[str, object] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        """The stack's namespace (where its operand DaemonSets run)."""
        return self.stack.namespace

    @property
    def policy_unknown(self) -> bool:
        """The stack runs from a ClusterPolicy that the source does not include (a plain
        ``kubectl cluster-info dump`` has none): its switches are unknown, and the checks must not
        read gpuchain's defaults as the user's policy (a policy that turns the driver off would
        read as a driver DaemonSet gone missing)."""
        return (
            self.policy_obj is None and bool(self.stack.policy_resource) and "clusterpolicies" in self.snapshot.absent
        )

    def deploys(self, operand: Operand) -> bool:
        """Does the stack deploy ``operand``: the policy's switch, or, where the source has no
        policy (`policy_unknown`), whether one of its DaemonSets is there. Answered once an operand
        (`memo`): every node's check asks, and without a policy each answer is a pass over the DaemonSets."""
        key = "deploys " + operand.state
        known = self.memo.get(key)
        if known is None:
            known = self.memo[key] = (
                enabled(self.policy, operand)
                if not self.policy_unknown
                else any(
                    (d.get("metadata") or {}).get("namespace") == self.namespace
                    and operand.state in self.stack.operands_in(self.namespace, name_of(d))
                    for d in self.snapshot.daemonsets
                )
            )
        return bool(known)

    @property
    def policy_name(self) -> str:
        """The active ClusterPolicy's name (for fix commands)."""
        return name_of(self.policy_obj) if self.policy_obj else "cluster-policy"

    @property
    def policy_ref(self) -> str:
        """``<resource> <name>`` of the stack's policy for kubectl (clusterpolicies.nvidia.com ...)."""
        return f"{self.stack.policy_resource or 'clusterpolicy'} {self.policy_name}"

    def ds(self, operand: Operand) -> str:
        """The operand's DaemonSet name in this stack."""
        return self.stack.ds(operand.state)

    def container(self, operand: Operand) -> str:
        """The operand's main container name in this stack."""
        return self.stack.container(operand.state)

    @cached_property
    def logs_read(self) -> bool:
        """Did the gather step read any container log? Not on a healthy cluster, whose pods need none:
        a check that looks through every container's log then has nothing to look through."""
        return bool(self.snapshot.logs or self.snapshot.previous_logs)

    @cached_property
    def logged_pods(self) -> frozenset[tuple[str, str]]:
        """(namespace, name) of every pod the gather step read a log of."""
        return frozenset(key[:2] for keys in (self.snapshot.logs, self.snapshot.previous_logs) for key in keys)

    @cached_property
    def logged_names(self) -> frozenset[str]:
        """The names of the pods in `logged_pods`: a pod whose name is not among them has no log read, which
        `logged` and `log` answer with one set lookup (a few pods of 75,000 have a log; the links ask some
        twenty-three times a node, bench.doctor.live)."""
        return frozenset(name for _, name in self.logged_pods)

    def logged(self, pod: Obj) -> bool:
        """Did the gather step read a log of any of this pod's containers? A check that looks through all of a
        node's pods' logs skips the others without asking for each container (a few pods of 75,000 have one)."""
        meta = pod.get("metadata") or {}
        if str(meta.get("name", "")) not in self.logged_names:
            return False
        return (str(meta.get("namespace") or self.namespace), str(name_of(pod))) in self.logged_pods

    def log(self, pod: Obj, container: str) -> str:
        """A container's log if the gather step read it, else "": the previous run's (after a
        restart) then the current run's, in the order they were written."""
        if not self.logs_read:
            return ""
        meta = pod.get("metadata") or {}
        if str(meta.get("name", "")) not in self.logged_names:
            return ""
        key = (str(meta.get("namespace") or self.namespace), name_of(pod), container)
        runs = (self.snapshot.previous_logs.get(key, ""), self.snapshot.logs.get(key, ""))
        return "\n".join(r for r in runs if r)

    def plugin_configmaps(self) -> list[str]:
        """The ConfigMaps (in the stack's namespace) the device plugin reads its configs from: the one the
        policy names, else the ones its DaemonSet mounts (NVIDIA's chart mounts ``config.name``, or the map
        it renders from ``config.map``, as the config-manager's available-configs volume)."""
        if self.policy.device_plugin.config.name:
            return [self.policy.device_plugin.config.name]
        ds = daemonsets_in(self.snapshot, self.namespace).get(self.ds(DEVICE_PLUGIN)) or {}
        volumes = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
        return [str(v["configMap"]["name"]) for v in volumes if (v.get("configMap") or {}).get("name")]

    def plugin_configs(self) -> dict[str, str] | None:
        """The device plugin's configs, keys -> YAML, of `plugin_configmaps` (None when it reads none): looked up
        once (`memo`; a node's checks ask twice a node) and copied for each asker."""
        if "plugin_configs" not in self.memo:
            names = self.plugin_configmaps()
            self.memo["plugin_configs"] = (
                {k: v for name in names for k, v in self.configmaps.get(name, {}).items()} if names else None
            )
        configs = cast("dict[str, str] | None", self.memo["plugin_configs"])
        return None if configs is None else dict(configs)


def _plugin_fails(on_node: dict[str, Obj]) -> bool:
    """Does the stack's device plugin pod on a node fail there (operand state -> pod, `index`'s): a node no label or
    capacity marks as a GPU node is walked all the same where the user's plugin DaemonSet runs and fails and nothing
    sets the node apart from the GPU nodes (their label, their machine type: `gpu_node_term`), since a plugin that
    never loads NVML announces nothing and no feature discovery labels the node. A plugin on a node without GPUs
    fails the same way: the walk's root names both readings (`diagnose.unmarked_root`)."""
    plugin = on_node.get(DEVICE_PLUGIN.state)
    return plugin is not None and pod_state(plugin).failing


def _distinct(operand_pods: dict[str, Obj]) -> tuple[Obj, ...]:
    """The pods of ``operand_pods`` (operand state -> pod), each once, in order (`NodeView.pods`)."""
    return tuple({id(p): p for p in operand_pods.values()}.values())


def _operands_of(meta: Obj, operands_in: Callable[[str, str], tuple[str, ...]]) -> tuple[str, ...]:
    """The operands a pod runs (several for gpuchain's node agent): its DaemonSet owner's, else its
    app label's (in the stack's namespace)."""
    ns = str(meta.get("namespace") or "")
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "DaemonSet":
            return operands_in(ns, str(ref.get("name")))
    app = (meta.get("labels") or {}).get("app")
    return operands_in(ns, app) if app else ()


def pinned_node(pod: Obj) -> str | None:
    """The node a DaemonSet pod is for before it is scheduled: the scheduler places DaemonSet pods, each
    pinned by node affinity on ``metadata.name`` (kubernetes pkg/controller/daemon/util)."""
    affinity = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or ():
        for field_ in term.get("matchFields") or ():
            values = field_.get("values") or []
            if field_.get("key") == "metadata.name" and field_.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def index(snapshot: Snapshot) -> Context:
    """Build the context: one pass over pods and events, whatever the cluster size."""
    stack = detect(snapshot)
    operands_in = cache(stack.operands_in)  # one answer per DaemonSet, not one search per pod
    operand_pods: dict[str, dict[str, Obj]] = defaultdict(dict)
    others: dict[str, dict[str, Obj]] = defaultdict(dict)  #: operands of another release, elsewhere
    workloads: dict[str, list[Obj]] = defaultdict(list)
    # Only the pods Warning Events are about need their node looked up by name.
    named = {
        str((ev.get("involvedObject") or {}).get("name"))
        for ev in snapshot.events
        if (ev.get("involvedObject") or {}).get("kind") == "Pod"
    }
    pod_node: dict[tuple[str, str], str] = {}
    pending = []
    own_namespace, elsewhere = stack.namespace, bool(stack.elsewhere)
    # One pass over every pod (75,000 at 10,000 nodes): the loop reads each field once, into locals.
    for pod in snapshot.pods:
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase == "Succeeded" or phase == "Failed":
            continue  # a server that ignores field selectors (kmock) returns finished pods too
        meta = pod.get("metadata", {})
        node = (pod.get("spec") or {}).get("nodeName")
        ours = meta.get("namespace") == own_namespace
        ops = _operands_of(meta, operands_in) if ours or elsewhere else ()
        if ops and not node:
            node = pinned_node(pod)  # a DaemonSet pod the scheduler has not placed (yet)
        if node:
            if named and str(meta.get("name")) in named:
                pod_node[(str(meta.get("namespace")), str(meta.get("name")))] = node
            if ops:
                on_node = (operand_pods if ours else others)[node]
                for op in ops:
                    on_node[op] = pod
                # Its state now, in the pods' own order: the walk asks it of each node's operand pods, which lie
                # far apart in memory (one DaemonSet's after another's), and reading them there costs twice as much.
                pod_state(pod)
            else:
                workloads[node].append(pod)
        elif not ops and phase == "Pending":
            pending.append(pod)
    rejections = []
    for pod in snapshot.finished:
        if rejected_by_kubelet(pod):
            # Refused at admission, it never ran: what it holds is the kubelet's refusal, which its Event said.
            rejections.append(rejection_event(pod))
        else:
            # A GPU workload that ended Failed (finished.py): its node's workload checks read its state and log.
            workloads[str((pod.get("spec") or {}).get("nodeName"))].append(pod)
    for node, found in others.items():
        for op, pod in found.items():
            # The stack's own pod first, unless it runs and the other release's fails or is held in an
            # init container: a link is broken on a node when any of its pods is, and a healthy pod beside
            # it hides nothing. One merely starting (its containers being created) is no such news.
            own = operand_pods[node].get(op)
            other = pod_state(pod)
            if own is None or (pod_state(own).ready and (other.failing or bool(other.waiting_init))):
                operand_pods[node][op] = pod
    events: dict[str, list[Obj]] = defaultdict(list)
    for ev in snapshot.events:
        if ev.get("type") != "Warning":
            continue
        ref = ev.get("involvedObject") or {}
        if ref.get("kind") == "Node":
            events[str(ref.get("name"))].append(ev)
        elif ref.get("kind") == "Pod":
            # A pod the kubelet rejected is Failed and not listed: its Event names the node as source.host.
            node = pod_node.get((str(ref.get("namespace")), str(ref.get("name")))) or (ev.get("source") or {}).get(
                "host"
            )
            if node:
                events[str(node)].append(ev)
    for ev in rejections:
        # The refusal's own Event where the source still has it, else the one the pod's status keeps.
        node, ref = ev["source"]["host"], ev["involvedObject"]
        if not any(
            e.get("reason") == ev["reason"] and (e.get("involvedObject") or {}).get("name") == ref["name"]
            for e in events[node]
        ):
            events[node].append(ev)
    views = []
    gpu_nodes: list[Obj] | None = None  # the marked GPU nodes, listed only where an unmarked node's plugin fails
    for n in snapshot.nodes:
        name = name_of(n)
        on_node = operand_pods.get(name, {})
        unmarked = not is_gpu_node(n)
        if unmarked:
            if not _plugin_fails(on_node):
                continue
            if gpu_nodes is None:
                gpu_nodes = [m for m in snapshot.nodes if is_gpu_node(m)]
            if gpu_nodes and gpu_node_term(gpu_nodes, n) is not None:
                continue  # a node the GPU nodes' label or machine type sets apart: device-plugin.off-gpu-node's
        labels = labels_of(n)
        view = NodeView(
            name=name,
            node=n,
            labels=labels,
            operand_pods=on_node,
            workloads=workloads.get(name, []),
            events=events.get(name, []),
            deploy_labels=stack.deploy_labels,
            unmarked=unmarked,
        )
        view.__dict__["pods"] = _distinct(on_node)  # what `NodeView.pods` works out on first use, at hand here
        views.append(view)
    configmaps = {name_of(cm): dict(cm.get("data") or {}) for cm in snapshot.configmaps}
    ctx = Context(
        snapshot=snapshot,
        stack=stack,
        policy_obj=stack.policy_obj,
        policy=stack.policy,
        policy_problems=list(stack.policy_problems),
        views=sorted(views, key=lambda v: v.name),
        pending=pending,
        configmaps=configmaps,
        runtime_classes={name_of(rc) for rc in snapshot.runtime_classes},
    )
    for v in views:
        driver_pod = v.pod(DRIVER)
        if driver_pod is not None and is_ready(driver_pod):
            ctx.driver_kernels.add(v.kernel)
    return ctx


@lru_cache(maxsize=256)
def replicas_in(config_yaml: str) -> int | None:
    """Time-slicing/MPS replicas of ``nvidia.com/gpu`` in a device plugin config, if any. Remembered by the
    config's text: every time-sliced node of a cluster asks it of the same few configs, each a YAML parse."""
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
