"""The checks: one pure function per link, each reading a node's view and the cluster context.

Each returns the link's state, a one-line summary and the findings it made. The walk
(`gpuchain.doctor.diagnose`) calls them bottom-up and stops at the first broken foundation link.
Finding ids are stable; every finding carries evidence (objects, log lines, numbers), its cause in
one sentence and a fix as a command.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from gpuchain.common.labels import (
    DEPLOY_PREFIX,
    DEVICE_PLUGIN_CONFIG,
    GPU_PRESENT,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_CONFIG_STATE_REASON,
    OPERANDS_LABEL,
    PAUSED_FOR_MIG_CHANGE,
)
from gpuchain.doctor import catalog
from gpuchain.doctor.context import NO_POLICY, Context, NodeView, replicas_in
from gpuchain.doctor.evidence import ANYWHERE, next_step
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import KUBEADM, distribution_of, node_info
from gpuchain.doctor.placement import Blocker, blocker, pod_blocker
from gpuchain.doctor.pods import PodState, init_done, pod_state, start_refused, unschedulable_message
from gpuchain.doctor.snapshot import PRODUCT as PRODUCT  # re-exported: the planner reads it here
from gpuchain.doctor.stacks import GPU_NODE_LABELS, daemonsets_in, is_gpu_node
from gpuchain.doctor.stacks.gpu_operator import UPGRADE_STATE
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA, allocator_of
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, created_of, labels_of, name_of
from gpuchain.operator.operands import (
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    DRIVER,
    GFD,
    MIG_MANAGER,
    NFD_GPU_LABELS,
    RUNTIME_CLASS_HANDLER,
    TOOLKIT,
    VALIDATOR,
    Operand,
    deploy_label,
    enabled,
)
from gpuchain.operator.upgrade import POD_RESTART, VALIDATION
from gpuchain.remediation.gpuloop import loop_evidence
from gpuchain.remediation.model import CONDITION_TYPE, PODS_ANNOTATION, node_view

GPU_COUNT = "nvidia.com/gpu.count"
DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
#: The runtime's words when it has no nvidia handler (catalog.yaml): containerd's CRI, CRI-O.
NO_RUNTIME = ("containerd.no-runtime-for-handler", "cri-o.runtime-handler-not-found")
#: NVIDIA's published dcgm-exporter image (it bundles DCGM), as gpu-operator's values name it.
DCGM_EXPORTER_IMAGE = {
    "repository": "nvcr.io/nvidia/k8s",
    "image": "dcgm-exporter",
    "version": "3.3.9-3.6.1-ubuntu22.04",
}


@dataclass(frozen=True)
class Result:
    """What one check concluded about one link on one node."""

    state: LinkState
    summary: str
    findings: tuple[Finding, ...] = ()


def _finding(
    view: NodeView,
    fid: str,
    sev: Severity,
    link: str,
    cause: str,
    evidence: list[str],
    fix: str,
    action: Fix | None = None,
) -> Finding:
    return Finding(fid, sev, link, cause, tuple(e for e in evidence if e), fix, node=view.name, action=action)


def opted_out(view: NodeView, operand: Operand) -> str | None:
    """The label that keeps ``operand`` off this node (``key=false``), if any."""
    for key in (OPERANDS_LABEL, deploy_label(operand)):
        if view.labels.get(key) == "false":
            return f"{key}=false"
    return None


def operand_daemonset(ctx: Context, operand: Operand) -> Obj | None:
    """The operand's DaemonSet in the stack's namespace (by name, or by prefix such as NVIDIADriver's)."""
    mine = daemonsets_in(ctx.snapshot, ctx.namespace)
    if ctx.ds(operand) in mine:
        return mine[ctx.ds(operand)]
    return next((d for n, d in sorted(mine.items()) if ctx.stack.operand_of(n) == operand.state), None)


def placement_fix(ctx: Context, view: NodeView, ds: Obj, block: Blocker) -> Fix:
    """The change that lets ``ds`` place its pod: tolerate the taint, or give the node the label."""
    if block.kind == "taint":
        taint = block.detail
        toleration = {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
        if ctx.policy_obj is not None:
            tolerations = [*(t.to_dict() for t in ctx.policy.daemonsets.tolerations), toleration]
            return Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"daemonsets": {"tolerations": tolerations}}})
        current = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or []
        patch = {"spec": {"template": {"spec": {"tolerations": [*current, toleration]}}}}
        return Fix(FixOp.PATCH_DAEMONSET, f"{ctx.namespace}/{name_of(ds)}", patch)
    d = block.detail
    values = list(d.get("values") or [])
    if d.get("operator") in ("NotIn", "DoesNotExist"):
        return Fix(FixOp.LABEL_NODE, view.name, {str(d["key"]): None})
    return Fix(FixOp.LABEL_NODE, view.name, {str(d["key"]): str(values[0]) if values else "true"})


NFD_PREFIX = "feature.node.kubernetes.io/"


def nfd_install() -> Fix:
    """Install Node Feature Discovery (its own chart and namespace)."""
    return Fix(
        FixOp.INSTALL,
        "",
        {
            "release": "node-feature-discovery",
            "chart": "nfd/node-feature-discovery",
            "namespace": "node-feature-discovery",
            "fact": "nfd",
        },
    )


def _nfd_hint(ctx: Context) -> str:
    return (
        f"   # or: helm upgrade gpu-operator nvidia/gpu-operator -n {ctx.namespace} --reuse-values "
        "--set nfd.enabled=true"
        if ctx.stack.id == "gpu-operator"
        else ""
    )


def _nfd_worker(ds: Obj) -> bool:
    """A Node Feature Discovery worker DaemonSet (NFD's own chart, or the one a GPU chart bundles)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = " ".join(str(c.get("image", "")) for c in spec.get("containers") or [])
    return "node-feature-discovery" in images and "worker" in name_of(ds)


def _nfd_missing(ctx: Context, view: NodeView, ds_name: str, block: Blocker, link: str) -> Result:
    """The stack selects GPU nodes by an NFD label the node lacks, so the first link whose DaemonSet
    selects on it (the driver's in the operator, the plugin's on a managed image) is missing here.

    What repairs it follows from NFD's own state: NFD labelled the node's NVIDIA device under another
    name (its ``deviceLabelFields`` publish the class too, ``pci-0300_10de``), so the node gets the label
    the DaemonSet asks for; its worker runs but cannot land on the node (a taint it does not tolerate),
    so the worker gets the toleration; or no NFD runs at all, so it is installed."""
    others = sorted(
        k for k in view.labels if k.startswith(NFD_PREFIX + "pci-") and "10de" in k and k != block.detail.get("key")
    )
    workers = sorted((d for d in ctx.snapshot.daemonsets if _nfd_worker(d)), key=name_of)
    kept = next(((w, b) for w in workers if (b := blocker(w, view.node)) is not None and b.kind == "taint"), None)
    evidence = [block.describe(), f"{ds_name} places no pod on {view.name}", f"GPUs present: {gpus_present(view)}"]
    action: Fix
    if others and block.kind == "selector":
        values = list(block.detail.get("values") or [])
        action = Fix(FixOp.LABEL_NODE, view.name, {str(block.detail["key"]): str(values[0]) if values else "true"})
        cause = (
            f"Node Feature Discovery labelled this node's NVIDIA device as {others[0]}, not {block.detail['key']}, "
            f"which {ds_name} selects on, so it places no pod here and the {link} link is missing."
        )
        evidence.append(f"NFD labels on the node: {', '.join(others)}")
        fix = ctx.stack.render(action) + (
            "   # or have NFD publish the vendor-only label (its sources.pci.deviceLabelFields: [vendor]), or give "
            f"{ds_name} an affinity on {others[0]}"
        )
    elif kept is not None:
        worker, taint = kept
        toleration = {"key": taint.detail["key"], "operator": "Exists", "effect": taint.detail["effect"]}
        current = (((worker.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or []
        ns = str((worker.get("metadata") or {}).get("namespace") or "")
        action = Fix(
            FixOp.PATCH_DAEMONSET,
            f"{ns}/{name_of(worker)}",
            {"spec": {"template": {"spec": {"tolerations": [*current, toleration]}}}},
        )
        cause = (
            f"Node Feature Discovery's worker {ns}/{name_of(worker)} does not tolerate this node's taint, so NFD never "
            f"labels the node ({block.detail.get('key')} is absent) and {ds_name}, which selects on it, places no pod "
            f"here: the {link} link is missing."
        )
        evidence.append(f"NFD worker {ns}/{name_of(worker)}: {taint.describe()}")
        fix = ctx.stack.render(action) + "   # the NFD worker tolerates the GPU taint (its chart's worker.tolerations)"
    else:
        action = nfd_install()
        cause = (
            f"the node has GPUs but Node Feature Discovery never labelled them ({NFD_GPU_LABELS[0]} is absent), "
            f"and {ctx.stack.title}'s DaemonSets select GPU nodes by that label, so no operand, the {link} "
            "first, is placed here."
        )
        fix = ctx.stack.render(action) + _nfd_hint(ctx)
    return Result(
        LinkState.BROKEN,
        "Node Feature Discovery never labelled this node",
        (_finding(view, "nfd.not-labelled", Severity.ERROR, link, cause, evidence, fix, action),),
    )


def operator_pod(ctx: Context) -> Obj | None:
    """The stack's operator pod in its namespace (the one that creates the operand DaemonSets)."""
    return next(
        (
            p
            for p in ctx.snapshot.pods
            if (p.get("metadata") or {}).get("namespace") == ctx.namespace and _operator_pod(name_of(p))
        ),
        None,
    )


def _restart_operator(ctx: Context, operator: Obj | None) -> tuple[Fix | None, str, list[str]]:
    """The change that brings back a missing object the operator makes (an operand DaemonSet, the
    RuntimeClass) while the operator runs: restart the operator, which reconciles on start. Never
    the object itself: the operator owns it, and a copy applied by hand is overwritten (or fights
    the operator) at its next reconcile."""
    if operator is not None:
        state = pod_state(operator)
        restart = Fix(
            FixOp.DELETE,
            f"{ctx.namespace}/{state.name}",
            {
                "kind": "Pod",
                "namespace": ctx.namespace,
                "name": state.name,
                NOT_SIMULATED: "the simulator runs no operator that would recreate the DaemonSet",
            },
        )
        return (
            restart,
            ctx.stack.render(restart) + "   # the operator reconciles again when it starts",
            [state.describe()],
        )
    return (
        None,
        f"start the operator again (kubectl -n {ctx.namespace} get deploy; scale it to 1), or read another namespace "
        f"(--namespace; read {ctx.namespace})",
        [f"no operator pod in namespace {ctx.namespace}"],
    )


def _scheduler_says(ctx: Context, pod: Obj) -> str:
    """Why the scheduler does not place ``pod``: its PodScheduled condition, else its latest
    FailedScheduling Event ("" when neither says)."""
    said = unschedulable_message(pod)
    if said:
        return said
    name = name_of(pod)
    return next(
        (
            str(e.get("message", ""))
            for e in reversed(ctx.snapshot.events)
            if e.get("reason") == "FailedScheduling" and (e.get("involvedObject") or {}).get("name") == name
        ),
        "",
    )


def _labels_that_place(spec: Obj, node: Obj) -> dict[str, str | None] | None:
    """The node label changes that let a pod of ``spec`` onto ``node``; None when a taint (not a
    label) keeps it off, {} when nothing does."""
    changes: dict[str, str | None] = {}
    labelled = {**node, "metadata": {**(node.get("metadata") or {}), "labels": dict(labels_of(node))}}
    for _ in range(len(spec.get("nodeSelector") or {}) + 8):  # one label per unmet term; bounded
        block = pod_blocker(spec, labelled)
        if block is None:
            return changes
        if block.kind == "taint":
            return None
        d = block.detail
        values = list(d.get("values") or [])
        value = None if d.get("operator") in ("NotIn", "DoesNotExist") else str(values[0]) if values else "true"
        changes[str(d["key"])] = value
        labels = labelled["metadata"]["labels"]
        if value is None:
            labels.pop(str(d["key"]), None)
        else:
            labels[str(d["key"])] = value
    return None


def _operator_down(ctx: Context, view: NodeView, operator: Obj, name: str, link: str) -> Result:
    """The operand DaemonSet is missing because the operator itself does not run: name its pod,
    why it does not run, and the change that lets it run (it then creates the DaemonSets)."""
    state = pod_state(operator)
    spec = operator.get("spec") or {}
    said = _scheduler_says(ctx, operator) if not spec.get("nodeName") else ""
    where = f"DaemonSet {ctx.namespace}/{name}"
    evidence = [
        state.describe(),
        f"scheduler: {said}" if said else "",
        state.message,
        *_said(state.last_log),
        f"{where} does not exist",
    ]
    action: Fix | None = None
    if said:
        why = "the scheduler places it on no node"
        # A node the operator may run on (operators run beside the GPU nodes, not on them, by preference).
        nodes = sorted(ctx.snapshot.nodes, key=lambda n: (is_gpu_node(n), name_of(n)))
        kept = next(((n, b) for n in nodes if (b := pod_blocker(spec, n)) is not None), None)
        if kept is not None:
            evidence.insert(2, f"on {name_of(kept[0])}: {dataclasses.replace(kept[1], owner='operator').describe()}")
        placing = [(n, _labels_that_place(spec, n)) for n in nodes]
        # A node that labels and taints already admit means the scheduler lacks something else (CPU, memory).
        admitted = any(c == {} for _, c in placing)
        labelled = None if admitted else next(((n, c) for n, c in placing if c), None)
        taint = next((b for n in nodes if (b := pod_blocker(spec, n)) is not None and b.kind == "taint"), None)
        if labelled is not None:
            action = Fix(FixOp.LABEL_NODE, name_of(labelled[0]), dict(labelled[1] or {}))
            fix = (
                ctx.stack.render(action) + "   # a node the operator's nodeSelector/affinity accepts; or change the "
                "operator's nodeSelector (the chart's operator.nodeSelector) to labels your nodes have"
            )
        elif taint is not None and not admitted:
            # No label change places it: the change is the Deployment's, made through its chart (said as a comment).
            t = taint.detail
            value = f"={t['value']}" if t.get("value") else ""
            fix = (
                f"# let the operator's Deployment tolerate the taint {t['key']}{value}:{t['effect']} (the chart's "
                "operator.tolerations), or run it on a node without that taint"
            )
        else:
            fix = (
                "# give the operator's pod what the scheduler says it lacks: free CPU or memory on a node, or "
                "lower its requests (the chart's operator.resources)"
            )
    else:
        why = f"{state.status}" + (f" ({state.message})" if state.message else "")
        known = catalog.known_error(state.last_log)
        again = Fix(
            FixOp.DELETE,
            f"{ctx.namespace}/{state.name}",
            {"kind": "Pod", "namespace": ctx.namespace, "name": state.name},
        )
        fix = (
            f"# {known.entry.fix}"
            if known
            else ctx.stack.render(again) + "   # runs it again; gpuchain knows no repair for this failure"
        )
    return Result(
        LinkState.BROKEN,
        f"operator {state.status}: no {name}",
        (
            _finding(
                view,
                "operator.not-running",
                Severity.ERROR,
                link,
                f"the operator's pod {state.name} is {state.status}: {why}. The operator has never reconciled, so "
                f"{where} and the other operand DaemonSets do not exist and no link of the chain is deployed.",
                evidence,
                fix,
                action,
            ),
        ),
    )


def _said(log: str) -> list[str]:
    """What a crashed container's log says, as evidence: the line a catalog entry knows and the entry,
    else its last error line (or its last line, its final word) quoted as unrecognised."""
    known = catalog.known_error(log)
    if known is not None:
        return list(known.evidence())
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    odd = catalog.unknown_error(log) or (lines[-1] if lines else None)
    return [f"unrecognised: {odd}"] if odd else []


def _operator_pod(name: str) -> bool:
    """NVIDIA's operator Deployment is ``gpu-operator`` (pods gpu-operator-<hash>-<id>), gpuchain's
    ``gpuchain-operator``."""
    return name.startswith(("gpu-operator-", "gpuchain-operator-")) and "node-feature-discovery" not in name


def unscheduled(ctx: Context, view: NodeView, operand: Operand, link: str) -> Result | None:
    """An enabled operand that should run here but has no pod: its DaemonSet is missing, or a taint
    or selector keeps it off the node (named, with the change that lets it in)."""
    if opted_out(view, operand) or view.pod(operand) is not None:
        return None
    if view.labels.get(deploy_label(operand)) == PAUSED_FOR_MIG_CHANGE:
        return None
    if not ctx.policy_unknown and not enabled(ctx.policy, operand):
        return None
    ds = operand_daemonset(ctx, operand)
    name = name_of(ds) if ds is not None else ctx.ds(operand)
    operator = operator_pod(ctx) if ds is None else None
    if operator is not None and not pod_state(operator).ready:
        # Whatever the policy enables, an operator that does not run has deployed nothing.
        return _operator_down(ctx, view, operator, name, link)
    if ds is None and ctx.policy_unknown:
        return Result(
            LinkState.NOT_JUDGED,
            f"not judged: no {name} DaemonSet, and {NO_POLICY} to say whether spec.{operand.spec_key}.enabled",
        )
    where = f"DaemonSet {ctx.namespace}/{name}"
    if ds is None:
        switch = f"spec.{operand.spec_key}.enabled=true" if ctx.policy_obj is not None else ""
        action, fix, more = _restart_operator(ctx, operator)
        return Result(
            LinkState.BROKEN,
            f"no {name} DaemonSet",
            (
                _finding(
                    view,
                    "operand.not-deployed",
                    Severity.ERROR,
                    link,
                    f"{where} does not exist although the policy enables it, so the {link} link is missing on every "
                    "node: the operator is not reconciling (stopped, or failing).",
                    [f"{where} does not exist", switch, *more],
                    fix,
                    action,
                ),
            ),
        )
    block = blocker(ds, view.node)
    if block is None:
        return None
    if block.kind == "selector" and block.detail.get("key") in (*NFD_GPU_LABELS, GPU_PRESENT):
        return _nfd_missing(ctx, view, name, block, link)
    action = placement_fix(ctx, view, ds, block)
    return Result(
        LinkState.BROKEN,
        f"{name} places no pod here",
        (
            _finding(
                view,
                "operand.not-scheduled",
                Severity.ERROR,
                link,
                f"{name} is enabled but places no pod on this node ({block.describe()}), so the {link} link is "
                "missing here.",
                [f"{where} has no pod on {view.name}", block.describe()],
                ctx.stack.render(action),
                action,
            ),
        ),
    )


def _logs(ctx: Context, view: NodeView, operand: Operand, container: str, last: str) -> str:
    """The container's last lines from its status, else the log the gather step read ("" if none)."""
    pod = view.pod(operand)
    if last or pod is None:
        return last
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return ctx.log(pod, container or str(containers[0].get("name", "")))


# -- what a failing operand's own output says, and the change that answers it -------------------


@dataclass(frozen=True)
class Known:
    """A failure gpuchain recognises in an operand's log or status, with the change that fixes it."""

    cause: str
    evidence: tuple[str, ...]
    action: Fix | None
    fix: str


#: The catalog entries of the failures `known_failure` repairs (catalog.yaml): the driver container
#: when the kernel refuses its unsigned module (NVIDIA/gpu-operator#266, #1726: nvidia-installer's
#: words, the kernel's own, EPERM from its lockdown, and modprobe's where the module is loaded by
#: hand), the toolkit when the containerd socket it was given does not exist (NVIDIA/gpu-operator#406,
#: #522), and a component out of inotify instances (#441).
SECURE_BOOT = (
    "nvidia-installer.unsigned-module",
    "kernel.unsigned-module-rejected",
    "nvidia-installer.load-not-permitted",
    "glibc.key-rejected",
)
SOCKET = ("nvidia-container-toolkit.unable-to-dial", "nvidia-container-toolkit.signal-containerd")
INOTIFY = ("k8s-device-plugin.fs-watcher", "nvidia-container-toolkit.fs-watcher")
IMAGE_PULL = ("ImagePullBackOff", "ErrImagePull")


def _pull_event(view: NodeView, pod: str) -> str:
    """The kubelet's "Failed to pull image" Event for ``pod`` (containerd's NotFound, an auth error ...)."""
    return next(
        (
            str(e.get("message"))
            for e in view.events
            if (e.get("involvedObject") or {}).get("name") == pod
            and str(e.get("message", "")).startswith("Failed to pull")
        ),
        "",
    )


def known_failure(ctx: Context, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """What the operand's status or log names, and its fix (None: gpuchain does not know this failure)."""
    if state.unschedulable:
        return _unschedulable(ctx, view, operand, state)
    if state.status in IMAGE_PULL:
        return _image_missing(ctx, view, operand, state)
    oom = _oom_killed(ctx, view, operand, state)
    if oom is not None:
        return oom
    mount = _object_missing(ctx, view, operand, state)
    if mount is not None:
        return mount
    found = catalog.find(log, *SECURE_BOOT)
    if found and operand is DRIVER:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "turn Secure Boot off in the node's firmware (or enroll a key that signs the NVIDIA modules "
                "with mokutil) and reboot; the driver container loads nvidia.ko on the next start",
                "fact": "secure-boot",
            },
        )
        return Known(
            "the node boots with UEFI Secure Boot, and the kernel refuses the nvidia.ko the driver container built "
            "because no key it trusts signed it; this is the node's firmware setting, outside the cluster.",
            found.evidence(),
            action,
            ctx.stack.render(action),
        )
    found = catalog.find(log, *SOCKET)
    if found and operand is TOOLKIT:
        return _toolkit_socket(ctx, view, found)
    found = catalog.find(log, *(INOTIFY if operand is DEVICE_PLUGIN else INOTIFY[::-1]))
    if found:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "raise the node's inotify instance limit (sysctl -w fs.inotify.max_user_instances=512, and "
                "the same in /etc/sysctl.d/ so it survives a reboot; the kernel's default is 128), then "
                f"kubectl -n {ctx.namespace} delete pod {state.name}",
                "fact": "inotify",
                "drain": False,
            },
        )
        return Known(
            "the node's inotify instances are used up (fs.inotify.max_user_instances), so the container cannot watch "
            "its files and exits; a kernel setting of the node, outside the cluster.",
            found.evidence(),
            action,
            ctx.stack.render(action),
        )
    return None


#: The object the kubelet names as missing (catalog apimachinery.object-not-found).
OBJECT_NAMED = re.compile(r'\b(configmap|secret)s? "([^"]+)" not found')


def _object_missing(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known | None:
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
        ns = str((pod.get("metadata") or {}).get("namespace") or ctx.namespace)
        kind, name = named.group(1), named.group(2)
        create = (
            f"create configmap {name} --from-file=<key>=<file>"
            if kind == "configmap"
            else f"create secret generic {name} --from-literal=<key>=<value>"
        )
        return Known(
            f"the {operand.state} pod references {kind} {name}, which does not exist in its namespace {ns}, so the "
            "kubelet does not start its containers.",
            (f"kubelet: {found.line}", found.entry.cite()),
            None,
            f"kubectl -n {ns} {create}   # create {kind} {name} in {ns}, where the pod looks for it (or copy it "
            f"there: kubectl get {kind} {name} -A)",
        )
    return None


#: The memory limit an OOM-killed operand gets at least: its limit doubled, never under this (Mi).
MIN_RAISED_LIMIT_MI = 512
MEMORY = re.compile(r"(\d+)(Ki|Mi|Gi)?$")


def _mebibytes(quantity: str) -> int | None:
    found = MEMORY.match(quantity)
    if not found:
        return None
    scale = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, None: 1 / 2**20}[found.group(2)]
    return int(int(found.group(1)) * scale)


def _oom_killed(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known | None:
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
    ns = str((pod.get("metadata") or {}).get("namespace") or ctx.namespace)
    ds = _owner(pod) or ctx.ds(operand)
    spec = ((pod.get("spec") or {}).get("initContainers") or []) + ((pod.get("spec") or {}).get("containers") or [])
    container: Obj = next((c for c in spec if c.get("name") == state.container), {})
    limit = str(((container.get("resources") or {}).get("limits") or {}).get("memory") or "")
    current = _mebibytes(limit) if limit else None
    raised = f"{max(2 * current if current else 0, MIN_RAISED_LIMIT_MI)}Mi"
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
        return Known(cause, evidence, patch, ctx.stack.render(patch) + "   # raises the memory limit")
    return Known(
        cause,
        evidence,
        None,
        f"kubectl -n {ns} set resources ds/{ds} -c {state.container} --limits=memory={raised}   # raises the memory "
        "limit (in its Helm release: resources.limits.memory)",
    )


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


def _unschedulable(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known:
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
        # The toleration to add, on the object the stack's operands take their tolerations from.
        action = placement_fix(ctx, view, ds, Blocker("taint", taint))
        return Known(cause, evidence, action, ctx.stack.render(action))
    fix = "# gpuchain knows no change that makes room for this scheduler reason"
    for pattern, text in ROOM:
        found = re.search(pattern, state.message)
        if found:
            fix = text.format(*(found.groups() or ("",)))
            break
    return Known(cause, evidence, None, f"{fix} (node {view.name}, pod {state.name})")


#: The kubelet's words for the image it pulls: "Back-off pulling image %q" (pkg/kubelet/images/image_manager.go)
#: and "Failed to pull image %q: %v" (kuberuntime), kubernetes@v1.34.4.
PULLING = re.compile(r'(?:pulling|pull) image "([^"]+)"')


DRIVER_TAG = re.compile(r"(\d+(?:\.\d+)+)-([a-z][\w.]*)")


def _pulled_image(text: str) -> str:
    found = PULLING.search(text)
    return found.group(1) if found else ""


def _image_missing(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known:
    """The kubelet cannot pull the operand's image: a tag the policy overrides that the registry lacks."""
    event = _pull_event(view, state.name)
    evidence = (state.message, f"event Failed (kubelet): {event}" if event else "")
    pod = view.pod(operand) or {}
    owner = next(
        (str(r.get("name")) for r in (pod.get("metadata") or {}).get("ownerReferences") or () if r.get("kind")),
        "",
    )
    prefix = ctx.stack.precompiled_prefix
    if operand is DRIVER and prefix and owner.startswith(prefix):
        # Precompiled drivers: one DaemonSet per kernel, whose image exists only for the kernels NVIDIA built.
        ready_kernels = ", ".join(sorted(ctx.driver_kernels)) or "no kernel yet"
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"driver": {"usePrecompiled": False}}, NOT_SIMULATED: "precompiled images are not simulated"},
        )
        return Known(
            f"no precompiled driver image exists for this node's kernel {view.kernel}: the operator made "
            f"DaemonSet {owner} for it and the registry has no such tag.",
            (*evidence, f"DaemonSet {owner}: a precompiled driver per kernel"),
            action,
            ctx.stack.render(action) + "   # and set spec.driver.version to a full driver version, or move the "
            f"node to a kernel with a precompiled image (driver pods run on {ready_kernels})",
        )
    image = _pulled_image(state.message) or _pulled_image(event)
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get(operand.spec_key) or {}
    version = str(spec.get("version") or "")
    # A driver image's tag is <driver version>-<os><os version> (e.g. 550.90.07-ubuntu22.04).
    versioned = DRIVER_TAG.fullmatch(tag)
    dist = versioned.group(2) if versioned else ""
    if (
        operand is DRIVER
        and ctx.policy_obj is not None
        and dist
        and "not found" in event
        and not dist.startswith(ctx.stack.driver_image_os)
    ):
        # The operator names the image after the node's OS; no release exists for an OS NVIDIA builds none for.
        os_image = node_info(view.node).get("osImage") or dist
        # Where the driver container runs on other nodes, only this node opts out; else the whole policy.
        off = (
            Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
            if ctx.driver_kernels
            else Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": False}}})
        )
        return Known(
            f"no driver image exists for this node's OS: the operator asks for {image} and NVIDIA publishes driver "
            f"images only for {', '.join(ctx.stack.driver_image_os)}, so no driver version pulls on "
            f"{os_image}.",
            (*evidence, f"node OS {os_image}: image tag suffix {dist!r}"),
            off,
            ctx.stack.render(off) + f"   # {'this node opts out' if ctx.driver_kernels else 'driver.enabled=false'}"
            ", after installing the driver on the host (its OS "
            "packages, or the cloud's own installer: on GKE the node pool's gpu-driver-version, with "
            "hostPaths.driverInstallDir=/home/kubernetes/bin/nvidia); or run the node on an OS the operator "
            "supports (Ubuntu, RHEL)",
        )
    if ctx.policy_obj is not None and version and version in image and ("not found" in event or not event):
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {operand.spec_key: {"version": None}}})
        return Known(
            f"the kubelet cannot pull the image: spec.{operand.spec_key}.version={spec['version']} of "
            f"{ctx.policy_ref} names a tag the registry does not have.",
            evidence,
            action,
            ctx.stack.render(action) + "   # back to the operator's default version (or set one that exists)",
        )
    return Known(
        "the kubelet cannot pull the image (the registry refuses it or has no such tag).",
        evidence,
        None,
        "make the image reachable from the node: a tag that exists, the registry's pull secret in the policy's "
        "imagePullSecrets, or a mirror the node can reach",
    )


def _toolkit_socket(ctx: Context, view: NodeView, found: catalog.Match) -> Known:
    """NVIDIA's toolkit signals /run/containerd/containerd.sock; k3s and RKE2 run containerd elsewhere."""
    dist = distribution_of(view.node)
    kubelet = node_info(view.node).get("kubeletVersion", "?")
    evidence = (*found.evidence(), f"kubeletVersion {kubelet} ({dist.name})")
    if dist is not KUBEADM and ctx.policy_obj is not None:
        keep = [
            {"name": e.name, "value": e.value}
            for e in ctx.policy.toolkit.env
            if e.name not in ("CONTAINERD_CONFIG", "CONTAINERD_SOCKET", "RUNTIME_CONFIG", "RUNTIME_SOCKET")
        ]
        env = [
            *keep,
            {"name": "CONTAINERD_CONFIG", "value": dist.containerd_config},
            {"name": "CONTAINERD_SOCKET", "value": dist.containerd_socket},
        ]
        patch = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}}})
        action: Fix = patch
        fix = ctx.stack.render(patch)
    else:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "find where this node's containerd listens and reads its config (ps -o args -C containerd), "
                "then set the toolkit's CONTAINERD_SOCKET and CONTAINERD_CONFIG to them",
                "drain": False,
                NOT_SIMULATED: "the socket path of an unknown distribution is a fact of the node no scenario names",
            },
        )
        fix = ctx.stack.render(action)
    return Known(
        f"the container toolkit cannot signal containerd: it was given containerd's default socket, and this node "
        f"runs {dist.name}, whose containerd listens at {dist.containerd_socket} with its config in "
        f"{dist.containerd_config}; it exits and the nvidia runtime is never loaded.",
        evidence,
        action,
        fix,
    )


def _known_not_ready(view: NodeView, link: str, what: str, state: PodState, known: Known) -> Result:
    """The link broken by a failure the pod's log names: its cause, evidence and fix."""
    finding = _finding(
        view,
        f"{link}.not-ready",
        Severity.ERROR,
        link,
        known.cause,
        [state.describe(), *known.evidence],
        known.fix,
        known.action,
    )
    return Result(LinkState.BROKEN, f"{what} {state.status}", (finding,))


def _not_ready(
    ctx: Context, view: NodeView, operand: Operand, link: str, what: str, state: PodState, log: str, cause: str
) -> Result:
    """An operand pod failing: the known failure its log names with its fix, else its state and last error."""
    known = known_failure(ctx, view, operand, state, log)
    if known is not None:
        return _known_not_ready(view, link, what, state, known)
    found = catalog.known_error(log)
    if found is not None:
        # A message the catalog knows and no check acts on as data: its cause and repair, as the catalog says.
        known = Known(found.entry.cause, found.evidence(), None, f"# {found.entry.fix}")
        return _known_not_ready(view, link, what, state, known)
    # Nothing known: the line itself is quoted (and reported as unrecognised by evidence.unrecognised), with
    # the link's next action; the pod is run again after it.
    again = Fix(
        FixOp.DELETE, f"{ctx.namespace}/{state.name}", {"kind": "Pod", "namespace": ctx.namespace, "name": state.name}
    )
    line = catalog.unknown_error(log) or ""
    return Result(
        LinkState.BROKEN,
        f"{what} {state.status}",
        (
            _finding(
                view,
                f"{link}.not-ready",
                Severity.ERROR,
                link,
                cause + " gpuchain does not recognise the failure.",
                [state.describe(), state.message, *([f"unrecognised: {line}"] if line else [])],
                f"# {next_step(ctx, link, line)}; the pod retries by itself ({ctx.stack.render(again)} starts it "
                "at once)",
            ),
        ),
    )


# -- 1. driver ---------------------------------------------------------------------------------


#: NVIDIADriver's default node selector when ``spec.nodeSelector`` is absent: every GPU node
#: (NVIDIA/gpu-operator ``api/nvidia/v1alpha1/nvidiadriver_types.go@v25.10.1``, ``GetNodeSelector``).
NVIDIADRIVER_DEFAULT_SELECTOR = {"nvidia.com/gpu.present": "true"}


def _nvidiadriver_stopped(ctx: Context, view: NodeView) -> Result | None:
    """The NVIDIADrivers selecting this node whose reconcile stopped on an error, as the driver
    link's root: the GPU Operator then makes no driver DaemonSet for them, so no driver pod is here.

    NVIDIA's controller records the stop as ``Error=True`` with the reason and message
    (``internal/conditions/nvidiadriver.go@v25.10.1``). ``ConflictingNodeSelector`` (two NVIDIADrivers
    select the same node) has a repair: remove the newer one; any other reason is quoted."""
    stopped = []
    for driver in sorted(ctx.snapshot.drivers, key=lambda d: (created_of(d), name_of(d))):
        selector = (driver.get("spec") or {}).get("nodeSelector")
        selector = NVIDIADRIVER_DEFAULT_SELECTOR if selector is None else selector
        if any(view.labels.get(k) != v for k, v in selector.items()):
            continue
        conditions = (driver.get("status") or {}).get("conditions") or []
        error = next((c for c in conditions if c.get("type") == "Error" and c.get("status") == "True"), None)
        if error is not None:
            stopped.append((driver, selector, error))
    if not stopped:
        return None
    evidence = [
        f"NVIDIADriver {name_of(d)} (nodeSelector {sel or 'empty: every node'}): Error=True "
        f"{e.get('reason', '')}: {e.get('message', '')}"
        for d, sel, e in stopped
    ]
    conflicting = [d for d, _, e in stopped if e.get("reason") == "ConflictingNodeSelector"]
    if len(conflicting) > 1:
        names = [name_of(d) for d in conflicting]
        newest = names[-1]
        remove = Fix(
            FixOp.DELETE,
            newest,
            {
                "kind": "NVIDIADriver",
                "name": newest,
                "namespace": "",
                NOT_SIMULATED: "the GPU Operator's reconcile of the NVIDIADriver left is not simulated",
            },
        )
        return Result(
            LinkState.BROKEN,
            f"NVIDIADrivers {', '.join(names)} all select this node",
            (
                _finding(
                    view,
                    "driver.nvidiadriver-conflict",
                    Severity.ERROR,
                    "driver",
                    f"NVIDIADrivers {' and '.join(names)} both select this node, so the GPU Operator deploys the "
                    "driver for none of them (reason ConflictingNodeSelector) and nothing above the driver starts.",
                    evidence,
                    ctx.stack.render(remove) + "   # the newer one; or give each NVIDIADriver a spec.nodeSelector "
                    "that no other one's nodes match",
                    remove,
                ),
            ),
        )
    driver, _, error = stopped[0]
    return Result(
        LinkState.BROKEN,
        f"NVIDIADriver {name_of(driver)}: {error.get('reason', 'Error')}",
        (
            _finding(
                view,
                "driver.nvidiadriver-error",
                Severity.ERROR,
                "driver",
                f"the GPU Operator stopped reconciling NVIDIADriver {name_of(driver)} on an error, so it deploys no "
                "driver on this node; the condition's message names what it could not do.",
                evidence,
                f"kubectl edit nvidiadriver {name_of(driver)}   # change the spec field the Error condition's "
                "message names; the operator reconciles again on the edit",
            ),
        ),
    )


def check_driver(ctx: Context, view: NodeView) -> Result:
    """Driver: the driver pod (or a pre-installed host driver, seen through the validator and GFD)."""
    pod = view.pod(DRIVER)
    validator = view.pod(VALIDATOR)
    version = view.labels.get(DRIVER_VERSION)
    if pod is None:
        label = opted_out(view, DRIVER)
        if view.labels.get(OPERANDS_LABEL) == "false":
            return Result(LinkState.SKIPPED, f"opted out ({OPERANDS_LABEL}=false)")
        stopped = _nvidiadriver_stopped(ctx, view)
        if stopped is not None:
            return stopped
        # The policy wants the driver container here but its DaemonSet places no pod: say why,
        # rather than calling it "driver container off".
        missing = unscheduled(ctx, view, DRIVER, "driver")
        if (
            missing is not None
            and missing.state is LinkState.NOT_JUDGED
            and (init_done(validator, "driver-validation") or version)
        ):
            # Whatever the unknown policy says of the driver container, a driver answers here.
            return Result(
                LinkState.OK, f"host driver{f' {version}' if version else ''} (no driver DaemonSet; {NO_POLICY})"
            )
        if missing is not None:
            return missing
        why = (
            f"label {label}"
            if label
            else f"{ctx.stack.title}: the node image's driver"
            if ctx.stack.host_driver
            else f"spec.driver.enabled=false in ClusterPolicy {ctx.policy_name}"
        )
        if init_done(validator, "driver-validation") or version:
            return Result(LinkState.OK, f"host driver {version or ''} (driver container off: {why})".replace("  ", " "))
        if validator is None:
            return Result(LinkState.OK, f"driver container off ({why}); host driver assumed")
        state = pod_state(validator)
        enable = (
            Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): None})
            if label
            else Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": True}}})
        )
        return Result(
            LinkState.BROKEN,
            "no driver: container off and no host driver answers",
            (
                _finding(
                    view,
                    "driver.missing",
                    Severity.ERROR,
                    "driver",
                    f"the driver container is off on this node ({why}) and no pre-installed driver answers nvidia-smi.",
                    [f"driver container off: {why}", f"validator {state.describe()} (driver-validation not done)"],
                    ctx.stack.render(enable) + "   # let the operator install the driver",
                    enable,
                ),
            ),
        )
    state = pod_state(pod)
    if state.ready:
        return Result(LinkState.OK, f"driver pod Running{f', {version}' if version else ''}")
    restarting = _driver_upgrade_restart(ctx, view, state)
    if restarting is not None:
        return restarting
    log = _logs(ctx, view, DRIVER, state.container, state.last_log)
    kernel_line = catalog.find(log, "driver-container.kernel-unresolved")
    conflict_line = catalog.find(log, "driver-container.unload-in-use", "driver-container.already-running")
    evidence = [state.describe(), f"node kernel {view.kernel} (status.nodeInfo.kernelVersion)"]
    others = sorted(ctx.driver_kernels - {view.kernel})
    holders = [name_of(p) for p in view.workloads if pod_gpu_requests(p)]
    if conflict_line and conflict_line.entry.id == "driver-container.unload-in-use" and holders:
        drain = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "the drain takes the GPU pods off, the driver container then unloads the module and starts; "
                f"for the next upgrade set spec.driver.upgradePolicy.drain.enable=true in {ctx.policy_ref} (or the "
                "driver manager's ENABLE_GPU_POD_EVICTION) so it evicts them itself",
                "drain": True,
                NOT_SIMULATED: "a module held by running pods is not simulated",
            },
        )
        return Result(
            LinkState.BROKEN,
            "driver cannot unload: GPU pods hold it",
            (
                _finding(
                    view,
                    "driver.in-use",
                    Severity.ERROR,
                    "driver",
                    "the driver container must unload the loaded NVIDIA module to (re)install, and GPU pods on this "
                    "node still hold it, so it cannot; nothing above the driver starts until they are gone.",
                    [state.describe(), *conflict_line.evidence(), f"GPU pods on {view.name}: {', '.join(holders[:5])}"],
                    ctx.stack.render(drain),
                    drain,
                ),
            ),
        )
    if conflict_line:
        off_here = Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
        return Result(
            LinkState.BROKEN,
            "driver container fights a pre-installed host driver",
            (
                _finding(
                    view,
                    "driver.host-driver-conflict",
                    Severity.ERROR,
                    "driver",
                    "the operator's driver container was started on a node whose host already has an NVIDIA "
                    "driver loaded, and it cannot unload it.",
                    [state.describe(), *conflict_line.evidence()],
                    ctx.stack.render(off_here)
                    + f"   # or for the whole cluster: kubectl patch {ctx.policy_ref} --type merge "
                    '-p \'{"spec":{"driver":{"enabled":false}}}\'',
                    off_here,
                ),
            ),
        )
    if (
        state.failing
        and state.status not in IMAGE_PULL
        and (kernel_line or (others and view.kernel not in ctx.driver_kernels))
    ):
        if others:
            evidence.append(f"driver pods run ready on kernel {', '.join(others)}")
        if kernel_line:
            evidence += kernel_line.evidence()
        good = others[0] if others else "a kernel the driver image supports"
        reimage = Fix(
            FixOp.NODE,
            view.name,
            {"action": f"reimage it with kernel {good}", "fact": f"kernel:{good}" if others else ""},
        )
        return Result(
            LinkState.BROKEN,
            f"no driver build for kernel {view.kernel}",
            (
                _finding(
                    view,
                    "driver.kernel-mismatch",
                    Severity.ERROR,
                    "driver",
                    f"the node runs kernel {view.kernel} and the driver image {ctx.policy.driver.image_ref()} has no "
                    "build for it, so nvidia.ko never loads and nothing above the driver can start.",
                    evidence,
                    ctx.stack.render(reimage) + f"   # or set spec.driver.version of {ctx.policy_ref} to a release "
                    f"built for {view.kernel}",
                    reimage,
                ),
            ),
        )
    stale = _stale_os_label(ctx, view, pod) or _upgrade_done_yet_failing(ctx, view, state, holders)
    if stale is not None:
        return _known_not_ready(view, "driver", "driver pod", state, stale)
    return _not_ready(
        ctx,
        view,
        DRIVER,
        "driver",
        "driver pod",
        state,
        log,
        f"the driver pod is {state.status}, so the kernel module is not loaded.",
    )


#: NFD's label of the RHCOS build a node runs, which the GPU Operator names and selects its per-OS driver
#: DaemonSets by on OpenShift (NVIDIA/gpu-operator controllers/object_controls.go@v25.3.0,
#: nfdOSTreeVersionLabelKey), and the build as RHCOS writes it in the node's osImage.
OSTREE_VERSION = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
RHCOS_BUILD = re.compile(r"\b(\d+\.\d+\.\d{8,12}-\d+)\b")
#: The driver upgrade controller's node states (NVIDIA/k8s-operator-libs pkg/upgrade/consts.go:
#: "UpgradeStateDone is set when driver pod is up to date and running on the node", UpgradeStateUpgradeRequired).
UPGRADE_DONE, UPGRADE_REQUIRED = "upgrade-done", "upgrade-required"
DRIVER_MANAGER = "k8s-driver-manager"


def _stale_os_label(ctx: Context, view: NodeView, pod: Obj) -> Known | None:
    """The node runs another RHCOS build than NFD's OSTREE_VERSION label says, so the operator keeps the
    driver DaemonSet (and driver toolkit image) of the old build on it: NFD must label the node again."""
    labelled = view.labels.get(OSTREE_VERSION)
    running = RHCOS_BUILD.search(str(node_info(view.node).get("osImage", "")))
    if not labelled or running is None or running.group(1) == labelled:
        return None
    worker = next(
        (
            p
            for p in ctx.snapshot.pods
            if (p.get("spec") or {}).get("nodeName") == view.name
            and any(_nfd_worker(d) and name_of(d) == _owner(p) for d in ctx.snapshot.daemonsets)
        ),
        None,
    )
    relabel: Fix | None = None
    if worker is not None:
        ns = str((worker.get("metadata") or {}).get("namespace") or "")
        relabel = Fix(
            FixOp.DELETE, f"{ns}/{name_of(worker)}", {"kind": "Pod", "namespace": ns, "name": name_of(worker)}
        )
        fix = ctx.stack.render(relabel) + "   # the nfd-worker on the node starts again and relabels OSTREE_VERSION"
    else:
        fix = (
            f"restart the Node Feature Discovery worker on {view.name} (node-feature-discovery) so it labels "
            f"{OSTREE_VERSION}={running.group(1)}"
        )
    return Known(
        f"the node runs RHCOS {running.group(1)} but NFD's label {OSTREE_VERSION} still says {labelled}, so the "
        f"operator runs the driver DaemonSet built for {labelled} here ({_owner(pod)}), whose driver does not fit "
        "the running kernel; the label, not the driver, is wrong.",
        (f"osImage {node_info(view.node).get('osImage')}", f"label {OSTREE_VERSION}={labelled}"),
        relabel,
        fix,
    )


def _driver_upgrade_restart(ctx: Context, view: NodeView, state: PodState) -> Result | None:
    """A driver pod that is not ready because the upgrade controller is restarting it: the node's
    ``nvidia.com/gpu-driver-upgrade-state`` says the old pod was deleted on purpose (pod-restart-required)
    or the new one is being validated (validation-required), and the pod is on its way, not failing.
    That is the upgrade at work, information; the links above wait for it. A pod that fails, or a node
    the controller marks upgrade-failed, is judged as any other."""
    upgrading = view.labels.get(UPGRADE_STATE, "")
    if upgrading not in (POD_RESTART, VALIDATION) or state.failing:
        return None
    finding = _finding(
        view,
        "driver.upgrading",
        Severity.INFO,
        "driver",
        f"the driver upgrade is restarting this node's driver ({UPGRADE_STATE}={upgrading}); GPU work on the node "
        "resumes once the new driver validates and the controller uncordons it.",
        [f"label {UPGRADE_STATE}={upgrading}", state.describe()],
        f"# nothing to do: the upgrade goes on by itself (kubectl get nodes -L {UPGRADE_STATE}); if the node "
        "stays in this state past spec.driver.upgradePolicy.podDeletion.timeoutSeconds, the controller marks it "
        "upgrade-failed and the doctor judges the driver pod then",
    )
    return Result(LinkState.BROKEN, f"driver upgrade in progress ({upgrading})", (finding,))


def _upgrade_done_yet_failing(ctx: Context, view: NodeView, state: PodState, holders: list[str]) -> Known | None:
    """The driver manager fails on a node the upgrade controller marks upgrade-done while GPU pods hold the
    driver: the controller evicts them only from upgrade-required, so nothing frees the node."""
    if view.labels.get(UPGRADE_STATE) != UPGRADE_DONE or state.container != DRIVER_MANAGER or not holders:
        return None
    again = Fix(FixOp.LABEL_NODE, view.name, {UPGRADE_STATE: UPGRADE_REQUIRED})
    return Known(
        f"the driver manager fails on this node while GPU pods hold the driver, and the upgrade controller marks "
        f"the node {UPGRADE_DONE}, so it never evicts them (it drains only from {UPGRADE_REQUIRED}).",
        (f"label {UPGRADE_STATE}={UPGRADE_DONE}", f"GPU pods on {view.name}: {', '.join(holders[:5])}"),
        again,
        ctx.stack.render(again) + "   # the upgrade controller then evicts the GPU pods and the driver installs",
    )


# -- 2. toolkit --------------------------------------------------------------------------------


def _runtime_evidence(view: NodeView) -> tuple[list[str], catalog.Entry | None]:
    """Events and pods that show the runtime has no nvidia handler, and the runtime's message that says so."""
    lines = []
    said = None
    for ev in view.events:
        found = catalog.find(str(ev.get("message", "")), *NO_RUNTIME)
        if found:
            said = found
            ref = ev.get("involvedObject") or {}
            lines.append(f"event {ev.get('reason')} on pod {ref.get('name')}: {ev.get('message')}")
    if said is not None:
        return [*lines[:3], said.entry.cite()], said.entry
    for pod in view.operand_pods.values():
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        creating = any(
            ((c.get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating" for c in statuses
        )
        if creating and (pod.get("spec") or {}).get("runtimeClassName"):
            lines.append(f"pod {pod['metadata']['name']} (runtimeClassName nvidia) stuck in ContainerCreating")
    return lines[:3], None


def check_toolkit(ctx: Context, view: NodeView) -> Result:
    """Toolkit: the RuntimeClass, the toolkit pod, and whether pods of that RuntimeClass get a sandbox."""
    rc = ctx.policy.operator.runtime_class
    uses_rc = "runtimeclasses" not in ctx.snapshot.absent and any(
        (p.get("spec") or {}).get("runtimeClassName") == rc for p in view.operand_pods.values()
    )
    if uses_rc and rc not in ctx.runtime_classes:
        evidence = [f"runtimeclasses: {', '.join(sorted(ctx.runtime_classes)) or 'none'}"]
        action: Fix | None
        if ctx.stack.policy_resource:
            # The operator creates the RuntimeClass: restart it (it reconciles on start), never a copy by hand.
            action, fix, more = _restart_operator(ctx, operator_pod(ctx))
            evidence += more
        else:
            action = Fix(
                FixOp.CREATE,
                "",
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": rc},
                    "handler": RUNTIME_CLASS_HANDLER,
                },
            )
            fix = ctx.stack.render(action) + "   # the chart names it and no operator makes it"
        return Result(
            LinkState.BROKEN,
            f"RuntimeClass {rc} missing",
            (
                _finding(
                    view,
                    "toolkit.runtime-class-missing",
                    Severity.ERROR,
                    "toolkit",
                    f"operand pods ask for RuntimeClass {rc!r}, which does not exist, so none of them can start.",
                    evidence,
                    fix,
                    action,
                ),
            ),
        )
    pod = view.pod(TOOLKIT)
    runtime, said_by = _runtime_evidence(view)
    if runtime:
        tk = pod_state(pod) if pod is not None else None
        log = _logs(ctx, view, TOOLKIT, tk.container if tk else "", "") if pod is not None else ""
        said = catalog.known_error(log)
        dist = distribution_of(view.node)
        rewrite = (
            f"kubectl -n {ctx.namespace} delete pod {tk.name} so the toolkit writes the nvidia runtime there"
            if tk
            else "nvidia-ctk runtime configure --runtime=containerd --config=" + dist.containerd_config
        )
        work = (
            f"set the toolkit's CONTAINERD_CONFIG={dist.containerd_config} and CONTAINERD_SOCKET="
            f"{dist.containerd_socket} (where {dist.name}'s containerd reads its config and listens), "
            f"{rewrite}, then systemctl restart containerd"
        )
        if said_by is not None and said_by.component == "CRI-O":
            work = said_by.fix
        restart = Fix(FixOp.NODE, view.name, {"action": work, "fact": "runtime"})
        return Result(
            LinkState.BROKEN,
            "containerd has no nvidia runtime",
            (
                _finding(
                    view,
                    "toolkit.runtime-not-configured",
                    Severity.ERROR,
                    "toolkit",
                    f"{said_by.component if said_by else 'containerd'} on this node has no 'nvidia' runtime "
                    "handler, so every pod with runtimeClassName "
                    f"{rc} fails to get a sandbox (device plugin, GFD, exporter, validator).",
                    [
                        *runtime,
                        tk.describe() if tk else "no toolkit pod on this node",
                        *(said.evidence("toolkit log") if said else ()),
                    ],
                    ctx.stack.render(restart),
                    restart,
                ),
            ),
        )
    if pod is None:
        missing = unscheduled(ctx, view, TOOLKIT, "toolkit")
        if missing is not None:
            return missing
        # The node's own runtime: assumed until the plugin above says it got no NVML through it.
        no_nvml = plugin_without_nvml(ctx, view)
        if no_nvml is not None:
            return _no_nvml(ctx, view, no_nvml)
        return Result(LinkState.SKIPPED, "toolkit not managed here (pre-configured runtime assumed)")
    state = pod_state(pod)
    if state.ready:
        done = init_done(view.pod(VALIDATOR), "toolkit-validation")
        return Result(LinkState.OK, "toolkit pod Running" + (", toolkit-ready validated" if done else ""))
    log = _logs(ctx, view, TOOLKIT, state.container, state.last_log)
    return _not_ready(
        ctx,
        view,
        TOOLKIT,
        "toolkit",
        "toolkit pod",
        state,
        log,
        f"the container toolkit pod is {state.status}, so containers cannot be given GPUs.",
    )


# -- 3. device plugin --------------------------------------------------------------------------


#: What NVIDIA's config-manager and gpuchain's plugin write when the config key does not exist (catalog.yaml).
CONFIG_MISSING = (
    "k8s-device-plugin.config-does-not-exist",
    "gpuchain-device-plugin.config-key-missing",
    "k8s-device-plugin.unable-to-load-config",
)


def _config_missing(ctx: Context, view: NodeView) -> Finding | None:
    if "configmaps" in ctx.snapshot.absent or ctx.policy_unknown:
        return None  # a dump without the stack's ConfigMaps or the policy naming one: nothing to compare
    labelled = view.labels.get(DEVICE_PLUGIN_CONFIG)
    key = labelled or ctx.policy.device_plugin.config.default
    if not key:
        return None
    configs = ctx.plugin_configs()
    if (configs is not None and key in configs) or (not labelled and configs is None):
        return None
    cm = ctx.policy.device_plugin.config.name
    keys = ", ".join(sorted(configs or {})) or "none"
    pod = view.pod(DEVICE_PLUGIN)
    state = pod_state(pod) if pod is not None else None
    log = _logs(ctx, view, DEVICE_PLUGIN, state.container, state.last_log) if state else ""
    said = catalog.find(log, *CONFIG_MISSING)
    if configs is None and state is not None and state.ready and said is None:
        # No ClusterPolicy names the plugin's ConfigMap (a standalone plugin's chart mounts its own), so
        # the doctor cannot see the configs; a missing key stops the plugin (its config-manager fails),
        # and this one runs and says nothing of it: the label names a config the plugin has.
        return None
    where = (
        f"ConfigMap {ctx.namespace}/{cm} (keys: {keys})"
        if cm
        else "no ConfigMap (spec.devicePlugin.config.name is empty)"
    )
    default = ctx.policy.device_plugin.config.default
    if labelled:
        source = f"the node label {DEVICE_PLUGIN_CONFIG}={key}"
        usable = default if default and configs and default in configs else None
        action = Fix(FixOp.LABEL_NODE, view.name, {DEVICE_PLUGIN_CONFIG: usable})
    else:
        source = f"spec.devicePlugin.config.default={key} of ClusterPolicy {ctx.policy_name}"
        existing = sorted(configs or {})[:1]
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"devicePlugin": {"config": {"default": existing[0] if existing else ""}}}},
        )
    fix = ctx.stack.render(action)
    return _finding(
        view,
        "device-plugin.config-missing",
        Severity.ERROR,
        "device-plugin",
        f"{source} names a config that {where} does not have, so the device plugin refuses to start.",
        [source, where, state.describe() if state else "", *(said.evidence() if said else ())],
        fix,
        action,
    )


def _lost(ctx: Context, view: NodeView, res: str, cap: int, alloc: int, physical: int | None) -> Finding:
    """A GPU fell off the bus (or went unhealthy): the numbers, the published fault, the pods bound to it."""
    health = node_view(view.node)
    condition = health.condition
    bound = sorted(
        {
            "/".join(ref.split("/")[:2])
            for f in health.faults.values()
            for u in f.covers
            for ref in health.pods.get(u, ())
        }
    )
    gpu_pods = [p for p in view.workloads if pod_gpu_requests(p)]
    hung = sorted(
        f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in gpu_pods if not pod_state(p).ready
    )
    holders = sorted(f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in gpu_pods)
    events = [str(e.get("message")) for e in view.events if e.get("involvedObject", {}).get("kind") == "Node"]
    victims = bound or hung
    evidence = [
        f"{res}: allocatable {alloc}, capacity {cap}" + (f", {physical} GPUs on the node" if physical else ""),
        f"condition {CONDITION_TYPE}={condition.status} ({condition.reason}): {condition.message}"
        if condition is not None and not condition.healthy
        else "",
        *(f"event: {m}" for m in events[:2]),
        f"pods bound to the failed GPU ({PODS_ANNOTATION}): {', '.join(bound)}" if bound else "",
        f"GPU pods not ready (likely on the lost GPU): {', '.join(hung)}" if hung and not bound else "",
        f"GPU pods on the node: {', '.join(holders[:8])}" if holders and not victims else "",
    ]
    plugin = view.pod(DEVICE_PLUGIN)
    plugin_log = ctx.log(plugin, ctx.container(DEVICE_PLUGIN)) if plugin is not None else ""
    # NVIDIA's plugin and gpuchain's log the XID and the GPU it hit (internal/rm/health.go).
    xid = catalog.entry("k8s-device-plugin.xid-critical")
    hits = [ln.strip() for ln in plugin_log.splitlines() if xid.regex.search(ln)]
    evidence += [*(f"device plugin log: {ln}" for ln in hits[:3]), *([xid.cite()] if hits else [])]
    evidence += loop_evidence(view.node)  # where gpuchain's repair loop stands with each GPU
    targets = " ".join(f"-n {v.split('/')[0]} {v.split('/')[1]}" for v in victims[:3])
    # Only pods it can name go in the command; the rest of the work is said as a comment, so the line pastes.
    evict = f"kubectl cordon {view.name}" + (
        f" && kubectl delete pod {targets}   # then: " if targets else "   # then delete the pods on the lost GPU; "
    )
    action = Fix(
        FixOp.HARDWARE,
        view.name,
        {
            "action": "reset the GPU (nvidia-smi -r) or reboot the node; replace the GPU if it falls off again",
            "fact": "replace-gpu",
        },
    )
    return _finding(
        view,
        "gpu.lost",
        Severity.ERROR,
        "device-plugin",
        f"{max(cap - alloc, len(health.faults))} of {cap} {res} devices are unhealthy (a GPU fell off the bus or "
        "failed); the device plugin stopped handing them out, but pods already bound to them keep running on a "
        "dead GPU until they are evicted.",
        evidence,
        evict + ctx.stack.render(action).removeprefix("# "),
        action,
    )


def _count_findings(
    ctx: Context, view: NodeView, capacity: dict[str, int], allocatable: dict[str, int]
) -> list[Finding]:
    findings: list[Finding] = []
    physical = int(view.labels[GPU_COUNT]) if view.labels.get(GPU_COUNT, "").isdigit() else None
    health = node_view(view.node)
    reported = health.unhealthy and bool(health.faults)
    short = [
        (res, cap, allocatable.get(res, cap))
        for res, cap in sorted(capacity.items())
        if allocatable.get(res, cap) < cap
    ]
    if reported and not short:
        res = min(capacity)
        short = [(res, capacity[res], allocatable.get(res, capacity[res]))]
    findings += [_lost(ctx, view, res, cap, alloc, physical) for res, cap, alloc in short]
    if physical is None:
        return findings
    gpu_cap = capacity.get("nvidia.com/gpu", 0) + capacity.get("nvidia.com/gpu.shared", 0)
    mig_total = sum(v for k, v in capacity.items() if k.startswith("nvidia.com/mig-"))
    product = view.labels.get("nvidia.com/gpu.product", "")
    if gpu_cap > physical and "-MIG-" not in product:
        key = view.labels.get(DEVICE_PLUGIN_CONFIG) or ctx.policy.device_plugin.config.default or "default"
        configs = ctx.plugin_configs() or {}
        replicas = replicas_in(configs.get(key, "")) or (gpu_cap // physical if physical else None)
        source = (
            f"key {key!r} of the device plugin's ConfigMap ({NO_POLICY} to name it)"
            if ctx.policy_unknown
            else f"ConfigMap {ctx.namespace}/{ctx.policy.device_plugin.config.name} key {key!r}"
        )
        # Only a label the node carries can be removed; a shared default is changed in the policy.
        if view.labels.get(DEVICE_PLUGIN_CONFIG):
            drop = Fix(FixOp.LABEL_NODE, view.name, {DEVICE_PLUGIN_CONFIG: None})
            unshare: Fix | None = drop
            unshare_text = ctx.stack.render(drop) + "   # if the sharing is not intended"
        else:
            unshare = None
            unshare_text = (
                f"remove sharing.timeSlicing from key {key!r} of ConfigMap {ctx.namespace}/"
                f"{ctx.policy.device_plugin.config.name} (kubectl -n {ctx.namespace} edit configmap "
                f"{ctx.policy.device_plugin.config.name}) if the sharing is not intended"
            )
        findings.append(
            _finding(
                view,
                "device-plugin.time-slicing",
                Severity.WARNING,
                "device-plugin",
                f"capacity shows {gpu_cap} nvidia.com/gpu on {physical} physical GPUs because the device plugin config "
                f"in use shares each GPU {replicas} ways by time-slicing (no memory isolation); fine for small "
                "inference, wrong for training, and easy to leave behind by accident.",
                [
                    f"capacity nvidia.com/gpu {gpu_cap}, {GPU_COUNT}={physical}",
                    f"nvidia.com/gpu.replicas={view.labels.get('nvidia.com/gpu.replicas', '?')}, "
                    f"nvidia.com/gpu.sharing-strategy={view.labels.get('nvidia.com/gpu.sharing-strategy', '?')}",
                    f"config source: {source}"
                    + (f" (node label {DEVICE_PLUGIN_CONFIG})" if view.labels.get(DEVICE_PLUGIN_CONFIG) else ""),
                ],
                unshare_text,
                unshare,
            )
        )
    mig_gpu_single = gpu_cap > physical and "-MIG-" in product
    if mig_total > physical or mig_gpu_single:
        total = mig_total or gpu_cap
        layout = view.labels.get(MIG_CONFIG, "?")
        names = ", ".join(f"{k}={v}" for k, v in sorted(capacity.items()))
        findings.append(
            _finding(
                view,
                "device-plugin.mig-resources",
                Severity.INFO,
                "device-plugin",
                f"capacity shows {total} GPU devices on {physical} physical GPUs because MIG is on (layout {layout}): "
                "each GPU is cut into isolated slices, so this count is expected, not a fault.",
                [f"capacity {names}", f"{GPU_COUNT}={physical}", f"{MIG_CONFIG}={layout}"],
                f"kubectl label node {view.name} {MIG_CONFIG}=all-disabled --overwrite"
                "   # only if whole GPUs are wanted",
            )
        )
    return findings


def gpus_present(view: NodeView) -> str:
    """What says this node has GPUs, whatever its capacity shows (GFD, NFD, cloud labels)."""
    labels = view.labels
    for key in (GPU_COUNT, "karpenter.k8s.aws/instance-gpu-count", "cloud.google.com/gke-accelerator-count"):
        if labels.get(key, "0") not in ("", "0"):
            return f"{key}={labels[key]}"
    for key in (*NFD_GPU_LABELS, GPU_PRESENT, "cloud.google.com/gke-accelerator", "kubernetes.azure.com/accelerator"):
        if labels.get(key):
            return f"{key}={labels[key]}"
    instance = labels.get("node.kubernetes.io/instance-type")
    return f"instance type {instance}" if instance else ""


def _mig_invalid(ctx: Context, view: NodeView, evidence: list[str]) -> Result:
    product = view.labels.get(PRODUCT, "")
    if ctx.policy_obj is not None:
        patch = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"mig": {"strategy": "mixed"}}})
        action: Fix | None = patch
        fix = ctx.stack.render(patch) + f"   # or give every GPU one profile: {MIG_CONFIG}=all-1g.10gb"
    else:
        action = None
        fix = (
            f"kubectl -n {ctx.namespace} set env ds/{ctx.ds(DEVICE_PLUGIN)} MIG_STRATEGY=mixed   "
            "# or give every GPU the same MIG profile"
        )
    return Result(
        LinkState.BROKEN,
        "MIG layout does not fit mig.strategy=single",
        (
            _finding(
                view,
                "mig.invalid-for-strategy",
                Severity.ERROR,
                "device-plugin",
                "mig.strategy is single but this node's GPUs do not all carry one and the same MIG profile, so the "
                "device plugin refuses the layout and announces nothing, and feature discovery labels the product "
                "-MIG-INVALID.",
                [
                    f"{PRODUCT}={product}" if product else "",
                    f"{MIG_CONFIG}={view.labels.get(MIG_CONFIG, '?')}",
                    *evidence,
                ],
                fix,
                action,
            ),
        ),
    )


def _no_nvml(ctx: Context, view: NodeView, evidence: list[str]) -> Result:
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": "make nvidia containerd's default runtime (nvidia-ctk runtime configure --runtime=containerd "
            "--set-as-default && systemctl restart containerd)",
            "fact": "runtime",
        },
    )
    return Result(
        LinkState.BROKEN,
        "containerd's default runtime is not nvidia",
        (
            _finding(
                view,
                "toolkit.runtime-not-default",
                Severity.ERROR,
                "toolkit",
                "the device plugin runs without the NVIDIA container runtime (containerd's default runtime is not "
                "nvidia and the plugin asks for no RuntimeClass), so libnvidia-ml is not in its container, it finds "
                "no GPU and announces nothing to the kubelet: the runtime link, under the plugin.",
                evidence,
                ctx.stack.render(action),
                action,
            ),
        ),
    )


#: The device plugin's words when its container has no NVML (catalog.yaml), and its idle line after.
NO_NVML = ("go-nvlib.nvml-not-loaded", "k8s-device-plugin.nvml-init-failed", "k8s-device-plugin.nvml-resource-managers")
NO_DEVICES = "k8s-device-plugin.no-devices"


def _nvml_evidence(state: PodState, nvml: catalog.Match, log: str) -> list[str]:
    more = catalog.find(log, NO_DEVICES)
    return [state.describe(), *nvml.evidence(), *(more.evidence() if more else ())]


def plugin_without_nvml(ctx: Context, view: NodeView) -> list[str] | None:
    """The evidence that the device plugin runs without the NVIDIA runtime on this node (its log says
    NVML cannot be loaded and the node announces no GPU), None otherwise."""
    pod = view.pod(DEVICE_PLUGIN)
    if pod is None or any(v > 0 for v in node_gpu_resources(view.node).values()):
        return None
    state = pod_state(pod)
    log = _logs(ctx, view, DEVICE_PLUGIN, state.container, state.last_log)
    nvml = catalog.find(log, *NO_NVML)
    return _nvml_evidence(state, nvml, log) if nvml else None


def check_device_plugin(ctx: Context, view: NodeView) -> Result:
    """Device plugin: config label, pod state, registration (node capacity) and the numbers."""
    missing = _config_missing(ctx, view)
    if missing is not None:
        return Result(LinkState.BROKEN, "config label names a missing config", (missing,))
    pod = view.pod(DEVICE_PLUGIN)
    capacity, allocatable = node_gpu_resources(view.node), node_gpu_resources(view.node, "allocatable")
    announced = {k: v for k, v in capacity.items() if v > 0}
    invalid_product = view.labels.get(PRODUCT, "").endswith("-MIG-INVALID")
    state = pod_state(pod) if pod is not None else None
    log = _logs(ctx, view, DEVICE_PLUGIN, state.container, state.last_log) if state else ""
    nvml = catalog.find(log, *NO_NVML)
    mig_line = catalog.find(log, "k8s-device-plugin.invalid-mig-configuration")
    if pod is None:
        if view.labels.get(deploy_label(DEVICE_PLUGIN)) == PAUSED_FOR_MIG_CHANGE:
            mig = _mig_finding(ctx, view)
            return Result(LinkState.BROKEN, "paused for a MIG change", (mig,) if mig else ())
        if opted_out(view, DEVICE_PLUGIN) or not enabled(ctx.policy, DEVICE_PLUGIN):
            return Result(LinkState.SKIPPED, "device plugin not deployed here")
        absent = unscheduled(ctx, view, DEVICE_PLUGIN, "device-plugin") if not announced else None
        if absent is not None:
            return absent
    elif state is not None and (mig_line or (invalid_product and not announced)):
        return _mig_invalid(ctx, view, [state.describe(), *(mig_line.evidence() if mig_line else ())])
    elif state is not None and nvml and not announced:
        return _no_nvml(ctx, view, _nvml_evidence(state, nvml, log))
    elif state is not None and not state.ready:
        return _not_ready(
            ctx,
            view,
            DEVICE_PLUGIN,
            "device-plugin",
            "device plugin pod",
            state,
            log,
            f"the device plugin pod is {state.status}, so the kubelet gets no GPU devices.",
        )
    if not announced and allocator_of(view.node) == DRA:  # kube.allocator: none by design
        return Result(LinkState.OK, f"the node's GPUs are the DRA driver's ({ALLOCATOR_LABEL}={DRA})")
    if not announced:
        registered = catalog.find(log, "k8s-device-plugin.registered")
        problem = catalog.known_error(log) or catalog.find(log, NO_DEVICES)
        odd = catalog.unknown_error(log)
        log_evidence = (
            list(problem.evidence())
            if problem
            else [f"unrecognised: {odd}"]
            if odd
            else [f"log: {registered.line} (but the kubelet did not keep it)", registered.entry.cite()]
            if registered
            else ["log has no 'Registered device plugin' line"]
            if log
            else []
        )
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(capacity.items())) or "no nvidia.com/* resource"
        # The plugin runs but the kubelet does not hold its registration (NVIDIA/k8s-device-plugin#1228):
        # a new pod registers anew, as the plugin does on its own when kubelet.sock is created again.
        restart = (
            Fix(
                FixOp.DELETE,
                f"{ctx.namespace}/{state.name}",
                {"kind": "Pod", "namespace": ctx.namespace, "name": state.name, "fact": "registration"},
            )
            if state is not None
            else None
        )
        present = gpus_present(view)
        cause = (
            "the node has GPUs but its capacity announces none: the device plugin is not registered with "
            "the kubelet (or registered with no devices), so no pod can be given one; this is not "
            "'all GPUs in use'."
        )
        if registered and not problem:
            cause = (
                "the node has GPUs and the running device plugin logged its registration, but the kubelet no longer "
                "holds it (capacity reads none or 0, as after a kubelet restart the plugin missed; "
                "NVIDIA/k8s-device-plugin#1228), so no pod can be given a GPU; this is not 'all GPUs in use'."
            )
        return Result(
            LinkState.BROKEN,
            "no GPU announced in node capacity",
            (
                _finding(
                    view,
                    "device-plugin.not-registered",
                    Severity.ERROR,
                    "device-plugin",
                    cause,
                    [
                        f"node {view.name} capacity: {shown}",
                        f"GPUs present: {present}" if present else "",
                        state.describe() if state else "",
                        *log_evidence,
                    ],
                    ctx.stack.render(restart) + "   # its DaemonSet starts it again and it registers anew"
                    if restart
                    else f"kubectl -n {ctx.namespace} rollout restart ds/{ctx.ds(DEVICE_PLUGIN)}",
                    restart,
                ),
            ),
        )
    findings = _count_findings(ctx, view, capacity, allocatable)
    summary = ", ".join(
        f"{k.removeprefix('nvidia.com/')} {allocatable.get(k, v)}/{v}" for k, v in sorted(capacity.items())
    )
    errors = [f for f in findings if f.severity is not Severity.INFO]
    return Result(LinkState.DEGRADED if errors else LinkState.OK, summary, tuple(findings))


def _gpu_node_affinity(gpu_nodes: list[Obj], node: Obj) -> dict[str, object] | None:
    """A node affinity term every GPU node matches and ``node`` does not: a GPU label they all carry, else
    their instance types (None when nothing tells them apart)."""
    for key in GPU_NODE_LABELS:
        if all(labels_of(n).get(key) for n in gpu_nodes) and not labels_of(node).get(key):
            return {"key": key, "operator": "Exists"}
    types = sorted({labels_of(n).get(INSTANCE_TYPE, "") for n in gpu_nodes} - {""})
    if types and labels_of(node).get(INSTANCE_TYPE) not in types:
        return {"key": INSTANCE_TYPE, "operator": "In", "values": types}
    return None


INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def plugin_off_gpu_nodes(ctx: Context) -> list[Finding]:
    """Device plugin pods failing on nodes with no NVIDIA GPU: the DaemonSet selects no GPU nodes, so it
    lands where no driver can be (the runtime hook fails, NVML finds nothing). The repair is the DaemonSet's
    placement, not the node: an affinity the GPU nodes match."""
    gpu_nodes = [n for n in ctx.snapshot.nodes if is_gpu_node(n)]
    others = {name_of(n): n for n in ctx.snapshot.nodes if not is_gpu_node(n)}
    if not gpu_nodes or not others:
        return []
    out = []
    for pod in ctx.snapshot.pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        owner = _owner(pod)
        if node not in others or not owner:
            continue
        if ctx.stack.operand_in(str(meta.get("namespace") or ""), owner) != DEVICE_PLUGIN.state:
            continue
        state = pod_state(pod)
        term = _gpu_node_affinity(gpu_nodes, others[str(node)]) if state.failing else None
        if term is None:
            continue
        ns = str(meta.get("namespace") or ctx.namespace)
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
            }
        }
        action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{owner}", {"spec": {"template": {"spec": {"affinity": affinity}}}})
        said = catalog.known_error("\n".join((state.last_log, state.message)))
        view = NodeView(str(node), others[str(node)], labels_of(others[str(node)]), {}, [], [])
        out.append(
            _finding(
                view,
                "device-plugin.off-gpu-node",
                Severity.ERROR,
                "device-plugin",
                f"the device plugin's DaemonSet {ns}/{owner} places a pod on {node}, a node with no NVIDIA GPU (no GPU "
                "label, capacity or GPU instance type), where it cannot start: its DaemonSet selects no GPU nodes.",
                [
                    state.describe(),
                    *(said.evidence("runtime says") if said else ()),
                    f"GPU nodes: {', '.join(sorted(name_of(n) for n in gpu_nodes)[:5])}",
                ],
                ctx.stack.render(action) + "   # a node affinity only the GPU nodes match",
                action,
            )
        )
    return out


# -- 4. feature discovery, exporter, MIG --------------------------------------------------------


#: The finding of an operand that runs ready while its log says its own work fails, by link.
RUNNING_WITH_ERRORS = {"exporter": "exporter.running-with-errors", "gfd": "gfd.running-with-errors"}


def _running_with_errors(ctx: Context, view: NodeView, pod: Obj, link: str, what: str) -> Result | None:
    """A ready pod whose log (read for one pod per troubled DaemonSet, snapshot._log_candidates) holds an
    error the catalog knows for this pod's own link: it runs, but its product (metrics, labels) is not made."""
    finding_id = RUNNING_WITH_ERRORS.get(link)
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    found = catalog.known_error("\n".join(ctx.log(pod, n) for n in names)) if finding_id else None
    if finding_id is None or found is None or found.entry.link != link:
        return None
    return Result(
        LinkState.BROKEN,
        f"{what} Running, but its log says it fails",
        (
            _finding(
                view,
                finding_id,
                Severity.ERROR,
                link,
                f"the {what} pod {name_of(pod)} runs, but its log says its work fails: {found.entry.cause}",
                [f"pod {name_of(pod)}: Running", *found.evidence()],
                f"# {found.entry.fix}",
            ),
        ),
    )


def _simple(ctx: Context, view: NodeView, operand: Operand, link: str, what: str) -> Result:
    pod = view.pod(operand)
    if pod is None:
        if view.labels.get(deploy_label(operand)) == PAUSED_FOR_MIG_CHANGE:
            return Result(LinkState.DEGRADED, "paused for a MIG change")
        missing = unscheduled(ctx, view, operand, link)
        return missing or Result(LinkState.SKIPPED, f"{what} not deployed here")
    state = pod_state(pod)
    if state.ready:
        return _running_with_errors(ctx, view, pod, link, what) or Result(LinkState.OK, f"{what} Running")
    log = _logs(ctx, view, operand, state.container, state.last_log)
    if operand is DCGM_EXPORTER:
        known = _exporter_failure(ctx, view, pod, state, log)
        if known is not None:
            return _known_not_ready(view, link, what, state, known)
    found = catalog.find(log, "dcgm-exporter.libdcgm-not-found", "dcgm.libdcgm-not-found")
    if operand is DCGM_EXPORTER and found:
        # dcgm-exporter's own image bundles DCGM; an image without it never starts collecting.
        cause = f"the {what} pod is {state.status}: its image has no DCGM library, so it can serve no GPU metrics."
        if ctx.policy_obj is not None and ctx.stack.id == "gpu-operator":
            image = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"dcgmExporter": dict(DCGM_EXPORTER_IMAGE)}})
            action: Fix | None = image
            fix = ctx.stack.render(image)
        else:
            action = None
            fix = f"run an exporter image that bundles DCGM ({'/'.join(DCGM_EXPORTER_IMAGE.values())})"
        return Result(
            LinkState.BROKEN,
            f"{what} {state.status}",
            (
                _finding(
                    view,
                    f"{link}.not-ready",
                    Severity.ERROR,
                    link,
                    cause,
                    [state.describe(), *found.evidence()],
                    fix,
                    action,
                ),
            ),
        )
    return _not_ready(ctx, view, operand, link, what, state, log, f"the {what} pod is {state.status}.")


#: dcgm-exporter's fatal lines (NVIDIA/dcgm-exporter pkg/cmd/app.go "Failed to watch metrics", and
#: DCGM's own error strings it wraps; catalog.yaml), each with what repairs it.
EXPORTER_PROFILING_RACE = "dcgm.profiling-library-error"
EXPORTER_NO_PROFILING = ("dcgm.module-not-loaded", "dcgm.profiling-not-supported")
EXPORTER_NO_NVML = "dcgm.init-error"


def _owner(pod: Obj) -> str:
    """The name of the DaemonSet that owns ``pod`` ("" when none does)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return next((str(r.get("name")) for r in refs if r.get("kind") == "DaemonSet"), "")


def _stack_exporter_on(ctx: Context, node: str) -> str:
    """The stack's own exporter pod on ``node`` ("" when it runs none there)."""
    mine = ctx.ds(DCGM_EXPORTER)
    return next(
        (
            name_of(p)
            for p in ctx.snapshot.pods
            if (p.get("metadata") or {}).get("namespace") == ctx.namespace
            and (p.get("spec") or {}).get("nodeName") == node
            and _owner(p) == mine
        ),
        "",
    )


def _exporter_failure(ctx: Context, view: NodeView, pod: Obj, state: PodState, log: str) -> Known | None:
    ns = str((pod.get("metadata") or {}).get("namespace") or ctx.namespace)
    own = _stack_exporter_on(ctx, view.name) if ns != ctx.namespace and ctx.stack.elsewhere else ""
    if own and _owner(pod):
        # Two exporters on one node each start a DCGM host engine on the same GPUs; the stack's own
        # already serves the node's metrics, so the second release is the one to remove.
        ds = _owner(pod)
        release = (pod.get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/instance") or ds
        remove = Fix(FixOp.DELETE, f"{ns}/{ds}", {"kind": "DaemonSet", "namespace": ns, "name": ds})
        said = catalog.known_error(log)
        return Known(
            f"a second dcgm-exporter release (DaemonSet {ns}/{ds}) runs beside {ctx.stack.title}'s own exporter "
            f"({own}) on this node; both drive DCGM on the same GPUs (its profiling module serves one), and the "
            "second one fails.",
            (*(said.evidence() if said else ()), f"DaemonSet {ns}/{ds}; the stack's exporter pod {own} runs here"),
            remove,
            f"helm -n {ns} uninstall {release}   # the second release; or: {ctx.stack.render(remove)}",
        )
    found = catalog.find(log, EXPORTER_PROFILING_RACE)
    if found:
        action = Fix(FixOp.DELETE, f"{ns}/{state.name}", {"kind": "Pod", "namespace": ns, "name": state.name})
        return Known(
            "dcgm-exporter lost a start-up race with DCGM's profiling module (NVIDIA/dcgm-exporter#330) and exited; "
            "a new pod starts cleanly.",
            (*found.evidence(), f"DaemonSet in namespace {ns}"),
            action,
            ctx.stack.render(action) + "   # its DaemonSet starts a new one",
        )
    found = catalog.find(log, *EXPORTER_NO_PROFILING)
    if found:
        return Known(
            "dcgm-exporter asks for profiling (DCP, DCGM_FI_PROF_*) metrics this GPU or DCGM build cannot serve, "
            "and exits.",
            (*found.evidence(), f"DaemonSet in namespace {ns}"),
            None,
            "run dcgm-exporter without profiling metrics: drop the DCGM_FI_PROF_* lines from its metrics CSV "
            "(its -f / collectors file, or the ConfigMap it reads), or use a dcgm-exporter release that skips "
            "unsupported DCP metrics",
        )
    found = catalog.find(log, EXPORTER_NO_NVML)
    if found and ctx.stack.driver_root:
        return Known(
            f"dcgm-exporter cannot load NVML: this stack installs the driver under {ctx.stack.driver_root} on the "
            "host, and the exporter's pod neither mounts it nor runs privileged.",
            (*found.evidence(), f"DaemonSet in namespace {ns}"),
            None,
            f"mount the host's {ctx.stack.driver_root} into the exporter (hostPath volume, with its lib64 on "
            "LD_LIBRARY_PATH) and run it privileged (securityContext.privileged: true)",
        )
    return None


def check_gfd(ctx: Context, view: NodeView) -> Result:
    """Feature discovery: its pod, and the nvidia.com/gpu.* labels it should have written."""
    result = _simple(ctx, view, GFD, "gfd", "gpu-feature-discovery")
    if result.state is not LinkState.OK or PRODUCT in view.labels:
        return result
    nfd = sorted(k for k in view.labels if k.startswith(NFD_PREFIX))
    evidence = [f"node {view.name} has no {PRODUCT} label", pod_state(view.pod(GFD) or {}).describe()]
    if not nfd and ctx.stack.id != "gpuchain":
        # NVIDIA's GFD hands its labels to Node Feature Discovery (features.d or a NodeFeature object);
        # a node NFD never labelled (its GPU label set by hand) never gets them.
        install = nfd_install()
        action: Fix | None = install
        cause = (
            "gpu-feature-discovery runs, but it hands its labels to Node Feature Discovery and NFD does not run "
            f"on this node (no {NFD_PREFIX}* label at all), so nvidia.com/gpu.* labels never appear and nodeSelectors "
            "on GPU model or memory match nothing."
        )
        evidence.append(f"no {NFD_PREFIX}* label on {view.name}")
        fix = ctx.stack.render(install) + _nfd_hint(ctx)
    else:
        # GFD writes its labels from what NVML says at its start (and on its sleep interval): a pod that
        # started before the driver answered, or whose NVML init failed, labels nothing until it restarts.
        gfd = view.pod(GFD) or {}
        ns = str((gfd.get("metadata") or {}).get("namespace") or ctx.namespace)
        again = Fix(FixOp.DELETE, f"{ns}/{name_of(gfd)}", {"kind": "Pod", "namespace": ns, "name": name_of(gfd)})
        action = again
        cause = (
            "gpu-feature-discovery runs but the node has no nvidia.com/gpu.product label, so nodeSelectors on GPU "
            "model or memory match nothing; NFD runs here, so GFD did not label (it found no GPU through NVML when "
            "it started, e.g. before the driver was ready) or nfd-master drops its labels."
        )
        fix = ctx.stack.render(again) + (
            "   # a new GFD pod labels the node from NVML again; if the labels still do not appear, let nfd-master "
            "accept the nvidia.com label namespace (its -extra-label-ns / extraLabelNs)"
        )
    return Result(
        LinkState.BROKEN,
        "no nvidia.com/gpu.* labels",
        (_finding(view, "gfd.labels-missing", Severity.ERROR, "gfd", cause, evidence, fix, action),),
    )


def check_exporter(ctx: Context, view: NodeView) -> Result:
    """Metrics exporter: its pod (a Running, ready pod serves /metrics on :9400)."""
    return _simple(ctx, view, DCGM_EXPORTER, "exporter", "dcgm-exporter")


#: mig-parted's line when a MIG mode change waits for a GPU reset or a reboot (catalog.yaml).
MODE_CHANGE_PENDING = "mig-parted.mode-change-pending"
RESET_FAILED = "mig-parted.reset-failed"
#: nvidia-smi's words when a GPU it must reset is held (NVML_ERROR_IN_USE: "the GPU is currently in use").
IN_USE = re.compile(r"in use by another client|currently being used by one or more other processes", re.IGNORECASE)


def _mig_finding(ctx: Context, view: NodeView) -> Finding | None:
    state = view.labels.get(MIG_CONFIG_STATE)
    wanted = view.labels.get(MIG_CONFIG)
    if state not in ("pending", "rebooting", "failed"):
        return None
    reason = ((view.node.get("metadata") or {}).get("annotations") or {}).get(MIG_CONFIG_STATE_REASON, "")
    paused = sorted(k.removeprefix(DEPLOY_PREFIX) for k, v in view.labels.items() if v == PAUSED_FOR_MIG_CHANGE)
    mgr = view.pod(MIG_MANAGER)
    evidence = [
        f"{MIG_CONFIG}={wanted}, {MIG_CONFIG_STATE}={state}",
        f"{MIG_CONFIG_STATE_REASON}: {reason}" if reason else "",
        f"operands paused: {', '.join(paused)}" if paused else "",
        pod_state(mgr).describe() if mgr is not None else "no mig-manager pod on this node",
    ]
    log = ctx.log(mgr, ctx.container(MIG_MANAGER)) if mgr is not None else ""
    pending = catalog.find(log, MODE_CHANGE_PENDING)
    reset = catalog.find(log, RESET_FAILED)
    if state == "failed" and reset is not None and IN_USE.search(log):
        # The reset found the GPUs held (nvidia-smi's words for NVML_ERROR_IN_USE): free them, then apply.
        ns = str(((mgr or {}).get("metadata") or {}).get("namespace") or ctx.namespace)
        restart = f"kubectl -n {ns} delete pod {name_of(mgr)}" if mgr is not None else "delete its pod"
        free = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "unload the nvidia_drm kernel module (rmmod nvidia_drm) and stop the other GPU clients "
                "(nvidia-persistenced, fabric manager, monitoring agents) so the MIG manager can reset the GPUs; "
                f"then restart the MIG manager so it applies {wanted!r} again on start ({restart}); load nvidia_drm "
                "again afterwards",
                NOT_SIMULATED: "kernel modules holding a GPU are not simulated",
            },
        )
        return _finding(
            view,
            "mig.failed",
            Severity.ERROR,
            "mig",
            f"the MIG manager could not apply layout {wanted!r}: {reset.entry.cause}",
            [*evidence, *reset.evidence("mig-manager log")],
            ctx.stack.render(free),
            free,
        )
    if state == "failed" and pending is not None:
        # The mode change is written to the GPU and waits for a reset; where the manager could not
        # reset the GPUs, only a reboot commits it. Another layout label would wait the same way.
        reboot = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "reboot the node so the pending MIG mode change takes effect; to let the MIG manager "
                "reboot it itself, set WITH_REBOOT=true in spec.migManager.env of the ClusterPolicy",
                "drain": True,
                NOT_SIMULATED: "a pending MIG mode change is not simulated",
            },
        )
        return _finding(
            view,
            "mig.failed",
            Severity.ERROR,
            "mig",
            f"the MIG manager could not apply layout {wanted!r}: {pending.entry.cause}",
            [*evidence, *pending.evidence("mig-manager log")],
            ctx.stack.render(reboot),
            reboot,
        )
    if state == "failed":
        back = Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: "all-disabled"})
        known = catalog.known_error(log)
        return _finding(
            view,
            "mig.failed",
            Severity.ERROR,
            "mig",
            f"the MIG manager could not apply layout {wanted!r}{f': {reason}' if reason else ''}"
            + (f": {known.entry.cause}" if known else "."),
            [*evidence, *(known.evidence("mig-manager log") if known else ())],
            (f"# {known.entry.fix}   # or: " if known else "")
            + ctx.stack.render(back)
            + "   # or a layout this GPU supports; where the MIG mode change waits for a GPU reset the node cannot "
            "do, reboot the node (WITH_REBOOT=true in the MIG manager's env lets it reboot itself)",
            back,
        )
    cancel = Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: None, MIG_CONFIG_STATE: None})
    return _finding(
        view,
        "mig.pending",
        Severity.ERROR,
        "mig",
        f"the MIG change to {wanted!r} is stuck in {state!r}"
        + (f" ({reason})" if reason else "")
        + "; the device plugin, GFD and exporter stay paused until it finishes, so the node offers no GPUs.",
        evidence,
        ctx.stack.render(cancel) + "   # cancels the change; or let it finish: the MIG manager needs the GPUs "
        f"free (kubectl drain {view.name} --ignore-daemonsets, then kubectl uncordon {view.name})",
        cancel,
    )


def _mig_unmanaged(ctx: Context, view: NodeView) -> Finding | None:
    """A MIG-capable node the MIG manager was never placed on (no deploy label, no layout label) while
    the operands that enumerate its GPUs fail with nothing the catalog knows: the GPUs' MIG mode was set
    outside the cluster (before the operator came), so no one manages it (NVIDIA/gpu-operator#287)."""
    if (
        view.labels.get(MIG_CAPABLE) != "true"
        or view.labels.get(MIG_CONFIG)
        or deploy_label(MIG_MANAGER) in view.labels
        or operand_daemonset(ctx, MIG_MANAGER) is None
    ):
        return None
    failing = []
    for operand in (DEVICE_PLUGIN, GFD):
        pod = view.pod(operand)
        if pod is None:
            return None
        state = pod_state(pod)
        if not state.failing:
            return None
        if catalog.known_error(ctx.log(pod, state.container or ctx.container(operand)) + "\n" + state.message):
            return None
        failing.append(state.describe())
    if len(failing) < 2:
        # Both fail when the GPUs' MIG mode is the cause; one alone fails for its own reason (its config).
        return None
    manage = Fix(FixOp.LABEL_NODE, view.name, {deploy_label(MIG_MANAGER): "true", MIG_CONFIG: "all-disabled"})
    return _finding(
        view,
        "mig.unmanaged",
        Severity.ERROR,
        "mig",
        "the node's GPUs are MIG-capable, the MIG manager was never placed on it (no "
        f"{deploy_label(MIG_MANAGER)} label) and the operands that enumerate its GPUs fail: MIG mode was turned "
        "on outside the cluster, so the GPUs carry no layout the device plugin and GFD can use.",
        [f"{MIG_CAPABLE}=true, no {MIG_CONFIG} label, no {deploy_label(MIG_MANAGER)} label", *failing],
        ctx.stack.render(manage) + "   # puts the MIG manager on the node; give it the layout you want instead of "
        "all-disabled (e.g. nvidia.com/mig.config=all-1g.5gb), or turn MIG off on the host (nvidia-smi -mig 0)",
        manage,
    )


def mig_root(ctx: Context, view: NodeView) -> Finding | None:
    """A MIG state that stops the links above it (the device plugin, GFD and exporter wait for the
    layout): a change that failed or hangs, or MIG on GPUs the MIG manager does not manage."""
    return _mig_finding(ctx, view) if view.labels.get(MIG_CONFIG) else _mig_unmanaged(ctx, view)


def check_mig(ctx: Context, view: NodeView) -> Result:
    """MIG: the requested layout and how far the MIG manager got."""
    wanted = view.labels.get(MIG_CONFIG)
    if not wanted:
        return Result(LinkState.SKIPPED, "MIG not requested")
    finding = _mig_finding(ctx, view)
    if finding is not None:
        return Result(LinkState.BROKEN, f"{wanted}: {view.labels.get(MIG_CONFIG_STATE)}", (finding,))
    return Result(LinkState.OK, f"{wanted}: {view.labels.get(MIG_CONFIG_STATE, 'unknown')}")


# -- workloads on GPU nodes ----------------------------------------------------------------------

NVML_LOST = "nvml.unknown-error-in-workload"
ACCEPT_ENVVAR = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"


def _visible_devices(pod: Obj) -> str | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for env in c.get("env") or []:
            if env.get("name") == "NVIDIA_VISIBLE_DEVICES":
                return str(env.get("value", ""))
    return None


def _admission(ctx: Context, view: NodeView) -> Finding | None:
    """The kubelet refused GPU pods at admission (Allocate): UnexpectedAdmissionError Events."""
    refused = [e for e in view.events if e.get("reason") == "UnexpectedAdmissionError"]
    if not refused:
        return None
    message = str(refused[0].get("message", ""))
    if catalog.find(message, *ANYWHERE):
        # A message that proves a lower link broken (NVML failing under the plugin): the walk names that
        # link as the root with its repair (evidence.admission_refused); a kubelet restart would not help.
        return None
    pods = sorted(
        {
            f"{(e.get('involvedObject') or {}).get('namespace')}/{(e.get('involvedObject') or {}).get('name')}"
            for e in refused
        }
    )
    lost = catalog.find(message, "nvml.gpu-lost")
    said = [m.entry.cite() for m in (catalog.find(message, "kubelet.allocate-failed"), lost) if m]
    if lost:
        action = Fix(
            FixOp.HARDWARE,
            view.name,
            {
                "action": "reset the lost GPU (nvidia-smi -r) or reboot the node; replace it if it recurs",
                "fact": "replace-gpu",
            },
        )
        cause = "the device plugin cannot list its devices because a GPU is lost, so the kubelet refuses every GPU pod."
    else:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "systemctl restart kubelet (its device manager holds allocations of pods that are gone)",
                "fact": "kubelet",
            },
        )
        cause = (
            "the kubelet's device manager counts GPUs of pods that no longer exist as allocated, so it refuses new GPU "
            "pods at admission although the scheduler placed them (kubernetes/kubernetes#130145)."
        )
    return _finding(
        view,
        "workload.admission-failed",
        Severity.ERROR,
        "device-plugin",
        cause,
        [f"event UnexpectedAdmissionError (kubelet): {message}", *said, f"pods refused: {', '.join(pods[:5])}"],
        ctx.stack.render(action),
        action,
    )


#: What the NVIDIA runtime hook (or the runtime's CDI injection) writes when it refuses to set up a GPU
#: container (catalog.yaml), most specific first; containerd reports it as the container's StartError message.
HOOK_FAILED = (
    "libnvidia-container.mount-error",
    "libnvidia-container.imex-parse",
    "libnvidia-container.initialization-error",
    "cdi.unresolvable-devices",
    "runc.prestart-hook-failed",
)


def _hook_refused(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods the NVIDIA runtime hook refuses to start while the chain's operands run: the toolkit on the
    node (its hook), not the pods, is broken."""
    refused = []
    said: catalog.Match | None = None
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        said_here = start_refused(pod)
        if catalog.find(said_here, *ANYWHERE):
            continue  # a message that proves a lower link broken (the walk names it there, from this pod)
        found = catalog.find(said_here, *HOOK_FAILED)
        if found is not None:
            refused.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
            said = said or found
    if said is None:
        return None
    if ctx.stack.node_image:
        work = (
            f"the node image carries the runtime hook: replace the node with one of another release of "
            f"{ctx.stack.node_image} (the release before the one it runs, or a later one with the fix); "
            f"then delete the pods: {', '.join(refused[:3])}"
        )
    else:
        work = f"{said.entry.fix}; then delete the pods: {', '.join(refused[:3])}"
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": work, "drain": False, NOT_SIMULATED: "the runtime hook's release is not a scenario fact"},
    )
    return _finding(
        view,
        "workload.runtime-hook-failed",
        Severity.ERROR,
        "toolkit",
        f"GPU pods on this node fail to start: the NVIDIA runtime refuses to set up their containers. "
        f"{said.entry.cause}",
        [f"GPU pods refused at start: {', '.join(refused[:5])}", *said.evidence("runtime says")],
        ctx.stack.render(action),
        action,
    )


def check_workloads(ctx: Context, view: NodeView) -> list[Finding]:
    """Application pods on a GPU node: refused at admission, refused at start by the runtime hook, GPUs
    that went away under them, and GPUs seen without a request."""
    refused = _admission(ctx, view)
    findings: list[Finding] = [refused] if refused else []
    apps = [
        p for p in view.workloads if (p.get("metadata") or {}).get("namespace") not in (ctx.namespace, "kube-system")
    ]
    hook = _hook_refused(ctx, view, apps)
    if hook is not None:
        findings.append(hook)
    lost = []
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            if catalog.find(ctx.log(pod, str(c.get("name"))), NVML_LOST):
                lost.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
                break
    if lost:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "create the /dev/char links runc needs for the NVIDIA devices (nvidia-ctk system "
                "create-dev-char-symlinks --create-all), then delete the affected pods so they start with their "
                f"device rules: kubectl delete pod -n {lost[0].split('/')[0]} {lost[0].split('/')[1]}",
                "fact": "dev-char",
            },
        )
        findings.append(
            _finding(
                view,
                "workload.nvml-lost",
                Severity.ERROR,
                "toolkit",
                "GPU pods on this node lost access to their GPUs while running: systemd reloaded its units and "
                "dropped the containers' device cgroup rules (the NVIDIA devices have no /dev/char links), so "
                "NVML fails inside them; the device plugin and the node look healthy.",
                [
                    f"pods logging '{catalog.entry(NVML_LOST).args[0]}' from NVML: {', '.join(lost[:5])}",
                    catalog.entry(NVML_LOST).cite(),
                    "NVIDIA/nvidia-container-toolkit#48",
                ],
                ctx.stack.render(action),
                action,
            )
        )
    if ctx.policy_unknown:
        return findings  # whether the toolkit hands GPUs to pods that set the variable is in the policy
    accept = next((e.value for e in ctx.policy.toolkit.env if e.name == ACCEPT_ENVVAR), None)
    seeing = [
        f"{p['metadata'].get('namespace')}/{p['metadata']['name']} (NVIDIA_VISIBLE_DEVICES={_visible_devices(p)})"
        for p in apps
        if not pod_gpu_requests(p) and _visible_devices(p) not in (None, "", "void", "none")
    ]
    if seeing and str(accept).lower() != "false":
        env = [
            *({"name": e.name, "value": e.value} for e in ctx.policy.toolkit.env),
            {"name": ACCEPT_ENVVAR, "value": "false"},
        ]
        fix_action = (
            Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}}})
            if ctx.policy_obj is not None
            else Fix(
                FixOp.NODE,
                view.name,
                {
                    "action": "set accept-nvidia-visible-devices-envvar-when-unprivileged = false in "
                    "/etc/nvidia-container-runtime/config.toml (and the device plugin's "
                    "DEVICE_LIST_STRATEGY=volume-mounts, so GPU pods still get theirs)",
                    "drain": False,
                    NOT_SIMULATED: "the node image's container runtime config is not a scenario fact",
                },
            )
        )
        findings.append(
            _finding(
                view,
                "workload.gpu-without-request",
                Severity.WARNING,
                "toolkit",
                "pods that ask for no GPU set NVIDIA_VISIBLE_DEVICES, so the NVIDIA runtime gives them GPUs the "
                "scheduler and the device plugin do not know are in use (CUDA base images set it to all).",
                [f"pods: {', '.join(seeing[:5])}", f"{ACCEPT_ENVVAR} is not false in the toolkit's env"],
                ctx.stack.render(fix_action),
                fix_action,
            )
        )
    return findings
