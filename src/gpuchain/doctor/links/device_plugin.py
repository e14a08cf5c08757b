"""The device plugin link: the walk over its config, its pod and its registration (the node's capacity), each
answer in the module of what it decides (plugin_config: its settings and MIG strategy; plugin_capacity: registration
and the numbers; plugin_health: GPUs it took out); a release with a known restart defect; and plugin pods placed on
nodes with no GPU."""

from __future__ import annotations

from gpuchain.common.labels import PAUSED_FOR_MIG_CHANGE
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import (
    NVML_FOUND,
    Result,
    node_finding,
    off_gpu_nodes,
    operand_daemonset,
    operand_log,
    opted_out,
)
from gpuchain.doctor.links.deployed import elsewhere_unplaced, unscheduled
from gpuchain.doctor.links.dra_plugin import check_dra_plugin, check_gpuchain_dra, stale_dra_plugin
from gpuchain.doctor.links.mig import mig_finding
from gpuchain.doctor.links.not_ready import not_ready
from gpuchain.doctor.links.plugin_capacity import count_findings, not_registered
from gpuchain.doctor.links.plugin_config import MIG_EMPTY, config_missing, mig_empty, mig_invalid, no_sys_admin
from gpuchain.doctor.links.plugin_disabled import disabled_in_policy
from gpuchain.doctor.links.plugin_rename import rename_ignored
from gpuchain.doctor.links.releases import set_release
from gpuchain.doctor.links.toolkit import (
    NO_NVML,
    NVML_DEVICES_DENIED,
    devices_denied,
    needs_sys_admin,
    nvml_evidence,
    runtime_not_default,
)
from gpuchain.doctor.model import Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import defect, image_version
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.doctor.stacks.base import gpu_node_term, is_dra_plugin, is_gpu_node
from gpuchain.kube.allocator import DRA, allocator_of
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, deploy_label, enabled


def check_device_plugin(ctx: Context, view: NodeView) -> Result:
    """Device plugin: config label, pod state, registration (node capacity) and the numbers."""
    missing = config_missing(ctx, view)
    if missing is not None:
        return Result(LinkState.BROKEN, "config label names a missing config", (missing,))
    pod = view.pod(DEVICE_PLUGIN)
    capacity, allocatable = node_gpu_resources(view.node), node_gpu_resources(view.node, "allocatable")
    announced = {k: v for k, v in capacity.items() if v > 0}
    invalid_product = view.labels.get(PRODUCT, "").endswith("-MIG-INVALID")
    state = pod_state(pod) if pod is not None else None
    log = (
        operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=state.container, last=state.last_log)
        if state
        else ""
    )
    if pod is not None and state is not None and is_dra_plugin(pod):
        return check_dra_plugin(ctx, view=view, pod=pod, state=state, log=log)
    nvml = catalog.find(log, *NO_NVML)
    mig_line = catalog.find(log, "k8s-device-plugin.invalid-mig-configuration")
    empty = catalog.find(log, *MIG_EMPTY)
    if pod is None:
        if view.labels.get(deploy_label(DEVICE_PLUGIN)) == PAUSED_FOR_MIG_CHANGE:
            mig = mig_finding(ctx, view)
            return Result(LinkState.BROKEN, "paused for a MIG change", (mig,) if mig else ())
        if opted_out(view, DEVICE_PLUGIN) or not enabled(ctx.policy, DEVICE_PLUGIN):
            foreign = elsewhere_unplaced(ctx, view=view, operand=DEVICE_PLUGIN, link="device-plugin")
            return (
                foreign
                or stale_dra_plugin(ctx, view)
                or disabled_in_policy(ctx, view)
                or Result(LinkState.SKIPPED, "device plugin not deployed here")
            )
        absent = unscheduled(ctx, view=view, operand=DEVICE_PLUGIN, link="device-plugin") if not announced else None
        if absent is not None:
            return absent
    elif state is not None and empty:
        return mig_empty(ctx, view=view, evidence=[state.describe(), *empty.evidence()], said=empty.entry.id)
    elif state is not None and (mig_line or (invalid_product and not announced)):
        return mig_invalid(ctx, view=view, evidence=[state.describe(), *(mig_line.evidence() if mig_line else ())])
    elif state is not None and not announced and (denied := catalog.find(log, NVML_DEVICES_DENIED)):
        return devices_denied(ctx, view=view, evidence=[state.describe(), *denied.evidence()])
    elif state is not None and nvml and not announced and pod is not None and (needs := needs_sys_admin(pod, log)):
        evidence = nvml_evidence(state, nvml=nvml, log=log)
        return no_sys_admin(ctx, view=view, pod=pod, state=state, needs=needs, evidence=evidence)
    elif state is not None and nvml and not announced and NVML_FOUND not in log:  # found: the runtime gave it
        return runtime_not_default(ctx, view=view, evidence=nvml_evidence(state, nvml=nvml, log=log))
    elif state is not None and not state.ready:
        return not_ready(
            ctx,
            view=view,
            operand=DEVICE_PLUGIN,
            link="device-plugin",
            what="device plugin pod",
            state=state,
            log=log,
            cause=f"the device plugin pod is {state.status}, so the kubelet gets no GPU devices.",
        )
    defective = _defective_release(ctx, view, pod) if pod is not None and state is not None and state.ready else None
    if defective is not None:
        return defective
    if not announced and allocator_of(view.node) == DRA:  # kube.allocator: none by design
        return check_gpuchain_dra(ctx, view)
    if not announced:
        pending = _spec_unobserved(ctx, view) if state is None else None
        return pending or not_registered(ctx, view=view, state=state, log=log, capacity=capacity)
    findings = count_findings(ctx, view=view, capacity=capacity, allocatable=allocatable)
    summary = ", ".join(
        f"{k.removeprefix('nvidia.com/')} {allocatable.get(k, v)}/{v}" for k, v in sorted(capacity.items())
    )
    renamed = rename_ignored(ctx, view)
    if renamed is not None and renamed.severity is Severity.ERROR:
        return Result(LinkState.BROKEN, f"{summary}; the config's rename is ignored", (renamed, *findings))
    findings = [*findings, *([renamed] if renamed is not None else [])]
    errors = [f for f in findings if f.severity is not Severity.INFO]
    return Result(LinkState.DEGRADED if errors else LinkState.OK, summary, tuple(findings))


def plugin_off_gpu_nodes(ctx: Context) -> list[Finding]:
    """Device plugin pods failing on nodes with no NVIDIA GPU: the DaemonSet selects no GPU nodes, so it
    lands where no driver can be (the runtime hook fails, NVML finds nothing). The repair is the DaemonSet's
    placement, not the node: an affinity the GPU nodes match."""
    others, placed = off_gpu_nodes(ctx)
    if not others:
        return []  # every node a GPU node (most GPU clusters' node lists): no second pass over them
    gpu_nodes = [n for n in ctx.snapshot.nodes if is_gpu_node(n)]
    if not gpu_nodes:
        return []
    out = []
    for pod in placed:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        owner = owner_ds(pod)
        if not owner:
            continue
        if DEVICE_PLUGIN.state not in ctx.stack.operands_in(str(meta.get("namespace") or ""), owner):
            continue
        state = pod_state(pod)
        term = gpu_node_term(gpu_nodes, others[str(node)]) if state.failing else None
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
        view = NodeView(
            name=str(node),
            node=others[str(node)],
            labels=labels_of(others[str(node)]),
            operand_pods={},
            workloads=[],
            events=[],
        )
        out.append(
            node_finding(
                view,
                fid="device-plugin.off-gpu-node",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=f"the device plugin's DaemonSet {ns}/{owner} places a pod on {node}, a node with no NVIDIA GPU "
                "(no GPU label, capacity or GPU instance type), where it cannot start: its DaemonSet selects nodes by "
                "no GPU label, so it lands on every node its selector matches.",
                evidence=[
                    state.describe(),
                    *(said.evidence("runtime says") if said else ()),
                    f"GPU nodes: {', '.join(sorted(name_of(n) for n in gpu_nodes)[:5])}",
                ],
                fix=ctx.stack.render(action)
                + "   # a node affinity only the GPU nodes match (or a label of your own on the GPU nodes, such as "
                "gpu=true, in its nodeSelector)",
                action=action,
            )
        )
    return out


def _defective_release(ctx: Context, view: NodeView, pod: Obj) -> Result | None:
    """A plugin that runs ready but restarted after runs that ended in error, on a release whose own notes name
    that defect (releases.yaml): the release that fixed it is the repair, not another restart. The images are read
    only for a container that restarted after an error (most plugins never did: one per node)."""
    images: dict[str, str] | None = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if not (cs.get("restartCount") and last.get("exitCode")):
            continue
        if images is None:
            containers = (pod.get("spec") or {}).get("containers") or []
            images = {str(c.get("name")): str(c.get("image", "")) for c in containers}
        image = images.get(str(cs.get("name")), "")
        name, tag = image_version(image)
        found = defect(name, tag, "restarts")
        if found is None:
            continue
        fixed = f"{image.rpartition(':')[0]}:{found.fixed_in}"
        action, fix = set_release(ctx, pod=pod, operand=DEVICE_PLUGIN, container=str(cs.get("name")), image=fixed)
        return Result(
            LinkState.DEGRADED,
            f"device plugin {tag} restarts: a known defect of that release",
            (
                node_finding(
                    view,
                    fid="device-plugin.known-defect",
                    sev=Severity.ERROR,
                    link="device-plugin",
                    cause=f"the device plugin {tag} runs but keeps restarting ({cs.get('restartCount')} restarts, the "
                    f"last run ended with exit code {last.get('exitCode')}): {found.cause}",
                    evidence=[
                        f"pod {name_of(pod)}: {image}, {cs.get('restartCount')} restarts, last terminated "
                        f"{last.get('reason') or 'Error'} (exit {last.get('exitCode')})",
                        f"release note: {found.line}",
                        found.cite(),
                    ],
                    fix=fix + f"   # {found.fixed_in}, the release that fixed it (and the chart's image.tag where "
                    "a Helm release renders it)",
                    action=action,
                ),
            ),
        )
    return None


def _spec_unobserved(ctx: Context, view: NodeView) -> Result | None:
    """No plugin pod on a node its DaemonSet admits, while the DaemonSet's controller has not yet observed its latest
    spec (``metadata.generation`` above ``status.observedGeneration``, what ``kubectl rollout status`` waits on with
    "Waiting for daemon set spec update to be observed"): its counts, and the missing pod, are of the spec before the
    last edit (a toleration or selector just added), so the empty capacity is a rollout not yet made, not a plugin
    that failed to register. A warning, with the wait that settles it; the doctor run again then judges the pod."""
    ds = operand_daemonset(ctx, DEVICE_PLUGIN)
    if ds is None:
        return None
    generation = ds["metadata"].get("generation")
    observed = (ds.get("status") or {}).get("observedGeneration")
    if not isinstance(generation, int) or not isinstance(observed, int) or observed >= generation:
        return None
    namespace = ds["metadata"].get("namespace") or ctx.namespace
    return Result(
        LinkState.DEGRADED,
        "plugin DaemonSet spec not yet observed",
        (
            node_finding(
                view,
                fid="device-plugin.not-registered",
                sev=Severity.WARNING,
                link="device-plugin",
                cause=(
                    f"no device plugin pod runs here and the capacity announces no GPU yet, but {name_of(ds)}'s "
                    "controller has not observed its latest spec: its pods and counts are of the spec before the "
                    "last change, so the plugin is still to be rolled out here rather than failed."
                ),
                evidence=[
                    f"{name_of(ds)}: metadata.generation {generation}, status.observedGeneration {observed}",
                    f"node {view.name} capacity: no nvidia.com/* resource",
                ],
                fix=f"kubectl -n {namespace} rollout status daemonset/{name_of(ds)}   # then run the doctor again",
            ),
        ),
    )
