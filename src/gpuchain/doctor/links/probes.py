"""An operand the kubelet kills (or holds unready) through its own probes while the container itself says nothing
wrong: the probe's timing, not the component, is what fails, so restarting it or moving its image changes nothing.

The kubelet writes each failed probe as a Warning ``Unhealthy`` Event, "Liveness probe failed: " (Readiness,
Startup) and the probe's output (kubernetes pkg/kubelet/prober/prober.go@v1.34.4, catalog kubelet.probe-failed); the
kill that follows is a Normal Event the snapshot does not list. An HTTP probe that gets no answer within
``timeoutSeconds`` (default 1) reports Go's client timeout, "context deadline exceeded (Client.Timeout exceeded while
awaiting headers)"; one sent before the server listens reports "connect: connection refused", the gRPC prober "failed
to connect service ... within". With a log that holds no error, the first is an endpoint slower than the probe waits
(DCGM's /health while the GPUs are busy), the second a probe that allows less time than the component needs to start
on this node (DCGM discovering many GPUs, a driver compiling its module): the repair is on the probe, in whatever owns
the pod's template, and in the Helm release or ClusterPolicy that renders it so the next render keeps it."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import probe_failures
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.releases import operator_repair
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import defect, showing, version_of
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER, Operand

PROBE_FAILED = "kubelet.probe-failed"
#: A probe that got no answer in time: Go's HTTP client timeout, a TCP dial timeout, an exec probe's "command timed
#: out" (pkg/probe/exec@v1.34.4), rather than one refused because nothing listens yet.
TIMED_OUT = re.compile(r"context deadline exceeded|Client\.Timeout exceeded|i/o timeout|timed out", re.IGNORECASE)
#: Nothing serves the probed port yet: refused, or the kubelet's gRPC prober that could not connect within its timeout
#: ("timeout: failed to connect service %q within %v: %+v", kubernetes pkg/probe/grpc/grpc.go@v1.34.4).
NOT_SERVING = re.compile(r"connection refused|failed to connect service", re.IGNORECASE)
#: The timeout given to a probe whose endpoint answers slower than the kubelet's default 1s: a few seconds covers an
#: exporter's health check while the GPUs are busy, and stays well under the default 10s period.
SLOW_TIMEOUT_S = 5
#: The delay dcgm-exporter's own chart gives its probes since 2.2.9-2.4.1 (NVIDIA/dcgm-exporter
#: deployment/templates/daemonset.yaml, "Bump liveness/readiness delay for resiliency on most systems"), as the
#: GPU Operator's exporter DaemonSet does (assets/state-dcgm-exporter/0800_daemonset.yaml): the floor a raised
#: delay starts from.
MIN_DELAY_S = 45
#: The first dcgm-exporter chart whose values set the probes (livenessProbe.*, readinessProbe.*; NVIDIA/dcgm-exporter
#: deployment/values.yaml@4.2.3-4.2.0); an older chart renders fixed ones.
EXPORTER_CHART_PROBES = "4.2.0"


def _raised(kind: str, probe: Obj, timed_out: bool) -> tuple[str, int]:
    """The probe field to raise and its new value: the timeout where the probe timed out, else the time it allows
    the container to start (a startup probe's failures, a liveness probe's initial delay)."""
    if timed_out:
        return "timeoutSeconds", max(SLOW_TIMEOUT_S, 2 * int(probe.get("timeoutSeconds") or 1))
    if kind == "startup":
        return "failureThreshold", 2 * int(probe.get("failureThreshold") or 3)
    return "initialDelaySeconds", max(MIN_DELAY_S, 2 * int(probe.get("initialDelaySeconds") or 0))


def _changes(failed: list[str], restarts: int) -> dict[str, bool]:
    """Each failing probe kind that explains the container's state, and whether it timed out: probes that time out
    (liveness and startup kill, readiness holds unready), or liveness/startup probes that fail otherwise (refused,
    an exec probe's non-zero exit) while the container restarts: it was cut short before it served. A readiness probe
    that fails otherwise only says the container is not serving, not why."""
    out: dict[str, bool] = {}
    for message in failed:
        kind = message.split(" ", 1)[0].lower()
        timed_out = bool(TIMED_OUT.search(message)) and not NOT_SERVING.search(message)
        if timed_out or (kind != "readiness" and restarts):
            out[kind] = out.get(kind, False) or timed_out
    return out


def probe_killed(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """The operand's container failing only its probes (timed out, or refused before it serves while it restarts)
    with a log that names no error, and the probe setting to raise; None where its log names a failure (that is the
    cause, the probe only its consequence), or no probe failed so."""
    pod = view.pod(operand)
    if pod is None or catalog.known_error(log) is not None or catalog.unknown_error(log) is not None:
        return None
    said = [(m, found) for m in probe_failures(view, pod) if (found := catalog.find(m, PROBE_FAILED)) is not None]
    kinds = _changes([m for m, _ in said], state.restarts)
    if not kinds:
        return None
    container = state.container or next(
        (str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []), ""
    )
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
    raised = {k: _raised(k, spec.get(f"{k}Probe") or {}, t) for k, t in sorted(kinds.items())}
    evidence: tuple[str, ...] = said[0][1].evidence("event")
    what = " and ".join(f"{k}Probe.{key} to {value}" for k, (key, value) in raised.items())
    allowed = ", ".join(
        f"{k} {spec.get(f'{p}Probe', {}).get(k)}"
        for p in raised
        for k in ("initialDelaySeconds", "periodSeconds", "failureThreshold", "timeoutSeconds")
        if k in (spec.get(f"{p}Probe") or {})
    )
    verb = "holds unready" if set(raised) == {"readiness"} else "kills"
    cause = (
        f"the kubelet {verb} the {container} container of {name_of(pod)} through its "
        f"{' and '.join(raised)} probe{'s' if len(raised) > 1 else ''} ({state.restarts} restarts), while its log "
        f"names no error: the probe allows less time than the component needs on this node"
        f"{f' ({allowed})' if allowed else ''}; raise {what}."
    )
    ns = namespace_of(pod) or ctx.namespace
    probes = {f"{k}Probe": {key: value} for k, (key, value) in raised.items()}
    if ns == ctx.namespace and ctx.policy_obj is not None:
        shown = tuple(d for d in showing("probe-killed") if d.by == "operator" and d.kills(container))
        fixed = operator_repair(ctx, shown=shown) if shown else None
        if fixed is not None:  # the operator release that no longer renders this probe
            return Known(
                cause=f"{cause} {fixed.cause}", evidence=(*evidence, *fixed.evidence), action=None, fix=fixed.fix
            )
        if operand is not DRIVER or "peermem" in container:
            return None  # the operator renders these probes from no setting of its ClusterPolicy: not this repair
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": probes}})
        return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": container, **probes}]}}}}
    action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{owner_ds(pod) or name_of(pod)}", patch)
    labels = (owner_daemonset(ctx, pod).get("metadata") or {}).get("labels") or {}
    if not labels.get(HELM_RELEASE):
        return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action))
    chart_name, chart, version = chart_of(ctx, labels)
    values = " ".join(f"--set {k}Probe.{key}={value}" for k, (key, value) in raised.items())
    release = defect(chart_name, version, "probe-killed")
    if release is not None:  # the chart release whose probes allow the start, the patch until then
        upgrade = f"helm upgrade {labels[HELM_RELEASE]} {chart} -n {ns} --version {release.fixed_in}"
        evidence = (*evidence, f"chart {chart_name}-{version}: {release.cause}", release.cite())
        fix = f"{upgrade} --reuse-values   # the chart release that fixes it; until then: {ctx.stack.render(action)}"
        return Known(cause=cause, evidence=evidence, action=action, fix=fix)
    if chart_name == "dcgm-exporter" and (version_of(version) or ()) < (version_of(EXPORTER_CHART_PROBES) or ()):
        note = (
            f"   # chart {version} renders fixed probes: helm upgrade {labels[HELM_RELEASE]} {chart} "
            f"--reuse-values --version {EXPORTER_CHART_PROBES} or later, then {values}"
        )
    else:
        note = f"   # and in its Helm release: {values}, so the next upgrade keeps it"
    return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action) + note)
