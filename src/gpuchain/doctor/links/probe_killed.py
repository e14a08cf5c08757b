"""An operand container the kubelet kills for its own liveness or startup probe while the component was still coming
up: its log has no error, and the kubelet's Unhealthy Events show the probe failing. Restarting it changes nothing; the
probe allows less time than the component needs on this node (DCGM discovering many GPUs, a driver compiling its
module), so the repair is the probe's allowance, in whatever owns the pod's template."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import defect, version_of
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER, Operand

PROBE_FAILED = "kubelet.probe-failed"
#: A probe that did not answer in time (Go's net/http client timeout, as the kubelet's prober quotes it, or an
#: exec probe's "command timed out"), rather than one refused because nothing listens yet.
TIMED_OUT = re.compile(r"context deadline exceeded|Client\.Timeout exceeded|timed out", re.IGNORECASE)
#: Nothing serves the probed port yet: refused, or the kubelet's gRPC prober that could not connect within its timeout
#: ("timeout: failed to connect service %q within %v: %+v", kubernetes pkg/probe/grpc/grpc.go@v1.34.4).
NOT_SERVING = re.compile(r"connection refused|failed to connect service", re.IGNORECASE)
#: The delay dcgm-exporter's own chart gives its probes since 2.2.9-2.4.1 (NVIDIA/dcgm-exporter
#: deployment/templates/daemonset.yaml, "Bump liveness/readiness delay for resiliency on most systems"), as the
#: GPU Operator's exporter DaemonSet does (assets/state-dcgm-exporter/0800_daemonset.yaml): the floor a raised
#: delay starts from.
MIN_DELAY_S = 45
#: The first dcgm-exporter chart whose values set the probes (livenessProbe.*, readinessProbe.*; NVIDIA/dcgm-exporter
#: deployment/values.yaml@4.2.3-4.2.0); an older chart renders fixed ones.
EXPORTER_CHART_PROBES = "4.2.0"


def _raised(kind: str, probe: Obj, outputs: list[str]) -> tuple[str, int]:
    """The probe field to raise and its new value: the timeout where the probe timed out, else the time it allows
    the container to start (a startup probe's failures, a liveness probe's initial delay)."""
    if any(TIMED_OUT.search(o) and not NOT_SERVING.search(o) for o in outputs):
        return "timeoutSeconds", max(5, 2 * int(probe.get("timeoutSeconds") or 1))
    if kind == "startup":
        return "failureThreshold", 2 * int(probe.get("failureThreshold") or 3)
    return "initialDelaySeconds", max(MIN_DELAY_S, 2 * int(probe.get("initialDelaySeconds") or 0))


def probe_killed(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """The operand's container restarting while its liveness or startup probe fails (the kubelet's Warning Unhealthy
    Events; the kill itself is a Normal Event the snapshot does not list) and its log names no error, with the probe
    setting to raise; None where its log names a failure (that is the cause, the probe only its consequence), or no
    such probe failed."""
    pod = view.pod(operand) or {}
    failed = [
        (e, str(e.get("message") or ""))
        for e in view.events
        if e.get("reason") == "Unhealthy" and (e.get("involvedObject") or {}).get("name") == name_of(pod)
    ]
    found = catalog.find("\n".join(m for _, m in failed), PROBE_FAILED)
    if found is None or not state.restarts or catalog.known_error(log):
        return None
    kind = found.line.split(" ", 1)[0].lower()
    # The Event names the container in its fieldPath (spec.containers{<name>}); the failing one otherwise.
    path = next((str((e.get("involvedObject") or {}).get("fieldPath") or "") for e, m in failed if m == found.line), "")
    container = path[len("spec.containers{") : -1] if path.startswith("spec.containers{") else state.container
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
    probe = spec.get(f"{kind}Probe") or {}
    outputs = [m for _, m in failed if m.lower().startswith(f"{kind} probe")]
    key, value = _raised(kind, probe, outputs)
    ns = namespace_of(pod) or ctx.namespace
    allowed = ", ".join(
        f"{k} {probe[k]}" for k in ("initialDelaySeconds", "periodSeconds", "failureThreshold") if k in probe
    )
    cause = (
        f"the kubelet kills the {container} container because its {kind} probe fails before the component serves "
        f"({state.restarts} restarts), while its log names no error: the probe allows less time than it needs to start "
        f"on this node{f' ({allowed})' if allowed else ''}, so each start is cut short and begins again."
    )
    evidence: tuple[str, ...] = found.evidence("event")
    if ns == ctx.namespace and ctx.policy_obj is not None:
        if operand is not DRIVER or "peermem" in container:
            return None  # the operator renders these probes from no setting of its ClusterPolicy: not this repair
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {f"{kind}Probe": {key: value}}}})
        return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": container, f"{kind}Probe": {key: value}}]}}}}
    action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{owner_ds(pod)}", patch)
    labels = (owner_daemonset(ctx, pod).get("metadata") or {}).get("labels") or {}
    chart_name, chart, version = chart_of(ctx, labels)
    note = ""
    found_release = defect(chart_name, version, "probe-killed") if labels.get(HELM_RELEASE) else None
    if found_release is not None:  # the chart release whose probes allow the start, the patch until then
        upgrade = f"helm upgrade {labels[HELM_RELEASE]} {chart} -n {ns} --version {found_release.fixed_in}"
        evidence = (*evidence, f"chart {chart_name}-{version}: {found_release.cause}", found_release.cite())
        fix = f"{upgrade} --reuse-values   # the chart release that fixes it; until then: {ctx.stack.render(action)}"
        return Known(cause=cause, evidence=evidence, action=action, fix=fix)
    if labels.get(HELM_RELEASE):
        fixed = (version_of(version) or ()) < (version_of(EXPORTER_CHART_PROBES) or ())
        if chart_name == "dcgm-exporter" and fixed:
            note = (
                f"   # chart {version} renders fixed probes: helm upgrade {labels[HELM_RELEASE]} {chart} "
                f"--reuse-values --version {EXPORTER_CHART_PROBES} or later, then --set {kind}Probe.{key}={value}"
            )
        else:
            note = f"   # and in its Helm release: --set {kind}Probe.{key}={value}, so the next upgrade keeps it"
    return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action) + note)
