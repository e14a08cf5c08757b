"""The exporter link: the dcgm-exporter pod, a second release beside the stack's, and the failures
dcgm-exporter names in its log."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, Result, node_finding
from gpuchain.doctor.links.exporter_nvml import started_before_driver
from gpuchain.doctor.links.exporter_ready import serving_unprobed
from gpuchain.doctor.links.exporter_root import host_engine_not_root
from gpuchain.doctor.links.exporter_sidecars import sidecar_unlabelled
from gpuchain.doctor.links.metrics import unsupported_fields
from gpuchain.doctor.links.not_ready import known_not_ready
from gpuchain.doctor.links.operand import simple, without_plugins_runtime_class
from gpuchain.doctor.links.releases import with_release
from gpuchain.doctor.links.unprivileged_envvar import unprivileged_gpu
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER

LINK, WHAT = "exporter", "dcgm-exporter"
#: NVIDIA's published dcgm-exporter image (it bundles DCGM), as gpu-operator's values name it.
DCGM_EXPORTER_IMAGE = {
    "repository": "nvcr.io/nvidia/k8s",
    "image": "dcgm-exporter",
    "version": "3.3.9-3.6.1-ubuntu22.04",
}


#: dcgm-exporter's fatal lines (NVIDIA/dcgm-exporter pkg/cmd/app.go "Failed to watch metrics", and
#: DCGM's own error strings it wraps; catalog.yaml), each with what repairs it.
EXPORTER_PROFILING_RACE = "dcgm.profiling-library-error"
EXPORTER_NO_PROFILING = ("dcgm.module-not-loaded", "dcgm.profiling-not-supported")
EXPORTER_NO_NVML = "dcgm.init-error"
#: DCGM's "Feature not supported" for a field of the metrics CSV this GPU does not serve (catalog.yaml).
EXPORTER_UNSUPPORTED = "dcgm.feature-not-supported"
#: The words of an exporter whose container has no NVML library (catalog.yaml): the NVIDIA runtime did not
#: inject the driver's libraries into it.
NVML_NOT_INJECTED = ("dcgm-exporter.nvml-init", "go-nvlib.nvml-not-loaded")


def _stack_exporter_on(ctx: Context, node: str) -> str:
    """The stack's own exporter pod on ``node`` ("" when it runs none there)."""
    mine = ctx.ds(DCGM_EXPORTER)
    return next(
        (
            name_of(p)
            for p in ctx.snapshot.pods
            if (p.get("metadata") or {}).get("namespace") == ctx.namespace
            and (p.get("spec") or {}).get("nodeName") == node
            and owner_ds(p) == mine
        ),
        "",
    )


#: The exporter's listen address in the form its release does not read (catalog.yaml), and the value that
#: form takes from the rejected one: a bare port gets the colon host:port needs, a host:port loses all but the
#: port for a release that reads a port number. The address Go rejects is quoted in its net.AddrError.
LISTEN_FORMS: dict[str, Callable[[str], str]] = {
    "go.listen-missing-port": lambda v: f":{v}",
    "urfave-cli.listen-not-a-port": lambda v: v.rpartition(":")[2],
}
LISTEN_VALUE = re.compile(r'address (\S+): missing port|could not parse \\?"([^"\\]+)\\?" as int')
LISTEN_ENV = "DCGM_EXPORTER_LISTEN"


def _listen_form(ctx: Context, pod: Obj, log: str) -> Known | None:
    """A listen address the exporter's release cannot read: the exact DCGM_EXPORTER_LISTEN value it takes, set
    where the exporter's env comes from (the policy for the stack's own exporter, else its DaemonSet)."""
    found = catalog.find(log, *LISTEN_FORMS)
    given = LISTEN_VALUE.search(found.line) if found else None
    if found is None or given is None:
        return None
    value = LISTEN_FORMS[found.entry.id](given.group(1) or given.group(2))
    ns = namespace_of(pod) or ctx.namespace
    if ns == ctx.namespace and ctx.policy_obj is not None and ctx.stack.policy_names_images:
        keep = [{"name": e.name, "value": e.value} for e in ctx.policy.dcgm_exporter.env if e.name != LISTEN_ENV]
        env = [*keep, {"name": LISTEN_ENV, "value": value}]
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"dcgmExporter": {"env": env}}})
    else:
        action = Fix(FixOp.SET_ENV, f"{ns}/{owner_ds(pod) or ctx.ds(DCGM_EXPORTER)}", {"env": {LISTEN_ENV: value}})
    return Known(
        cause=found.entry.cause,
        evidence=found.evidence(),
        action=action,
        fix=ctx.stack.render(action) + f'   # {LISTEN_ENV}="{value}" (or -a {value} where its args set the address)',
    )


def _exporter_failure(ctx: Context, view: NodeView, pod: Obj, state: PodState, log: str) -> Known | None:
    listen = _listen_form(ctx, pod, log)
    if listen is not None:
        return listen
    ns = namespace_of(pod) or ctx.namespace
    own = _stack_exporter_on(ctx, view.name) if ns != ctx.namespace and ctx.stack.elsewhere else ""
    if own and owner_ds(pod):
        # Two exporters on one node each start a DCGM host engine on the same GPUs; the stack's own
        # already serves the node's metrics, so the second release is the one to remove.
        ds = owner_ds(pod)
        release = (pod.get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/instance") or ds
        remove = Fix(FixOp.DELETE, f"{ns}/{ds}", {"kind": "DaemonSet", "namespace": ns, "name": ds})
        said = catalog.known_error(log)
        return Known(
            cause=f"a second dcgm-exporter release (DaemonSet {ns}/{ds}) runs beside {ctx.stack.title}'s own exporter "
            f"({own}) on this node; both drive DCGM on the same GPUs (its profiling module serves one), and the "
            "second one fails.",
            evidence=(
                *(said.evidence() if said else ()),
                f"DaemonSet {ns}/{ds}; the stack's exporter pod {own} runs here",
            ),
            action=remove,
            fix=ctx.stack.render(Fix(FixOp.UNINSTALL, release, {"release": release, "namespace": ns}))
            + f"   # the second release; or: {ctx.stack.render(remove)}",
        )
    not_root = host_engine_not_root(ctx, pod=pod, log=log)
    if not_root is not None:
        return not_root
    unprivileged = unprivileged_gpu(ctx, view=view, pod=pod, log=log)
    if unprivileged is not None:  # a runtime that injects no GPU here whatever the RuntimeClass
        return unprivileged
    # DCGM's own "initialization error" is the same missing NVML one level up (its host engine loads NVML first), so
    # it too is read against the plugin's RuntimeClass before the driver-root mount below.
    not_injected = without_plugins_runtime_class(
        ctx, view=view, pod=pod, log=log, what=WHAT, nvml_ids=(*NVML_NOT_INJECTED, EXPORTER_NO_NVML)
    )
    if not_injected is not None:
        return not_injected
    found = catalog.find(log, EXPORTER_PROFILING_RACE)
    if found:
        action = Fix.delete_pod(ns, state.name)
        return Known(
            cause="dcgm-exporter lost a start-up race with DCGM's profiling module (NVIDIA/dcgm-exporter#330) and "
            "exited; a new pod starts cleanly.",
            evidence=(*found.evidence(), f"DaemonSet in namespace {ns}"),
            action=action,
            fix=ctx.stack.render(action) + "   # its DaemonSet starts a new one",
        )
    found = catalog.find(log, *EXPORTER_NO_PROFILING, EXPORTER_UNSUPPORTED)
    if found:
        return unsupported_fields(ctx, pod=pod, state=state, found=found)
    found = catalog.find(log, EXPORTER_NO_NVML)
    if found and ctx.stack.driver_root:
        return Known(
            cause=f"dcgm-exporter cannot load NVML: this stack installs the driver under {ctx.stack.driver_root} on "
            "the host, and the exporter's pod neither mounts it nor runs privileged.",
            evidence=(*found.evidence(), f"DaemonSet in namespace {ns}"),
            action=None,
            fix=f"mount the host's {ctx.stack.driver_root} into the exporter (hostPath volume, with its lib64 on "
            "LD_LIBRARY_PATH) and run it privileged (securityContext.privileged: true)",
        )
    return None


def _not_ready(ctx: Context, view: NodeView, pod: Obj, state: PodState, log: str) -> Result | None:
    """The exporter's own failures: a second release beside the stack's, a failure its log names with a
    repair, or an image without DCGM (None: none of these)."""
    known = _exporter_failure(ctx, view, pod, state, log)
    if known is not None:
        known = with_release(ctx, view=view, pod=pod, operand=DCGM_EXPORTER, known=known, log=log)
        return known_not_ready(view, link=LINK, what=WHAT, state=state, known=known)
    serving = serving_unprobed(view, pod, state, log)
    if serving:
        # Serving, only not marked ready yet (links/exporter_ready): not a failure.
        return Result(LinkState.OK, f"{WHAT} Running: {serving}")
    found = catalog.find(log, "dcgm-exporter.libdcgm-not-found", "dcgm.libdcgm-not-found")
    if not found:
        return None
    # dcgm-exporter's own image bundles DCGM; an image without it never starts collecting.
    cause = f"the {WHAT} pod is {state.status}: its image has no DCGM library, so it can serve no GPU metrics."
    if ctx.policy_obj is not None and ctx.stack.policy_names_images:
        image = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"dcgmExporter": dict(DCGM_EXPORTER_IMAGE)}})
        action: Fix | None = image
        fix = ctx.stack.render(image)
    else:
        action = None
        fix = f"run an exporter image that bundles DCGM ({'/'.join(DCGM_EXPORTER_IMAGE.values())})"
    return Result(
        LinkState.BROKEN,
        f"{WHAT} {state.status}",
        (
            node_finding(
                view,
                fid=f"{LINK}.not-ready",
                sev=Severity.ERROR,
                link=LINK,
                cause=cause,
                evidence=[state.describe(), *found.evidence()],
                fix=fix,
                action=action,
            ),
        ),
    )


def check_exporter(ctx: Context, view: NodeView) -> Result:
    """Metrics exporter: its pod (a Running, ready pod serves /metrics on :9400), then, where it serves, whether it
    can label the GPUs the node's native sidecars hold (links/exporter_sidecars)."""
    result = simple(ctx, view=view, operand=DCGM_EXPORTER, link=LINK, what=WHAT, failing=_not_ready)
    if result.state is not LinkState.OK:
        return result
    return started_before_driver(ctx, view) or sidecar_unlabelled(ctx, view) or result
