"""The failures any operand's pod may show whatever it runs, and their repair: a pod the scheduler cannot place (a
taint, a host port another pod holds, no room), a ConfigMap or Secret it references that does not exist, an image
without the command its spec runs, and a container the kernel kills for its memory limit."""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, operand_daemonset, placement_fix
from gpuchain.doctor.links.oom_limit import lighter, memory_limit
from gpuchain.doctor.links.releases import carried_repair
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import HELM_APP_VERSION, HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.placement import Blocker, pod_blocker
from gpuchain.doctor.pods import NOT_CREATED, PodState
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import Operand

#: The runtime's refusal when the image has no such command: Go's os/exec error ("exec: %q: ..." with
#: ErrNotFound's "executable file not found in $PATH", golang/go src/os/exec/exec.go and lp_unix.go), which
#: runc quotes after "unable to start container process" and the kubelet keeps as the container's
#: StartError / RunContainerError / ContainerCannotRun message.
EXEC_MISSING = re.compile(
    r'exec: "([^"]+)": (?:executable file not found in \$PATH|stat \S+: no such file or directory)'
)


def command_missing(ctx: Context, *, view: NodeView, operand: Operand) -> Known | None:
    """The container never started because its image has no such command: the image and the command its
    pod spec runs belong to different releases (an image tag pinned apart from the chart or policy)."""
    pod = view.pod(operand) or {}
    refused = [
        (str(cs.get("name", "")), str(said.get("message") or ""))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        for st in (cs.get("state") or {}, cs.get("lastState") or {})
        for said in (st.get("terminated") or {}, st.get("waiting") or {})
        if said.get("reason") in NOT_CREATED and EXEC_MISSING.search(str(said.get("message") or ""))
    ]
    if not refused:
        return None
    container, message = refused[0]
    found = EXEC_MISSING.search(message)
    assert found is not None
    command = found.group(1)
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
    image = str(spec.get("image", ""))
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"
    namespace = (pod.get("metadata") or {}).get("namespace")
    ds = owner_daemonset(ctx, pod)
    labels = (ds.get("metadata") or {}).get("labels") or {}
    release, app = labels.get(HELM_RELEASE), labels.get(HELM_APP_VERSION)
    evidence = (f"container {container} ({image}): {message}",)
    cause = (
        f"the container never started: its image {image} has no {command!r}, the command its pod spec runs, so the "
        "image and the spec come from different releases (an image tag set apart from the chart or the policy)."
    )
    if ctx.policy_obj is not None:
        key = operand.spec_key
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {key: {"version": None}}})
        return Known(
            cause=cause,
            evidence=evidence,
            action=action,
            fix=ctx.stack.render(action) + f"   # the operator's own {key} image for its release, which has {command}",
        )
    if release and app and tag != f"v{app}":
        _, chart, _ = chart_of(ctx, labels)
        return Known(
            cause=cause + f" The chart release {release} is {app}; the image tag is {tag}.",
            evidence=(*evidence, f"DaemonSet {name_of(ds)}: {HELM_APP_VERSION}={app}, {HELM_RELEASE}={release}"),
            action=None,
            fix=f"helm upgrade {release} {chart} -n {namespace} --reuse-values --set image.tag=v{app}   # the image "
            f"the chart {app} was written for (or upgrade the chart to the image's release {tag})",
        )
    if (carried := carried_repair(ctx, pod=pod, operand=operand, container=container, command=command)) is not None:
        return Known(cause=f"{cause} {carried.cause}", evidence=evidence, action=carried.action, fix=carried.fix)
    return Known(
        cause=cause,
        evidence=evidence,
        action=None,
        fix=f"# run {container} from the image release its DaemonSet's spec was written for (one that has {command}), "
        f"not {image}; or the spec of {tag}'s release",
    )


#: The object the kubelet names as missing (catalog apimachinery.object-not-found).
OBJECT_NAMED = re.compile(r'\b(configmap|secret)s? "([^"]+)" not found')


def object_missing(ctx: Context, *, view: NodeView, operand: Operand, state: PodState) -> Known | None:
    """The pod references a ConfigMap or Secret that is not in its namespace: the kubelet cannot mount it
    (a FailedMount Event) or build the container's env (CreateContainerConfigError), so no container of the
    pod starts until it exists there."""
    said = [state.message] if state.status == "CreateContainerConfigError" else []
    said += [
        str(ev.get("message", ""))
        for ev in view.events
        if (ev.get("involvedObject") or {}).get("name") == state.name and ev.get("reason") == "FailedMount"
    ]
    for text in said:
        found = catalog.find(text, "apimachinery.object-not-found")
        named = OBJECT_NAMED.search(found.line) if found else None
        if found is None or named is None:
            continue
        pod = view.pod(operand) or {}
        ns = namespace_of(pod) or ctx.namespace
        kind, name = named.group(1), named.group(2)
        create = (
            f"create configmap {name} --from-file=<key>=<file>"
            if kind == "configmap"
            else f"create secret generic {name} --from-literal=<key>=<value>"
        )
        return Known(
            cause=f"the {operand.state} pod references {kind} {name}, which does not exist in its namespace {ns}, so "
            "the kubelet does not start its containers.",
            evidence=(f"kubelet: {found.line}", found.entry.cite()),
            action=None,
            fix=f"kubectl -n {ns} {create}   # create {kind} {name} in {ns}, where the pod looks for it (or copy it "
            f"there: kubectl get {kind} {name} -A)",
        )
    return None


#: The memory limit an OOM-killed operand gets at least: its limit doubled, never under this (Mi).
MIN_RAISED_LIMIT_MI = 512
MEMORY = re.compile(r"(\d+)(Ki|Mi|Gi)?$")


def raised_limit(limit: str) -> str:
    """The memory limit an OOM-killed container gets: ``limit`` doubled, never under MIN_RAISED_LIMIT_MI ("" or a
    quantity gpuchain cannot read: that floor)."""
    current = _mebibytes(limit) if limit else None
    return f"{max(2 * current if current else 0, MIN_RAISED_LIMIT_MI)}Mi"


def _mebibytes(quantity: str) -> int | None:
    found = MEMORY.match(quantity)
    if not found:
        return None
    scale = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, None: 1 / 2**20}[found.group(2)]
    return int(int(found.group(1)) * scale)


def oom_killed(ctx: Context, *, view: NodeView, operand: Operand, state: PodState) -> Known | None:
    """A container the kernel killed for its memory limit (terminated OOMKilled, exit 137): the limit is
    too low for this node (more GPUs, more metrics); restarting it changes nothing."""
    pod = view.pod(operand) or {}
    statuses = [
        *((pod.get("status") or {}).get("initContainerStatuses") or []),
        *((pod.get("status") or {}).get("containerStatuses") or []),
    ]
    cs = next((c for c in statuses if c.get("name") == state.container), None)
    reasons = [((cs or {}).get(k) or {}).get("terminated", {}).get("reason") for k in ("state", "lastState")]
    if "OOMKilled" not in reasons:
        return None
    ns = namespace_of(pod) or ctx.namespace
    ds = owner_ds(pod) or ctx.ds(operand)
    spec = ((pod.get("spec") or {}).get("initContainers") or []) + ((pod.get("spec") or {}).get("containers") or [])
    container: Obj = next((c for c in spec if c.get("name") == state.container), {})
    limit = memory_limit(ctx, container={"name": state.container, **container}, ns=ns, ds=ds)
    raised = raised_limit(limit)
    evidence = (
        f"container {state.container}: terminated OOMKilled (exit 137), {state.restarts} restarts",
        f"memory limit {limit or 'none set in the pod spec'}",
    )
    cause = (
        f"the kernel kills the {state.container} container for exceeding its memory"
        + (f" limit ({limit})" if limit else " (no limit in its pod spec: a LimitRange's default, or the node's)")
        + ", so it restarts and is killed again; the limit is too low for what it serves on this node."
    )
    if ns == ctx.namespace and ctx.policy_obj is not None:
        patch = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {operand.spec_key: {"resources": {"limits": {"memory": raised}}}}},
        )
        return Known(
            cause=cause,
            evidence=evidence,
            action=patch,
            fix=ctx.stack.render(patch) + "   # raises the memory limit" + lighter(operand),
        )
    return Known(
        cause=cause,
        evidence=evidence,
        action=None,
        fix=ctx.stack.render(
            Fix(FixOp.SET_LIMITS, f"{ns}/{ds}", {"container": state.container, "limits": {"memory": raised}})
        )
        + "   # raises the memory limit (in its Helm release: resources.limits.memory)"
        + lighter(operand),
    )


#: Restarts after which a running container whose last end was an OOM kill is killed again and again, not once (a
#: node reboot restarts a pod once; an exporter on more GPUs than its limit allows is killed at each peak).
OOM_AGAIN = 3


def oom_restarting(
    ctx: Context, view: NodeView, operand: Operand, pod: Obj, state: PodState
) -> tuple[PodState, Known] | None:
    """A container running again after the kernel killed it for its memory OOM_AGAIN times or more: ready between
    kills, it is killed at the next peak of what it serves, so its memory limit is the repair all the same."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = ((cs.get("lastState") or {}).get("terminated") or {}).get("reason")
        restarts = int(cs.get("restartCount") or 0)
        if last == "OOMKilled" and restarts >= OOM_AGAIN:
            killed = dataclasses.replace(state, container=str(cs.get("name", "")), restarts=restarts)
            known = oom_killed(ctx, view=view, operand=operand, state=killed)
            return (killed, known) if known is not None else None
    return None


#: The scheduler's reasons for a pod that fits nowhere, and what makes room (kubernetes
#: pkg/scheduler/framework/plugins: noderesources "Insufficient <resource>", nodeports "didn't have
#: free ports for the requested pod ports", tainttoleration "had untolerated taint").
ROOM = (
    (
        r"Insufficient (cpu|memory|ephemeral-storage|pods)",
        "the node has no {0} left for it: lower the DaemonSet's {0} "
        "request, give its pods a higher priority (priorityClassName system-node-critical) so the scheduler preempts "
        "for them, or move workloads off the node",
    ),
    (r"Too many pods", "the node is at its pod limit: raise the kubelet's maxPods or move pods off the node"),
    (r"didn't have free ports", "another pod holds the host port it needs: move or reconfigure that pod"),
)
#: The scheduler's words for a taint the pod does not tolerate ("had untolerated taint {key: value}").
UNTOLERATED = re.compile(r"untolerated taint \{([^:}]+)")


def _host_ports(pod: Obj) -> set[int]:
    containers = ((pod.get("spec") or {}).get("containers")) or []
    return {int(p["hostPort"]) for c in containers for p in c.get("ports") or [] if p.get("hostPort")}


def _port_holder(ctx: Context, view: NodeView, pod: Obj) -> tuple[Obj, int] | None:
    """The pod on the node that holds a host port ``pod`` asks for (the scheduler's NodePorts filter says only
    "didn't have free ports for the requested pod ports"), and the port; None when none on the node does.
    Every pod of the snapshot is looked at (a second release of an operand is in no view), on this rare path."""
    wanted = _host_ports(pod)
    for other in ctx.snapshot.pods:
        if (other.get("spec") or {}).get("nodeName") != view.name or other is pod:
            continue
        shared = wanted & _host_ports(other)
        if shared:
            return other, min(shared)
    return None


def unschedulable(ctx: Context, *, view: NodeView, operand: Operand, state: PodState) -> Known:
    """A DaemonSet pod the scheduler cannot place on its node: the scheduler's words, and what makes room."""
    cause = (
        f"the {operand.state} pod for this node is Pending: the scheduler cannot place it ({state.message}), so the "
        "link has no pod here; the DaemonSet is right, restarting it changes nothing."
    )
    evidence = (f"pod {state.name}: Pending, unschedulable", f"scheduler: {state.message}")
    said = UNTOLERATED.search(state.message)
    taints = ((view.node.get("spec") or {}).get("taints")) or []
    taint = next((t for t in taints if said and t.get("key") == said.group(1).strip()), None)
    ds = operand_daemonset(ctx, operand)
    if taint is not None and ds is not None:
        # The tolerations to add, on the object the stack's operands take their tolerations from: for every
        # taint of the node the pod does not tolerate, not only the one the scheduler's message names.
        block = pod_blocker((view.pod(operand) or {}).get("spec") or {}, view.node)
        action = placement_fix(
            ctx,
            view=view,
            ds=ds,
            block=block if block and block.kind == "taint" else Blocker(kind="taint", detail=taint),
        )
        return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action))
    held = _port_holder(ctx, view, view.pod(operand) or {}) if "didn't have free ports" in state.message else None
    if held is not None:
        holder, port = held
        owner = owner_ds(holder) or "no DaemonSet"
        where = f"{(holder.get('metadata') or {}).get('namespace')}/{name_of(holder)}"
        return Known(
            cause=cause,
            evidence=(*evidence, f"pod {where} ({owner}) holds host port {port} on {view.name}"),
            action=None,
            fix=f"# pod {where} ({owner}) holds host port {port}, which the {operand.state} pod needs on {view.name}: "
            "remove whichever of the two is a second release of the same component, or give one of them another "
            "host port",
        )
    fix = "# gpuchain knows no change that makes room for this scheduler reason"
    for pattern, text in ROOM:
        found = re.search(pattern, state.message)
        if found:
            fix = text.format(*(found.groups() or ("",)))
            break
    return Known(cause=cause, evidence=evidence, action=None, fix=f"{fix} (node {view.name}, pod {state.name})")
