"""Whether an enabled operand has a pod on the node at all: its DaemonSet missing (the operator down
or not reconciling), or a taint, selector or missing NFD label keeping it off the node."""

from __future__ import annotations

import dataclasses
import json
from typing import cast

from gpuchain.common.labels import DEPLOY_PREFIX, GPU_PRESENT, PAUSED_FOR_MIG_CHANGE
from gpuchain.doctor import catalog
from gpuchain.doctor.context import NO_POLICY, Context, NodeView
from gpuchain.doctor.links.common import (
    Result,
    gpus_present,
    node_finding,
    operand_daemonset,
    opted_out,
    placement_fix,
    said_in,
)
from gpuchain.doctor.links.dra_plugin import dra_served
from gpuchain.doctor.links.driver_paused import paused_for_driver
from gpuchain.doctor.links.nfd_pods import nfd_down
from gpuchain.doctor.links.operator_unlabelled import operator_unlabelled
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.nfd import NFD_LINK
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.operator_says import OperatorSays, operator_says
from gpuchain.doctor.placement import Blocker, blocker, pod_blocker, taint_text, tolerations_for
from gpuchain.doctor.pods import pod_state, unschedulable_message
from gpuchain.doctor.removed_apis import API_NOT_SERVED, api_repair
from gpuchain.doctor.stacks.base import daemonsets_in, is_gpu_node
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DRIVER, NFD_GPU_LABELS, Operand, deploy_label, enabled

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


def nfd_hint(ctx: Context) -> str:
    """The stack's other way to get NFD, as a comment after the fix: its chart's bundled NFD ("" when
    its chart bundles none)."""
    chart = ctx.stack.chart
    if chart is None or not chart.nfd_values:
        return ""
    return (
        f"   # or: helm upgrade {chart.release} {chart.chart} -n {ctx.namespace} --reuse-values "
        f"--set {chart.nfd_values}.enabled=true"
    )


def nfd_worker(ds: Obj) -> bool:
    """A Node Feature Discovery worker DaemonSet (NFD's own chart, or the one a GPU chart bundles)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = " ".join(str(c.get("image", "")) for c in spec.get("containers") or [])
    return "node-feature-discovery" in images and "worker" in name_of(ds)


def _nfd_missing(ctx: Context, view: NodeView, ds_name: str, block: Blocker, link: str, via: str = "") -> Result:
    """The stack selects GPU nodes by an NFD label the node lacks, so the first link whose DaemonSet
    selects on it (the driver's in the operator, the plugin's on a managed image) is missing here.

    What repairs it follows from NFD's own state: NFD labelled the node's NVIDIA device under another
    name (its ``deviceLabelFields`` publish the class too, ``pci-0300_10de``), so the node gets the label
    the DaemonSet asks for; its worker runs but cannot land on the node (a taint it does not tolerate),
    so the worker gets the toleration; its worker or master does not run (links/nfd_pods.py); or no NFD runs at
    all, so it is installed. ``via``: the label the DaemonSet selects on that the operator derives from NFD's."""
    others = sorted(
        k for k in view.labels if k.startswith(NFD_PREFIX + "pci-") and "10de" in k and k != block.detail.get("key")
    )
    workers = sorted((d for d in ctx.snapshot.daemonsets if nfd_worker(d)), key=name_of)
    kept = next(((w, b) for w in workers if (b := blocker(w, view.node)) is not None and b.kind == "taint"), None)
    evidence = [
        via or block.describe(),
        f"{ds_name} places no pod on {view.name}",
        f"GPUs present: {gpus_present(view)}",
    ]
    action: Fix | None
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
        current = (((worker.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or []
        ns = str((worker.get("metadata") or {}).get("namespace") or "")
        action = Fix(
            FixOp.PATCH_DAEMONSET,
            f"{ns}/{name_of(worker)}",
            {"spec": {"template": {"spec": {"tolerations": [*current, *tolerations_for(taint)]}}}},
        )
        cause = (
            f"Node Feature Discovery's worker {ns}/{name_of(worker)} does not tolerate this node's taint, so NFD never "
            f"labels the node ({block.detail.get('key')} is absent) and {ds_name}, which selects on it, places no pod "
            f"here: the {link} link is missing."
        )
        evidence.append(f"NFD worker {ns}/{name_of(worker)}: {taint.describe()}")
        fix = ctx.stack.render(action) + "   # the NFD worker tolerates the GPU taint (its chart's worker.tolerations)"
    elif (down := nfd_down(ctx, view=view, label=str(block.detail.get("key")))) is not None:
        action = down.action
        cause = f"{down.cause}; {ds_name}, which selects on it, places no pod here: the {link} link is missing."
        evidence += list(down.evidence)
        fix = down.fix
    else:
        action = nfd_install()
        cause = (
            f"the node has GPUs but Node Feature Discovery never labelled them ({NFD_GPU_LABELS[0]} is absent), "
            f"and {ctx.stack.title}'s DaemonSets select GPU nodes by that label, so no operand, the {link} "
            "first, is placed here."
        )
        fix = ctx.stack.render(action) + nfd_hint(ctx)
    said = said_by_operator(ctx)
    evidence += list(said.evidence) if said is not None else []
    return Result(
        LinkState.BROKEN,
        "Node Feature Discovery never labelled this node",
        (
            node_finding(
                view,
                fid="nfd.not-labelled",
                sev=Severity.ERROR,
                link=NFD_LINK,
                cause=cause,
                evidence=evidence,
                fix=fix,
                action=action,
            ),
        ),
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


def restart_operator(ctx: Context, operator: Obj | None) -> tuple[Fix | None, str, list[str]]:
    """The change that brings back a missing object the operator makes (an operand DaemonSet, the
    RuntimeClass) while the operator runs: restart the operator, which reconciles on start. Never
    the object itself: the operator owns it, and a copy applied by hand is overwritten (or fights
    the operator) at its next reconcile."""
    if operator is not None:
        state = pod_state(operator)
        restart = Fix.delete_pod(
            state.restart_in(ctx.namespace),
            state.name,
            **{NOT_SIMULATED: "the simulator runs no operator that would recreate the DaemonSet"},
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
        *said_in(state.last_log),
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
            every = taint.taints or (taint.detail,)
            names = ", ".join(taint_text(t) for t in every)
            which = ("the taints", "them") if len(every) > 1 else ("the taint", "that taint")
            fix = (
                f"# let the operator's Deployment tolerate {which[0]} {names} (the chart's "
                f"operator.tolerations), or run it on a node without {which[1]}"
            )
        else:
            fix = (
                "# give the operator's pod what the scheduler says it lacks: free CPU or memory on a node, or "
                "lower its requests (the chart's operator.resources)"
            )
    else:
        why = f"{state.status}" + (f" ({state.message})" if state.message else "")
        known = catalog.known_error(state.last_log)
        again = Fix.delete_pod(state.restart_in(ctx.namespace), state.name)
        fix = (
            f"# {known.entry.repair(namespace=state.restart_in(ctx.namespace), pod=state.name)}"
            if known
            else ctx.stack.render(again) + "   # runs it again; gpuchain knows no repair for this failure"
        )
    return Result(
        LinkState.BROKEN,
        f"operator {state.status}: no {name}",
        (
            node_finding(
                view,
                fid="operator.not-running",
                sev=Severity.ERROR,
                link=link,
                cause=f"the operator's pod {state.name} is {state.status}: {why}. The operator has never reconciled, "
                f"so {where} and the other operand DaemonSets do not exist and no link of the chain is deployed.",
                evidence=evidence,
                fix=fix,
                action=action,
            ),
        ),
    )


def _deploy_label_from_nfd(ctx: Context, view: NodeView, key: str) -> bool:
    """Whether ``key`` is a ``nvidia.com/gpu.deploy.*`` label NVIDIA's operator sets only on nodes where NFD shows an
    NVIDIA device (nvidia.com/gpu.present from pci-10de: controllers/state_manager.go labelGPUNodes@v25.3.4) and this
    node has neither label: the missing NFD label is why the operator's DaemonSet selects it not."""
    nfd = any(k.startswith(NFD_PREFIX + "pci-") and "10de" in k for k in view.labels)
    return (
        ctx.stack.id == "gpu-operator"
        and key.startswith(DEPLOY_PREFIX)
        and view.labels.get(GPU_PRESENT) != "true"
        and not nfd
    )


#: NVIDIA's NVIDIADriver kind (api/nvidia/v1alpha1/nvidiadriver_types.go@v25.3.4).
NVIDIADRIVER_API = "nvidia.com/v1alpha1"


def _no_nvidiadriver(ctx: Context, view: NodeView) -> tuple[str, str, list[str]] | None:
    """The driver handed to NVIDIADriver objects (the ClusterPolicy's driver.useNvidiaDriverCRD: the operator then
    removes its own driver DaemonSets, controllers/state_manager.go@v25.3.4, and each NVIDIADriver renders one for
    the nodes its nodeSelector takes) while no NVIDIADriver selects this node: the cause, the NVIDIADriver that
    drives it (from the policy's driver image; selecting only this node's hostname where others exist, whose
    selectors must not overlap: internal/validator/validator.go), and the evidence. None where the policy keeps the
    driver, or the source has no NVIDIADrivers to read."""
    driver = ((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}
    if driver.get("useNvidiaDriverCRD") is not True or "nvidiadrivers" in ctx.snapshot.absent:
        return None

    def selects(obj: Obj) -> bool:
        wanted = ((obj.get("spec") or {}).get("nodeSelector") or {}).items()
        return all(view.labels.get(k) == v for k, v in wanted)

    if any(selects(d) for d in ctx.snapshot.drivers):
        return None
    others = sorted(name_of(d) for d in ctx.snapshot.drivers)
    spec = {
        "driverType": "gpu",
        "repository": driver.get("repository") or "nvcr.io/nvidia",
        "image": driver.get("image") or "driver",
        "version": driver.get("version") or "<driver version>",
        "nodeSelector": {"kubernetes.io/hostname": view.name} if others else {},
    }
    name = f"driver-{view.name}" if others else "default"
    create = Fix(
        FixOp.CREATE,
        "",
        {"apiVersion": NVIDIADRIVER_API, "kind": "NVIDIADriver", "metadata": {"name": name}, "spec": spec},
    )
    cause = (
        "the ClusterPolicy hands the driver to NVIDIADriver objects (driver.useNvidiaDriverCRD=true), so the operator "
        "makes no driver DaemonSet of its own, and no NVIDIADriver selects this node"
        + (f" (there are: {', '.join(others)})" if others else " (there is none)")
        + ": the driver link is missing here."
    )
    fix = ctx.stack.render(create) + (
        f"   # or set driver.useNvidiaDriverCRD=false in {ctx.policy_ref} so the operator deploys the driver itself"
    )
    return cause, fix, ["driver.useNvidiaDriverCRD=true", f"NVIDIADrivers: {', '.join(others) or 'none'}"]


def said_by_operator(ctx: Context) -> OperatorSays | None:
    """What NVIDIA's GPU Operator says in its log and its ClusterPolicy's conditions (None on another stack)."""
    if ctx.stack.id != "gpu-operator":
        return None
    if "operator_says" not in ctx.memo:  # asked by every GPU node with an operand missing; the answer is the cluster's
        ctx.memo["operator_says"] = operator_says(
            ctx.snapshot.pods, namespace=ctx.namespace, policy=ctx.policy_obj, log=ctx.log
        )
    return cast("OperatorSays | None", ctx.memo["operator_says"])


def _operator_reason(
    ctx: Context, view: NodeView, said: OperatorSays, *, where: str, link: str, restart: tuple[str, Fix | None]
) -> tuple[str, str, Fix | None, list[str]]:
    """The cause, fix, action and evidence of a missing operand DaemonSet from what the running operator says: the
    catalog entry's cause and fix (where it says NFD's labels are missing, the repair NFD's own pods name); a line
    no entry knows is quoted as unrecognised, and the operator is run again."""
    if said.match is None:
        cause = f"{_missing(ctx, where)}, so the {link} link is missing on every node; the " + (
            "operator says why (its log or its ClusterPolicy's status) in words gpuchain's catalog does not know "
            "(quoted as unrecognised)."
            if said.unknown
            else "operator is not reconciling (stopped, failing, or given no ClusterPolicy) and says no cause "
            "(its log, or its ClusterPolicy's status)."
        )
        return cause, restart[0], restart[1], list(said.evidence)
    entry = said.match.entry
    cause = f"{where} does not exist, so the {link} link is missing on every node: the operator says why: {entry.cause}"
    down = nfd_down(ctx, view=view, label=NFD_GPU_LABELS[0]) if said.about_nfd else None
    if down is not None:
        return f"{cause} Here: {down.cause}.", down.fix, down.action, [*said.evidence, *down.evidence]
    unserved = api_repair(ctx, line=said.match.line, namespace=ctx.namespace) if entry.id == API_NOT_SERVED else None
    if unserved is not None:
        return f"{where} does not exist: {unserved.cause}", unserved.fix, None, [*said.evidence, *unserved.evidence]
    return cause, "# " + entry.repair(view.name, namespace=ctx.namespace), None, list(said.evidence)


def _missing(ctx: Context, where: str) -> str:
    """How a missing operand DaemonSet is known to be wanted: the policy enables it, or (with no ClusterPolicy to
    read) the operator has deployed no operand at all while the node announces no GPU (`_halted`)."""
    if ctx.policy_unknown:
        return (
            f"{where} does not exist, nor does any other operand DaemonSet of the operator, while this GPU node "
            f"announces no GPU ({NO_POLICY} to say what it enables)"
        )
    return f"{where} does not exist although the policy enables it"


def _operator_pod(name: str) -> bool:
    """NVIDIA's operator Deployment is ``gpu-operator`` (pods gpu-operator-<hash>-<id>), gpuchain's
    ``gpuchain-operator``."""
    return name.startswith(("gpu-operator-", "gpuchain-operator-")) and "node-feature-discovery" not in name


#: The admission plugin's refusal of a pod the namespace's Pod Security level forbids (kubernetes
#: staging/src/k8s.io/pod-security-admission/admission/admission.go@v1.34.4: "violates PodSecurity %q: %s").
POD_SECURITY = "violates PodSecurity"
ENFORCE = "pod-security.kubernetes.io/enforce"


def _not_created(ctx: Context, view: NodeView, ds: Obj, link: str) -> Result | None:
    """The DaemonSet selects and tolerates this node but has no pod on it, and its controller says why: it
    cannot create the pod (a Warning ``FailedCreate`` Event on the DaemonSet, ``Error creating: pods "..." is
    forbidden: ...``, kubernetes pkg/controller/daemon). A restart changes nothing: the API refuses every
    pod the DaemonSet makes. None when no such Event is listed."""
    ns, name = (namespace_of(ds) or ctx.namespace), name_of(ds)
    said = next(
        (
            str(e.get("message", ""))
            for e in ctx.snapshot.events
            if e.get("reason") == "FailedCreate"
            and (e.get("involvedObject") or {}).get("kind") == "DaemonSet"
            and (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("namespace", ns) == ns
        ),
        "",
    )
    if not said:
        return None
    status = ds.get("status") or {}
    counts = (
        f"DaemonSet {ns}/{name}: desired {status.get('desiredNumberScheduled', '?')}, "
        f"current {status.get('currentNumberScheduled', '?')}, ready {status.get('numberReady', '?')}"
    )
    action = None
    fix = f"# no change gpuchain can name for this refusal; {name} retries by itself once the API accepts its pods"
    if POD_SECURITY in said:
        action = Fix(
            FixOp.LABEL_NAMESPACE,
            ns,
            {ENFORCE: "privileged", NOT_SIMULATED: "Pod Security admission is not simulated"},
        )
        fix = ctx.stack.render(action) + f"   # the GPU operands need privileged pods; {name} creates them next sync"
    return Result(
        LinkState.BROKEN,
        f"{name} cannot create its pod",
        (
            node_finding(
                view,
                fid="operand.not-created",
                sev=Severity.ERROR,
                link=link,
                cause=f"{name} selects and tolerates this node, but the API server refuses the pod it creates for it, "
                f"so the {link} link has no pod here; restarting the DaemonSet changes nothing.",
                evidence=[
                    f"{name} has no pod on {view.name}",
                    counts,
                    f"event FailedCreate (daemonset-controller): {said}",
                ],
                fix=fix,
                action=action,
            ),
        ),
    )


def elsewhere_unplaced(ctx: Context, *, view: NodeView, operand: Operand, link: str) -> Result | None:
    """A release of ``operand`` in another namespace (`Stack.elsewhere`: the device plugin's chart, NVIDIA's
    DRA kubelet plugin, dcgm-exporter's or GFD's own chart) that a taint of this GPU node keeps off it, where
    the stack does not deploy the operand itself: the tolerations for exactly those taints, on that
    DaemonSet. None when no such release is kept off by a taint (a selector may keep it off on purpose)."""
    if view.pod(operand) is not None:
        return None
    for ds in ctx.snapshot.daemonsets:
        ns, name = namespace_of(ds), name_of(ds)
        block = blocker(ds, view.node) if ctx.stack.elsewhere.get(f"{ns}/{name}") == operand.state else None
        if block is None or block.kind != "taint":
            continue
        desired = (ds.get("status") or {}).get("desiredNumberScheduled", "?")
        return _not_scheduled(
            ctx,
            view,
            ds,
            block,
            link,
            f"{ns}/{name} runs the {link} link's component but places no pod on this GPU node",
            f"DaemonSet {ns}/{name} has no pod on {view.name} (desired {desired})",
        )
    return None


#: DaemonSets an EKS add-on renders, by their container's name (the chart's ``{{ .Chart.Name }}-dcgm``), with the
#: add-on and the configuration value that sets their tolerations: the EKS node monitoring agent's dcgm-server, whose
#: chart renders ``dcgmAgent.tolerations`` since "Add dcgm agent tolerations with default value"
#: (aws/eks-node-monitoring-agent 92366c7, charts/configuration.schema.json), the repair of
#: aws/containers-roadmap#2567. The add-on manager puts back a DaemonSet patched by hand when it updates the add-on.
ADDON_TOLERATIONS = {"eks-node-monitoring-agent-dcgm": ("eks-node-monitoring-agent", "dcgmAgent")}


def _addon_tolerations(ds: Obj, tolerations: object) -> str:
    """The add-on configuration that gives ``ds`` ``tolerations``, where an EKS add-on renders it ("" otherwise)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    for c in spec.get("containers") or ():
        known = ADDON_TOLERATIONS.get(str(c.get("name", "")))
        if known:
            addon, key = known
            values = json.dumps({key: {"tolerations": tolerations}}, separators=(",", ":"))
            return (
                f"; the add-on puts a hand patch back, so set it in the add-on's configuration: aws eks update-addon "
                f"--cluster-name <cluster> --addon-name {addon} --configuration-values '{values}' (or helm upgrade "
                f"--set of {key}.tolerations where its chart is installed with Helm)"
            )
    return ""


def _not_scheduled(ctx: Context, view: NodeView, ds: Obj, block: Blocker, link: str, what: str, no_pod: str) -> Result:
    """``operand.not-scheduled``: ``ds`` places no pod on this node for ``block``, with the change that lets
    it in; ``what`` says whose DaemonSet it is, ``no_pod`` is the evidence line."""
    action = placement_fix(ctx, view=view, ds=ds, block=block)
    fix = ctx.stack.render(action)
    if block.kind == "taint":
        # The merge patch repeats the tolerations the DaemonSet has: say which ones it adds.
        taints = ", ".join(taint_text(t) for t in block.taints or (block.detail,))
        fix += f"   # adds tolerations for the node's taints {taints} to the ones it has" + _addon_tolerations(
            ds, tolerations_for(block)
        )
    return Result(
        LinkState.BROKEN,
        f"{name_of(ds)} places no pod here",
        (
            node_finding(
                view,
                fid="operand.not-scheduled",
                sev=Severity.ERROR,
                link=link,
                cause=f"{what} ({block.describe()}), so the {link} link is missing here.",
                evidence=[no_pod, block.describe()],
                fix=fix,
                action=action,
            ),
        ),
    )


def _nothing_deployed(ctx: Context) -> bool:
    """Does the stack's namespace hold no operand DaemonSet at all: the operator has deployed none of them (the
    cluster's answer, worked out once a diagnosis: every GPU node's missing operands ask it)."""
    if "nothing_deployed" not in ctx.memo:
        ctx.memo["nothing_deployed"] = not any(
            ctx.stack.operand_of(n) for n in daemonsets_in(ctx.snapshot, ctx.namespace)
        )
    return bool(ctx.memo["nothing_deployed"])


def _halted(ctx: Context, operator: Obj | None, view: NodeView) -> bool:
    """Where the source has no ClusterPolicy: has the running operator deployed no operand at all, while its log
    names the step it fails at (a catalog entry of the operator's) or this GPU node offers no GPU? Its reconcile then
    stops before any operand: the controller returns a step's error and requeues, never reaching the states after it
    (NVIDIA/gpu-operator controllers/clusterpolicy_controller.go@v1.11.1 Reconcile, ``step()``), or it has no
    ClusterPolicy to reconcile; so whatever the policy enables, a missing operand is the operator's doing. The node's
    own capacity is the state-only half: a policy that switched every operand off is one whose nodes' GPUs something
    else announces, and a GPU node that announces none while the operator has deployed nothing is waiting on it,
    whatever words (known to the catalog or not) its log holds."""
    if operator is None or not _nothing_deployed(ctx):
        return False
    said = said_by_operator(ctx)
    if said is not None and said.match is not None:
        return True
    return pod_state(operator).ready and not any(n > 0 for n in node_gpu_resources(view.node).values())


def unscheduled(ctx: Context, *, view: NodeView, operand: Operand, link: str) -> Result | None:
    """An enabled operand that should run here but has no pod: its DaemonSet is missing, or a taint
    or selector keeps it off the node (named, with the change that lets it in)."""
    if opted_out(view, operand) or view.pod(operand) is not None:
        return None
    if view.labels.get(deploy_label(operand)) == PAUSED_FOR_MIG_CHANGE:
        return None
    paused = paused_for_driver(ctx, view=view, operand=operand, link=link)
    if paused is not None:
        return paused
    if not ctx.policy_unknown and not enabled(ctx.policy, operand):
        return elsewhere_unplaced(ctx, view=view, operand=operand, link=link)
    ds = operand_daemonset(ctx, operand)
    name = name_of(ds) if ds is not None else ctx.ds(operand)
    operator = operator_pod(ctx) if ds is None else None
    if operator is not None and not pod_state(operator).ready:
        # Whatever the policy enables, an operator that does not run has deployed nothing.
        return _operator_down(ctx, view, operator, name, link)
    if ds is None and ctx.policy_unknown and not _halted(ctx, operator, view):
        return dra_served(ctx, view, operand) or Result(
            LinkState.NOT_JUDGED,
            f"not judged: no {name} DaemonSet, and {NO_POLICY} to say whether spec.{operand.spec_key}.enabled",
        )
    where = f"DaemonSet {ctx.namespace}/{name}"
    if ds is None:
        install = ctx.stack.operand_install.get(operand.state)
        switch = f"spec.{operand.spec_key}.enabled=true" if ctx.policy_obj is not None else ""
        action, fix, more = (None, f"# {install}", []) if install else restart_operator(ctx, operator)
        cause = (
            f"{where} does not exist, so no {link} runs on this node: on {ctx.stack.title} no operator makes it, it "
            "is deployed with the cluster and was removed or never came."
            if install
            else f"{_missing(ctx, where)}, so the {link} link is missing on every node: the operator is not "
            "reconciling (stopped, failing, or given no ClusterPolicy)."
        )
        said = None if install or operator is None else said_by_operator(ctx)
        if said is not None:
            cause, fix, action, said_lines = _operator_reason(
                ctx, view, said, where=where, link=link, restart=(fix, action)
            )
            more = [*more, *said_lines]
        handed = _no_nvidiadriver(ctx, view) if operand is DRIVER and not install else None
        if handed is not None:
            cause, fix, action, more = handed[0], handed[1], None, [*more, *handed[2]]
        return Result(
            LinkState.BROKEN,
            f"no {name} DaemonSet",
            (
                node_finding(
                    view,
                    fid="operand.not-deployed",
                    sev=Severity.ERROR,
                    link=link,
                    cause=cause,
                    evidence=[f"{where} does not exist", "" if install else switch, *more],
                    fix=fix,
                    action=action,
                ),
            ),
        )
    block = blocker(ds, view.node)
    created = _not_created(ctx, view, ds, link) if block is None else None
    if created is not None:
        return created
    unlabelled = operator_unlabelled(ctx, view=view, block=block, name=name, link=link, operator=operator_pod(ctx))
    if unlabelled is not None or block is None:
        return unlabelled
    image = node_image(view.node) if operand is DRIVER else None
    if image is not None and image.ships_driver and any(n > 0 for n in node_gpu_resources(view.node).values()):
        # A driver DaemonSet kept off a node whose image brings the driver (GKE's installers select the nodes
        # without gke-gpu-driver-version), and the node announces its GPUs: the image's driver serves here.
        return Result(LinkState.OK, f"the {image.cloud} node image's driver ({', '.join(image.said)})")
    if block.kind == "selector" and block.detail.get("key") in (*NFD_GPU_LABELS, GPU_PRESENT):
        return _nfd_missing(ctx, view, name, block, link)
    if block.kind == "selector" and _deploy_label_from_nfd(ctx, view, str(block.detail.get("key"))):
        nfd = Blocker(kind="selector", detail={"key": NFD_GPU_LABELS[0], "values": ["true"], "operator": "In"})
        return _nfd_missing(ctx, view, name, nfd, link, via=f"{block.describe()} (set from {NFD_GPU_LABELS[0]})")
    return _not_scheduled(
        ctx,
        view,
        ds,
        block,
        link,
        f"{name} is enabled but places no pod on this node",
        f"{where} has no pod on {view.name}",
    )
