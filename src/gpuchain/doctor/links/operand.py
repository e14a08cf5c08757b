"""An operand link that is one DaemonSet pod per node (feature discovery, the exporter): placed or
not, running (but failing at its work, by its log) or failing."""

from __future__ import annotations

from collections.abc import Callable

from gpuchain.common.labels import PAUSED_FOR_MIG_CHANGE
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, Result, node_finding, operand_log
from gpuchain.doctor.links.deployed import unscheduled
from gpuchain.doctor.links.not_ready import known_not_ready, not_ready
from gpuchain.doctor.links.pod_failures import oom_restarting
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.siblings import read_sibling
from gpuchain.doctor.stacks.base import daemonsets_in
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, Operand, deploy_label

#: The finding of an operand that runs ready while its log says its own work fails, by link.
RUNNING_WITH_ERRORS = {"exporter": "exporter.running-with-errors", "gfd": "gfd.running-with-errors"}


def _running_with_errors(ctx: Context, view: NodeView, pod: Obj, link: str, what: str) -> Result | None:
    """A ready pod whose log (read for one pod per troubled DaemonSet, snapshot._log_candidates) holds an
    error the catalog knows for this pod's own link: it runs, but its product (metrics, labels) is not made. A pod
    whose log was not read says what a read sibling of its DaemonSet says, from one template on a node built alike
    (`siblings`): the fault of the template is in every pod of it."""
    finding_id = RUNNING_WITH_ERRORS.get(link)
    if finding_id is None or not ctx.logs_read:
        return None  # no log was read (a healthy cluster): neither this pod nor a sibling has one to say
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    sibling = read_sibling(ctx, pod, names)
    source = sibling.pod if sibling is not None else pod
    found = catalog.known_error("\n".join(ctx.log(source, n) for n in names))
    if found is None or found.entry.link != link:
        return None
    said = "its log says its work fails"
    evidence = [f"pod {name_of(pod)}: Running", *found.evidence()]
    if sibling is not None:
        said = (
            f"its sibling {name_of(sibling.pod)} on {sibling.node}, of the same DaemonSet and template on a node "
            "built alike, says its work fails (this pod's log was not read: gpuchain reads the log of one "
            "running pod a DaemonSet)"
        )
        evidence = [
            f"pod {name_of(pod)}: Running, its log not read",
            f"pod {name_of(sibling.pod)} on {sibling.node}: same DaemonSet {owner_ds(pod)}, same template; node alike",
            *found.evidence(),
        ]
    return Result(
        LinkState.BROKEN,
        f"{what} Running, but its log says it fails",
        (
            node_finding(
                view,
                fid=finding_id,
                sev=Severity.ERROR,
                link=link,
                cause=f"the {what} pod {name_of(pod)} runs, but {said}: {found.entry.cause}",
                evidence=evidence,
                fix="# "
                + found.entry.repair(view.name, namespace=namespace_of(pod) or ctx.namespace, pod=name_of(pod)),
            ),
        ),
    )


def _runtime_class(pod: Obj | None) -> str:
    return str(((pod or {}).get("spec") or {}).get("runtimeClassName") or "")


def _plugins_runtime_class(ctx: Context, plugin: Obj | None) -> str:
    """The RuntimeClass the device plugin runs with: its pod's, else its DaemonSet template's (the pod a controller
    makes from it carries the same, and a dump may hold the template and a pod of an older revision)."""
    own = _runtime_class(plugin)
    if own or plugin is None:
        return own
    ds = daemonsets_in(ctx.snapshot, namespace_of(plugin) or ctx.namespace).get(owner_ds(plugin) or "")
    template = (((ds or {}).get("spec") or {}).get("template")) or {}
    return _runtime_class(template)


def without_plugins_runtime_class(
    ctx: Context, *, view: NodeView, pod: Obj, log: str, what: str, nvml_ids: tuple[str, ...]
) -> Known | None:
    """A consumer of the GPUs (the exporter, GFD) whose NVML cannot be loaded, read through the links below
    it: where the device plugin on the same node announces its GPUs through a RuntimeClass the consumer's
    pod does not name, the driver and the runtime work, and the consumer's own pod spec keeps the driver's
    libraries out of it; the fix is that field on its DaemonSet. None where the links below explain it."""
    found = catalog.find(log, *nvml_ids)
    plugin = view.pod(DEVICE_PLUGIN)
    wanted = _plugins_runtime_class(ctx, plugin)
    announced = any(v > 0 for v in node_gpu_resources(view.node).values())
    if plugin is None or found is None or not wanted or _runtime_class(pod) == wanted or not announced:
        return None
    if not owner_ds(pod):
        return None
    ns, ds = namespace_of(pod) or ctx.namespace, owner_ds(pod)
    action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{ds}", {"spec": {"template": {"spec": {"runtimeClassName": wanted}}}})
    return Known(
        cause=f"{what} cannot load NVML: its pod runs without RuntimeClass {wanted!r}, through which the device plugin "
        "on this node gets the driver's libraries (and announces its GPUs), so the NVIDIA runtime never injects "
        f"them into the {what} container; the driver and the runtime are fine.",
        evidence=(
            *found.evidence(),
            f"device plugin pod {name_of(plugin)}: runtimeClassName {wanted}, GPUs announced",
            f"{what} pod {name_of(pod)}: runtimeClassName {_runtime_class(pod) or 'unset'}",
        ),
        action=action,
        fix=ctx.stack.render(action) + f"   # or the {what} chart's runtimeClassName value: {wanted}",
    )


#: A link's own reading of its failing pod (pod, its state, its log): the Result, or None to leave it
#: to what every operand's failure is read by (`not_ready`).
Failing = Callable[[Context, NodeView, Obj, PodState, str], Result | None]


def simple(
    ctx: Context, *, view: NodeView, operand: Operand, link: str, what: str, failing: Failing | None = None
) -> Result:
    """An operand link that is one DaemonSet pod per node (feature discovery, the exporter): paused, not
    placed, running (with errors its log names) or failing."""
    pod = view.pod(operand)
    if pod is None:
        if view.labels.get(deploy_label(operand)) == PAUSED_FOR_MIG_CHANGE:
            return Result(LinkState.DEGRADED, "paused for a MIG change")
        missing = unscheduled(ctx, view=view, operand=operand, link=link)
        return missing or Result(LinkState.SKIPPED, f"{what} not deployed here")
    state = pod_state(pod)
    oom = oom_restarting(ctx, view, operand, pod, state) if state.ready else None
    if oom is not None:
        return known_not_ready(view, link=link, what=what, state=oom[0], known=oom[1])
    if state.ready:
        return _running_with_errors(ctx, view, pod, link, what) or Result(LinkState.OK, f"{what} Running")
    log = operand_log(ctx, view=view, operand=operand, container=state.container, last=state.last_log)
    own = failing(ctx, view, pod, state, log) if failing is not None else None
    return own or not_ready(
        ctx,
        view=view,
        operand=operand,
        link=link,
        what=what,
        state=state,
        log=log,
        cause=f"the {what} pod is {state.status}.",
    )
