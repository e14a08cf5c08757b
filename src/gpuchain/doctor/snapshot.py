"""Gather what the doctor needs with a fixed handful of list calls, never one call per node.

Eight lists answer every check on any cluster size, whichever stack runs it: ClusterPolicies of
both API groups (gpuchain.io and NVIDIA's nvidia.com; a group the cluster does not have answers
404, which means "not this stack"), Nodes, Pods (all namespaces, not finished), DaemonSets (all
namespaces: the stack adapters find their own), the stack's ConfigMaps, RuntimeClasses and
Warning Events; a ninth lists NVIDIADrivers where the GPU Operator runs. Container logs are read
only for the few operand containers that are not ready and whose last lines are not already in
``lastState.terminated.message`` (at most ``MAX_LOGS``), so a thousand failing nodes cost no more
than five.

On a live cluster the lists are read with ``list_readonly`` (pages, and none of the server's
bookkeeping: see `LiveCluster.list_readonly`). The server narrows only what the doctor never
judges: finished pods and non-Warning Events. Nodes are not narrowed to GPU nodes (a GPU node
whose labels are missing is itself a finding, when feature discovery is down), nor pods to GPU
ones (a GPU request is no field the server selects on), and no list is asked as
PartialObjectMetadata: every check reads spec or status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from typing import Protocol, cast

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE
from gpuchain.doctor.admission_reasons import read_refused, refusals_worth_reading
from gpuchain.doctor.fabric_logs import fabric_log_candidates
from gpuchain.doctor.finished import NOT_SUCCEEDED, failed_containers, split_finished
from gpuchain.doctor.nfd import master_containers, nfd_containers
from gpuchain.doctor.operator_says import operator_containers, placed_nowhere, wants_log
from gpuchain.doctor.passthrough import MAX_PASSTHROUGH_LOGS, vm_plugin_log
from gpuchain.doctor.pods import running_since
from gpuchain.doctor.probe_monitor import monitor_log_candidates
from gpuchain.doctor.ready_gpu_logs import probe_kept, ready_gpu_probes
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER, detect
from gpuchain.doctor.stacks.hami import is_hami_plugin
from gpuchain.doctor.stacks.sandbox import sandbox_log_candidates
from gpuchain.doctor.structs import LogKey, Scrape, Snapshot
from gpuchain.doctor.unallocated import running_unrequested
from gpuchain.doctor.unclassed import classed_daemonsets, keeps_runc_nodes, not_default_nodes, running_unclassed
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.kube import CLUSTER_POLICY, CONFIGMAP, DAEMONSET, EVENT, NODE, POD, RUNTIME_CLASS, Cluster
from gpuchain.kube.errors import KubeError, NotFoundError, UnknownKindError
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests, shares_a_gpu
from gpuchain.kube.kinds import PDB, Kind
from gpuchain.kube.objects import Obj, is_ready, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DRIVER, TOOLKIT, VALIDATOR, enabled
from gpuchain.operator.upgrade import DRAIN_REQUIRED, FAILED, POD_DELETION, STATE_LABEL, WAIT_FOR_JOBS

MAX_LOGS = 5
#: At most how many running exporter / GFD pods' logs are read (one per DaemonSet that shows trouble).
MAX_SAMPLE_LOGS = 4
#: GFD's label of the GPU model: on a node, it says GFD labelled it.
PRODUCT = "nvidia.com/gpu.product"
MAX_SCRAPES = 32
"""The most exporter scrapes one run reads (one request each, through the API server's pod proxy);
the nodes beyond it are said not judged."""
MAX_WORKLOAD_LOGS = 3


class Scraper(Protocol):
    """Reads what an exporter pod serves at ``/metrics`` (through the API server's pod proxy); None
    when it cannot."""

    def __call__(self, namespace: str, pod: str) -> str | None: ...


class LogReader(Protocol):
    """Reads a container's log (``kubectl logs --tail``, ``--previous``: its last terminated run);
    None when it cannot."""

    def __call__(self, namespace: str, pod: str, container: str, previous: bool = False) -> str | None: ...


#: The list calls, in order, with what each is for (also the progress bar's steps).
STEPS = (
    "clusterpolicies.gpuchain.io",
    "clusterpolicies.nvidia.com",
    "nodes",
    "pods",
    "daemonsets",
    "configmaps",
    "runtimeclasses",
    "events",
    "resourceslices",
)
#: The driver upgrade states in which the GPU Operator's upgrade controller waits on the node's pods
#: (NVIDIA/k8s-operator-libs pkg/upgrade/consts.go), and the one it leaves a node in when that wait failed.
DRAIN_STATES = frozenset({WAIT_FOR_JOBS, POD_DELETION, DRAIN_REQUIRED, FAILED})


def mig_in_use(node: Obj) -> str:
    """Why the node's GPUs are in MIG mode ("" when they are not): MIG resources in its capacity (the mixed
    strategy), GPU feature discovery's product with a MIG profile (single), or a MIG layout other than
    all-disabled. GFD labels ``nvidia.com/mig.strategy`` and ``nvidia.com/mig.capable`` whatever the GPUs' mode, so
    neither says MIG is on."""
    mig = {k: v for k, v in node_gpu_resources(node).items() if k.startswith("nvidia.com/mig-") and v > 0}
    if mig:
        return ", ".join(f"{k}: {v}" for k, v in sorted(mig.items()))
    labels = labels_of(node)
    if "-MIG-" in labels.get(PRODUCT, ""):
        return f"{PRODUCT}={labels[PRODUCT]}"
    layout = labels.get(MIG_CONFIG, "")
    return f"{MIG_CONFIG}={layout}" if layout and layout != "all-disabled" else ""


def draining(nodes: list[Obj]) -> bool:
    """Does any node show a drain under way: cordoned (spec.unschedulable: the driver manager and the upgrade
    controller cordon before they evict) or in a driver upgrade state that waits on its pods? Only then are
    PodDisruptionBudgets worth a list call: a healthy cluster pays nothing for them."""
    return any(
        (n.get("spec") or {}).get("unschedulable")
        or ((n.get("metadata") or {}).get("labels") or {}).get(STATE_LABEL) in DRAIN_STATES
        for n in nodes
    )


def read_pdbs(cluster: Cluster) -> list[Obj] | None:
    """Every PodDisruptionBudget, or None where the doctor may not read them (403: a role without the grant) or the
    cluster does not serve policy/v1: the checks then know they were not read."""
    try:
        return served_list(cluster, PDB)
    except KubeError as exc:
        if exc.code == 403:
            return None
        raise


def list_if_served(cluster: Cluster, kind: Kind) -> list[Obj]:
    """``cluster.list_readonly(kind)``, or [] when the cluster does not serve that API group (404)."""
    return served_list(cluster, kind) or []


def served_list(cluster: Cluster, kind: Kind) -> list[Obj] | None:
    """``cluster.list_readonly(kind)``, or None when the cluster does not serve that API group (404): a check
    that reads the kind then knows it was not read, rather than read empty."""
    try:
        return cluster.list_readonly(kind)
    except (NotFoundError, UnknownKindError):
        return None
    except KubeError as exc:
        if exc.code == 404:
            return None
        raise


def gather(
    cluster: Cluster,
    *,
    namespace: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Snapshot:
    """List everything once. ``namespace`` overrides the stack's own namespace."""
    step = progress or (lambda _name: None)
    policies = list_if_served(cluster, CLUSTER_POLICY)
    step(STEPS[0])
    nvidia = list_if_served(cluster, NVIDIA_CLUSTER_POLICY)
    step(STEPS[1])
    nodes = cluster.list_readonly(NODE)
    step("nodes")
    # Failed pods come with the list and are split off: the newest GPU workloads among them are read (finished.py).
    pods, finished = split_finished(cluster.list_readonly(POD, field_selector=NOT_SUCCEEDED), nodes)
    step("pods")
    daemonsets = cluster.list_readonly(DAEMONSET)
    step("daemonsets")
    drivers = list_if_served(cluster, NVIDIA_DRIVER) if nvidia else []
    partial = Snapshot(
        namespace=namespace or "",
        policies=policies + nvidia,
        nodes=nodes,
        pods=pods,
        daemonsets=daemonsets,
        configmaps=[],
        runtime_classes=[],
        events=[],
        drivers=drivers,
    )
    stack = detect(partial)
    configmaps = cluster.list_readonly(CONFIGMAP, namespace=stack.namespace) if stack.namespace else []
    step("configmaps")
    runtime_classes = cluster.list_readonly(RUNTIME_CLASS)
    step("runtimeclasses")
    events = cluster.list_readonly(EVENT, field_selector="type=Warning")
    step("events")
    # resource.k8s.io/v1 (Kubernetes 1.34 on): where it is not served, no ResourceSlice was read, not none published.
    resource_slices = served_list(cluster, RESOURCE_SLICE)
    step("resourceslices")
    pdbs = read_pdbs(cluster) if draining(nodes) else []
    refused = (
        read_refused(cluster, stack.namespace)
        if stack.namespace
        and refusals_worth_reading(nodes=nodes, pods=pods, daemonsets=daemonsets, namespace=stack.namespace)
        else []
    )
    absent = set() if resource_slices is not None else {"resourceslices"}
    if pdbs is None:
        absent.add("poddisruptionbudgets")
    return Snapshot(
        namespace=namespace or "",
        policies=policies + nvidia,
        nodes=nodes,
        pods=pods,
        daemonsets=daemonsets,
        configmaps=configmaps,
        runtime_classes=runtime_classes,
        events=events,
        drivers=drivers,
        resource_slices=resource_slices or [],
        pdbs=pdbs or [],
        refused=refused,
        finished=finished,
        absent=frozenset(absent),
    )


def _of_daemonset(meta: Obj) -> bool:
    """Is a pod with this metadata made by a DaemonSet (as every device plugin is)?"""
    return any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or ())


def _looping(status: Obj) -> list[Obj]:
    """The containers of a pod's status that crash in a loop and left no message of their last run."""
    return [
        cs
        for cs in status.get("containerStatuses") or ()
        if ((cs.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff" and not _last_message(cs)
    ]


def _kubevirt_plugin(pod: Obj) -> bool:
    """Is ``pod`` NVIDIA's KubeVirt GPU device plugin (its image, nvcr.io/nvidia/kubevirt-gpu-device-plugin)?"""
    return any(
        "kubevirt-gpu-device-plugin" in str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or ()
    )


def needs_logs(snapshot: Snapshot, limit: int = MAX_LOGS) -> list[LogKey]:
    """The containers worth a log call: every container of the stack's operand pods (init
    containers that crash or restarted included) that is not ready and has no last log lines in
    its status, and running device plugins on nodes whose capacity announces no GPU (their log
    says whether they registered); crash-looping ones first: their log is the failure itself.
    Then up to ``MAX_WORKLOAD_LOGS`` GPU workload containers that are not ready or restarted:
    their log says whether the GPU went away under them ("Failed to initialize NVML: Unknown
    Error"), and the running device plugin of up to as many of their nodes: its log says whether it registered.
    (`with_logs` also probes a ready GPU pod on each of a few GPU nodes: `gpuchain.doctor.ready_gpu_logs`.)"""
    return [key for key, _ in _log_candidates(snapshot, limit)]


def _log_candidates(snapshot: Snapshot, limit: int) -> list[tuple[LogKey, Obj]]:
    """`needs_logs`'s containers with their statuses, from one pass over the pods (at 10,000
    nodes each pass over their pods costs a noticeable part of the doctor's time)."""
    stack = detect(snapshot)
    # Nodes that announce no GPU, and nodes that offer fewer than they announce: the running plugin's log says why
    # (it did not register; the Xid it took each GPU out for).
    unregistered, short = set(), set()
    for n in snapshot.nodes:
        name, capacity = str(n.get("metadata", {}).get("name")), node_gpu_resources(n)
        if not any(v > 0 for v in capacity.values()):
            unregistered.add(name)
        elif any(v < capacity.get(k, v) for k, v in node_gpu_resources(n, "allocatable").items()):
            short.add(name)
    # A MIG manager's log says why its node's layout change failed or waits, though its pod runs ready.
    # So does it where the node went NotReady: a MIG manager stops host services (the kubelet among them where its
    # host GPU clients list it) around a layout change, and a toolkit restarts containerd after writing its config.
    mig_stuck = {
        str(n.get("metadata", {}).get("name"))
        for n in snapshot.nodes
        if (n.get("metadata", {}).get("labels") or {}).get(MIG_CONFIG_STATE) in ("failed", "pending", "rebooting")
        or any(
            c.get("type") == "Ready" and c.get("status") != "True"
            for c in (n.get("status") or {}).get("conditions") or ()
        )
    }
    labels_by_node = {
        str(n.get("metadata", {}).get("name")): n.get("metadata", {}).get("labels") or {} for n in snapshot.nodes
    }
    operands_in = cache(stack.operands_in)  # one answer per DaemonSet, not one search per pod
    host_driver = stack.policy_obj is not None and not enabled(stack.policy, DRIVER)

    def checks_driver(states: tuple[str, ...], container: str) -> bool:
        """Does this init container run the driver's validation itself (not wait for a ready file)?"""
        driver_check = stack.validations.get(container) == "driver"
        return VALIDATOR.state in states or (TOOLKIT.state in states and driver_check)

    crashing: list[tuple[LogKey, Obj]] = []
    quiet: list[tuple[LogKey, Obj]] = []
    # One running pod per exporter / GFD DaemonSet that shows a sign of trouble: they keep running while
    # they fail at their work, and their log is the only place that says why. GFD's sign is a node without
    # its labels; an exporter's is being a release of its own beside the stack (its mounts, such as the
    # kubelet's pod-resources path, are set by hand, not by the stack). A cluster without GPU workloads reads no log.
    samples: dict[tuple[str, str], tuple[LogKey, Obj]] = {}
    # The stack's own exporter beside running GPU workloads: it mounts the kubelet's pod-resources socket at the
    # default root (hostPath /var/lib/kubelet/pod-resources, NVIDIA/gpu-operator assets/state-dcgm-exporter/
    # 0800_daemonset.yaml@06faaf0c), so on a kubelet with another --root-dir it runs ready and attributes no GPU to
    # its pod; nothing but its log says so. One read, for the first such node.
    exporter_on: dict[str, tuple[tuple[str, str], tuple[LogKey, Obj]]] = {}
    # An exporter release of its own: its running pods per DaemonSet, of which one is read (`_first_started`).
    released: dict[tuple[str, str], list[tuple[str, tuple[LogKey, Obj]]]] = {}
    gpu_workloads_on: set[str] = set()
    workloads: list[tuple[LogKey, Obj]] = []
    # A running device plugin's log on each node, read where a GPU workload there is in trouble: whether the plugin
    # registered (it found NVML through the node's runtime) tells a pod admitted without its allocation from a runtime
    # that gives containers no driver.
    plugin_on: dict[str, tuple[LogKey, Obj]] = {}
    troubled_on: set[str] = set()
    # GPU pods that run ready and name no RuntimeClass, on a node where runc is likely the default runtime: k3s or RKE2
    # (they keep it unless told), or one whose device plugin asks for a RuntimeClass on a stack that deploys no toolkit
    # (one that does names the class on every node), or one whose toolkit is told not to make nvidia the default.
    # Such a pod may run without its GPU, and only its log says so.
    classed_on: set[str] = keeps_runc_nodes(snapshot.nodes) | not_default_nodes(stack, snapshot.nodes)
    classed_ds = classed_daemonsets(snapshot.daemonsets) if not enabled(stack.policy, TOOLKIT) else set()
    unclassed: list[tuple[str, tuple[LogKey, Obj]]] = []
    # With neither, no node can join classed_on, so no pod's GPU requests are worth working out for it.
    watch_unclassed = bool(classed_on or classed_ds)
    gfd_unlabelled = False
    # Pods aimed at a GPU node that request no GPU: they run with no driver or device (`gpuchain.doctor.unallocated`).
    announcing = set(labels_by_node) - unregistered
    unrequested: list[tuple[str, tuple[LogKey, Obj]]] = []
    # A running KubeVirt GPU plugin whose node announces no passthrough GPU, or some by bare device ID: its log says
    # what it found and could not name (`gpuchain.doctor.passthrough`). The nodes by name only once such a plugin runs.
    passthrough: list[tuple[LogKey, Obj]] = []
    nodes_by_name: dict[str, Obj] | None = None
    for pod in snapshot.pods:
        meta = pod.get("metadata", {})
        namespace = meta.get("namespace")
        status = pod.get("status") or {}
        owner = None
        states: tuple[str, ...] = ()  # several for gpuchain's node agent, one per role
        if namespace == stack.namespace or stack.elsewhere:
            for ref in meta.get("ownerReferences") or ():
                if ref.get("kind") == "DaemonSet":
                    owner = ref.get("name")
                    states = operands_in(str(namespace), str(owner)) if owner else ()
                    break
        if not states and namespace == stack.namespace and not meta.get("ownerReferences"):
            # A pod the validator starts itself (the CUDA or plugin validation workload): no DaemonSet owns
            # it, and its crashing init container's log is the validation's failure.
            for cs in status.get("initContainerStatuses") or []:
                waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                if waiting == "CrashLoopBackOff" and not _last_message(cs) and cs.get("name") in stack.validations:
                    crashing.append(((str(namespace), str(meta.get("name")), str(cs.get("name"))), cs))
        node_labels = labels_by_node.get(str((pod.get("spec") or {}).get("nodeName")), {})
        unlabelled = "gpu-feature-discovery" in states and PRODUCT not in node_labels
        gfd_unlabelled = gfd_unlabelled or unlabelled
        own_release = "dcgm-exporter" in states and namespace != stack.namespace
        stacks_exporter = "dcgm-exporter" in states and namespace == stack.namespace
        if (unlabelled or own_release or stacks_exporter) and owner:
            for cs in status.get("containerStatuses") or []:
                if (cs.get("state") or {}).get("running") and cs.get("ready"):
                    key = (str(namespace), str(meta.get("name")), str(cs.get("name")))
                    node_name = str((pod.get("spec") or {}).get("nodeName"))
                    if stacks_exporter:
                        exporter_on.setdefault(node_name, ((str(namespace), str(owner)), (key, cs)))
                    elif own_release:
                        released.setdefault((str(namespace), str(owner)), []).append((node_name, (key, cs)))
                    else:
                        samples.setdefault((str(namespace), str(owner)), (key, cs))
        if "device-plugin" in states:
            for cs in status.get("containerStatuses") or []:
                if (cs.get("state") or {}).get("running") and cs.get("ready"):
                    key = (str(namespace), str(meta.get("name")), str(cs.get("name")))
                    plugin_on.setdefault(str((pod.get("spec") or {}).get("nodeName")), (key, cs))
            if (str(namespace), str(owner)) in classed_ds:
                classed_on.add(str((pod.get("spec") or {}).get("nodeName")))
        if states:
            node = (pod.get("spec") or {}).get("nodeName")
            on_bare_node = ("device-plugin" in states and (node in unregistered or node in short)) or (
                ("mig-manager" in states or "container-toolkit" in states) and node in mig_stuck
            )
            inits = status.get("initContainerStatuses") or []
            for cs in [*inits, *(status.get("containerStatuses") or [])]:
                current = cs.get("state") or {}
                # Crash-looping, or caught between two runs: terminated with an error, before the back-off.
                exited = (current.get("terminated") or {}).get("reason") not in (None, "Completed")
                if exited or (current.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
                    if not _last_message(cs):
                        crashing.append(((str(namespace), str(meta.get("name")), str(cs.get("name"))), cs))
                # A running init container is waiting for a lower link, unless it already restarted; or unless it
                # is no validation wait and holds the plugin of a node that announces no GPU (GKE's driver installer
                # says there why it waits), or the driver's own (no link is below the driver: its driver manager
                # says there what it waits for), or, over a host's driver (the stack deploys none, so no driver pod
                # says how it fails), a validation that runs the check itself, whose log says why it does not pass:
                # the validator's own, and the toolkit's driver-validation (nvidia-validator with COMPONENT=driver,
                # WITH_WAIT=true: gpu-operator assets/state-container-toolkit/0500_daemonset.yaml@v25.3.0), where the
                # other operands' validation init containers only wait for a ready file.
                elif (
                    current.get("running")
                    and (not cs.get("ready") or on_bare_node)
                    and not (
                        cs in inits
                        and not cs.get("restartCount")
                        and (not (on_bare_node or "driver" in states) or cs.get("name") in stack.validations)
                        and not (host_driver and checks_driver(states, str(cs.get("name"))))
                    )
                ):
                    quiet.append(((str(namespace), str(meta.get("name")), str(cs.get("name"))), cs))
        elif _kubevirt_plugin(pod):
            # NVIDIA's KubeVirt GPU device plugin deployed on its own (no stack operand): a crash-looping one's log is
            # its failure (the loader refusing its binary, ...), and nothing else says it.
            crashing += [((str(namespace), str(meta.get("name")), str(cs.get("name"))), cs) for cs in _looping(status)]
            if nodes_by_name is None:
                nodes_by_name = {str(n.get("metadata", {}).get("name")): n for n in snapshot.nodes}
            passthrough += vm_plugin_log(pod, nodes_by_name)
        elif _of_daemonset(meta) and (looping := _looping(status)) and is_hami_plugin(pod):
            # HAMi's device plugin beside a stack that does not run it: a crash-looping one's log says why it serves
            # nothing (no NVML in its container where a node image keeps the driver in a directory of its own, ...).
            crashing += [((str(namespace), str(meta.get("name")), str(cs.get("name"))), cs) for cs in looping]
        where = str(namespace or "default")
        if where in (stack.namespace, "kube-system"):
            continue
        # Running but not ready or restarted, or crash-looping: a crash-looping container's log is its last run's.
        troubled = [
            cs
            for cs in status.get("containerStatuses") or []
            if ((cs.get("state") or {}).get("running") and (not cs.get("ready") or cs.get("restartCount")))
            or ((cs.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        ]
        # requests last: most pods have no troubled container; a share of a GPU from a sharing scheduler's plugin too
        if troubled and (pod_gpu_requests(pod) or shares_a_gpu(pod)):
            workloads += [((where, str(meta.get("name")), str(cs.get("name"))), cs) for cs in troubled]
            troubled_on.add(str((pod.get("spec") or {}).get("nodeName")))
        elif watch_unclassed:
            unclassed += running_unclassed(pod)
        unrequested += running_unrequested(pod, announcing)
        on = str((pod.get("spec") or {}).get("nodeName"))
        if on not in gpu_workloads_on and status.get("phase") == "Running" and pod_gpu_requests(pod):
            gpu_workloads_on.add(on)

    for pod in snapshot.finished:
        # A GPU workload that ended Failed (it restarts Never): its failed containers' logs, as a crash-loop's.
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        workloads += [((ns, name, str(cs.get("name"))), cs) for cs in failed_containers(pod)]
        troubled_on.add(str((pod.get("spec") or {}).get("nodeName")))

    def by_key(candidate: tuple[LogKey, Obj]) -> LogKey:
        return candidate[0]

    for ds, running_on in released.items():
        samples.setdefault(ds, _first_started(running_on, plugin_on))
    for node in sorted(gpu_workloads_on & exporter_on.keys())[:1]:
        ds, candidate = exporter_on[node]
        samples.setdefault(ds, candidate)
    operands = sorted(crashing, key=by_key) + sorted(quiet, key=by_key)
    sampled = sorted(samples.values(), key=by_key)[:MAX_SAMPLE_LOGS]
    if gfd_unlabelled:
        # GFD runs where its labels are missing: nfd-master, which writes them, may be dropping them.
        sampled += _with_status(master_containers(snapshot.pods))
    if stack.id == "gpu-operator" and wants_log(stack.policy_obj):
        # The operator's ClusterPolicy does not say it reconciled every operand: its own log says why not.
        sampled += _with_status(operator_containers(snapshot.pods, stack.namespace))
        if placed_nowhere(stack.policy_obj):
            # It finds no NFD label or no GPU node: nfd-master, which writes the labels, may run and be refused.
            sampled += _with_status(master_containers(snapshot.pods))
    # Node Feature Discovery's pods that crash: their log says why NFD labels no node (the operator places nothing).
    sampled += _with_status([(p, c) for p, c in nfd_containers(snapshot.pods) if _crashing(p, c)])
    # Fabric Manager fails inside a driver container that stays ready: its log says why CUDA validation fails.
    sampled += fabric_log_candidates(
        snapshot.pods, namespace=stack.namespace, is_driver=lambda ns, ds: "driver" in operands_in(ns, ds)
    )
    # A GPU the kernel could not probe: the syslog health monitor's log on a node short of its peers' GPUs says so.
    sampled += monitor_log_candidates(snapshot.pods, snapshot.nodes)
    sampled = list(dict(sampled).items())  # one read per container, however many reasons ask for it
    plugins = sorted((plugin_on[n] for n in troubled_on if n in plugin_on), key=by_key)[:MAX_WORKLOAD_LOGS]
    sandbox = sandbox_log_candidates(snapshot, stack)  # a VM node's operands (none on a cluster without one)
    running = sorted((c for on, c in unclassed if on in classed_on), key=by_key)[:MAX_WORKLOAD_LOGS]
    running += sorted((c for _, c in unrequested), key=by_key)[:MAX_WORKLOAD_LOGS]
    sandbox += sorted(passthrough, key=by_key)[:MAX_PASSTHROUGH_LOGS]
    troubled = sorted(workloads, key=by_key)[:MAX_WORKLOAD_LOGS]
    return operands[:limit] + sampled + troubled + plugins + sandbox + running


def _first_started(
    running_on: list[tuple[str, tuple[LogKey, Obj]]], plugin_on: dict[str, tuple[LogKey, Obj]]
) -> tuple[LogKey, Obj]:
    """The exporter pod whose log is read for its DaemonSet: one that started before the device plugin on its node
    (so, on a node whose driver comes up after boot, possibly before the driver, and dcgm-exporter loads NVML once, at
    start: `links.exporter_nvml`), else the first."""
    for node, candidate in running_on:
        plugin = plugin_on.get(node)
        if plugin is not None and "" < running_since(candidate[1]) < running_since(plugin[1]):
            return candidate
    return running_on[0][1]


def _with_status(containers: list[tuple[Obj, str]]) -> list[tuple[LogKey, Obj]]:
    """Each (pod, container) as a log key with that container's status ({} when it has none yet)."""
    out: list[tuple[LogKey, Obj]] = []
    for pod, container in containers:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        key = (str(namespace_of(pod) or "default"), name_of(pod), container)
        out.append((key, next((cs for cs in statuses if cs.get("name") == container), {})))
    return out


def _crashing(pod: Obj, container: str) -> bool:
    """Whether ``container`` of ``pod`` crash-loops with no last log lines in its status."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if cs.get("name") == container and waiting == "CrashLoopBackOff" and not _last_message(cs):
            return True
    return False


def _last_message(status: Obj) -> str | None:
    """A container status's ``lastState.terminated.message``: the last log lines the kubelet kept."""
    return cast("str | None", ((status.get("lastState") or {}).get("terminated") or {}).get("message"))


def _previous_run_wanted(status: Obj) -> bool:
    """Whether a container whose log is read also needs its previous run's: it runs again after a
    restart with no last log lines in its status, so the current run's log is the fresh start and
    the run that failed is the previous one (a crash-looping container is waiting, so its current
    read is already that run)."""
    return (
        bool(status.get("restartCount"))
        and bool((status.get("state") or {}).get("running"))
        and not _last_message(status)
    )


def with_logs(snapshot: Snapshot, *, reader: LogReader | None, limit: int = MAX_LOGS) -> tuple[Snapshot, int]:
    """The snapshot plus the logs of up to ``limit`` failing containers (and the previous run's of
    those that restarted); also how many reads it made."""
    if reader is None:
        return snapshot, 0
    candidates = _log_candidates(snapshot, limit)
    keys = [key for key, _ in candidates]
    logs = dict(snapshot.logs)
    for key in keys:
        text = reader(*key)
        if text:
            logs[key] = text
    # A ready GPU pod on each of a few GPU nodes, read for GPUs a systemd reload took from it, and the tenants of a few
    # time-sliced nodes, read for CUDA allocations a co-tenant's memory starved.
    probes = [key for key in ready_gpu_probes(snapshot, detect(snapshot).namespace) if key not in logs]
    for key in probes:
        text = reader(*key)
        if text and probe_kept(text):
            logs[key] = text
    again = sorted({key for key, status in candidates if _previous_run_wanted(status)})
    previous = dict(snapshot.previous_logs)
    for key in again:
        text = reader(*key, previous=True)
        if text:
            previous[key] = text
    reads = len(keys) + len(probes) + len(again)
    return Snapshot(**{**snapshot.__dict__, "logs": logs, "previous_logs": previous}), reads


def scrape_candidates(snapshot: Snapshot) -> list[tuple[str, str, str]]:
    """``(node, namespace, pod)`` of every ready exporter pod that runs gpuchain's exporter (only it
    serves the trust signals; NVIDIA's dcgm-exporter would cost a request for nothing), by node."""
    stack = detect(snapshot)
    operands_in = cache(stack.operands_in)
    found = []
    for pod in snapshot.pods:
        meta, spec, status = pod.get("metadata", {}), pod.get("spec") or {}, pod.get("status") or {}
        owner = next((r.get("name") for r in meta.get("ownerReferences") or () if r.get("kind") == "DaemonSet"), None)
        node, namespace = spec.get("nodeName"), str(meta.get("namespace"))
        if not (owner and node and status.get("podIP")) or "dcgm-exporter" not in operands_in(namespace, str(owner)):
            continue
        ready = is_ready(pod)
        runs_gpuchain = any(
            "gpuchain" in [*(c.get("command") or ()), *(c.get("args") or ())][:1] for c in spec.get("containers") or ()
        )
        if ready and runs_gpuchain:
            found.append((str(node), namespace, str(meta.get("name"))))
    return sorted(found)


def with_scrapes(
    snapshot: Snapshot, *, scraper: Scraper | None, limit: int = MAX_SCRAPES, clock: Callable[[], float] = time.time
) -> tuple[Snapshot, int]:
    """The snapshot plus the scrapes of up to ``limit`` gpuchain exporters (`scrape_candidates`),
    each stamped with when it was read; also how many reads it made."""
    if scraper is None:
        return snapshot, 0
    candidates = scrape_candidates(snapshot)
    scrapes = dict(snapshot.scrapes)
    for node, namespace, pod in candidates[:limit]:
        text = scraper(namespace, pod)
        if text is not None:
            scrapes[node] = Scrape(text, clock())
    unscraped = max(0, len(candidates) - limit)
    return Snapshot(**{**snapshot.__dict__, "scrapes": scrapes, "unscraped": unscraped}), min(len(candidates), limit)


def timed_gather(
    cluster: Cluster,
    *,
    namespace: str | None = None,
    reader: LogReader | None = None,
    progress: Callable[[str], None] | None = None,
    scraper: Scraper | None = None,
) -> tuple[Snapshot, dict[str, int], float]:
    """gather() + with_logs() + with_scrapes(), with the API calls made (per verb, ``logs`` and
    ``proxy`` included) and the seconds."""
    before = cluster.calls.snapshot()
    started = time.perf_counter()
    snap = gather(cluster, namespace=namespace, progress=progress)
    snap, log_reads = with_logs(snap, reader=reader)
    snap, scrape_reads = with_scrapes(snap, scraper=scraper)
    after = cluster.calls.snapshot()
    calls = {
        verb: after.get(verb, 0) - before.get(verb, 0) for verb in after if after.get(verb, 0) != before.get(verb, 0)
    }
    if log_reads:
        calls["logs"] = log_reads
    if scrape_reads:
        calls["proxy"] = scrape_reads
    return snap, calls, time.perf_counter() - started
