"""An operand the kubelet keeps killing (or holding unready) through its own probes, while the container itself
says nothing wrong: the probe's timing, not the component, is what fails.

The kubelet writes each failed probe as a Warning ``Unhealthy`` Event, "Liveness probe failed: " or "Readiness probe
failed: " and the probe's output, and a liveness kill as a Normal ``Killing`` Event, "Container <name> failed liveness
probe, will be restarted" (kubernetes pkg/kubelet/prober/prober.go and pkg/kubelet/kuberuntime/kuberuntime_container.go
@v1.34.4). An HTTP probe that gets no answer within ``timeoutSeconds`` (default 1) reports Go's client timeout,
"context deadline exceeded (Client.Timeout exceeded while awaiting headers)" (net/http client.go); one sent before the
server listens reports "connect: connection refused". With a log that holds no error line, the first is an endpoint
slower than the probe's timeout (DCGM's /health under GPU load), the second a probe that starts before the container
serves (initialDelaySeconds shorter than its start): the repair is on the probe, in the object that renders it."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import probe_failures
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import owner_ds, repair_target
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import Operand

#: A probe that got no answer in time: Go's HTTP client timeout, a TCP dial timeout, the kubelet's exec and gRPC
#: probe timeouts (pkg/probe/exec, pkg/probe/grpc@v1.34.4).
TIMED_OUT = re.compile(
    r"context deadline exceeded|Client\.Timeout exceeded|i/o timeout|command timed out|timed out after|"
    r"failed to connect service .* within",
    re.IGNORECASE,
)
#: A probe sent to a port nothing listens on yet.
REFUSED = re.compile(r"connect: connection refused", re.IGNORECASE)
#: The probes' fields a patch sets, in the kubelet's Event wording.
PROBES = {"Liveness": "livenessProbe", "Readiness": "readinessProbe", "Startup": "startupProbe"}
#: The timeout given to a probe whose endpoint answers slower than the kubelet's default 1s: a few seconds covers
#: an exporter's health check while the GPU is busy, and stays well under the default 10s period.
SLOW_TIMEOUT = 5
#: The delay given to a liveness probe that starts before its container serves: a GPU component initialises its
#: library (NVML, DCGM) against every GPU first, which takes tens of seconds on a large node.
START_DELAY = 60


def _container_index(pod: Obj, container: str) -> int:
    names = [str(c.get("name")) for c in ((pod.get("spec") or {}).get("containers") or [])]
    return names.index(container) if container in names else 0


def _probe(pod: Obj, container: str, field: str) -> dict[str, object]:
    containers: list[Obj] = (pod.get("spec") or {}).get("containers") or []
    spec = next((c for c in containers if c.get("name") == container), {})
    return dict(spec.get(field) or {})


def probe_killed(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """The operand's container failing only its probes (timed out, or refused before it serves) with a log that
    names no error, and the probe change that ends it; None where its probes do not fail so, or its log says why."""
    pod = view.pod(operand)
    if pod is None or catalog.known_error(log) is not None or catalog.unknown_error(log) is not None:
        return None
    failed = [m for m in probe_failures(view, pod) if " probe failed: " in m]
    slow = [m for m in failed if TIMED_OUT.search(m)]
    early = [m for m in failed if REFUSED.search(m) and m.startswith("Liveness")]
    if not slow and not early:
        return None
    container = state.container or next(
        (str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []), ""
    )
    index = _container_index(pod, container)
    kinds = sorted({m.split(" ", 1)[0] for m in (slow or early)} & set(PROBES))
    if slow:
        key, value = "timeoutSeconds", SLOW_TIMEOUT
        now = [int(str(_probe(pod, container, PROBES[k]).get(key) or 1)) for k in kinds]
        value = max(value, *(n * 2 for n in now))
        why = (
            f"its {' and '.join(k.lower() for k in kinds)} probes get no answer within their timeoutSeconds "
            f"({', '.join(f'{n}s' for n in now)}; the kubelet's default is 1s): the endpoint answers, only slower "
            "than that (a component that asks the GPUs for its health answers slowly while they are busy)"
        )
    else:
        kinds = ["Liveness"]
        key = "initialDelaySeconds"
        now = [int(str(_probe(pod, container, "livenessProbe").get(key) or 0))]
        value = max(START_DELAY, now[0] * 2)
        why = (
            f"its liveness probe is refused (nothing listens yet) from {now[0]}s after start, its initialDelaySeconds, "
            "while its log shows it still starting and no error: the kubelet kills it before it serves, every time"
        )
    ds = owner_ds(pod) or name_of(pod)
    ns = namespace_of(pod) or ctx.namespace
    patch = [
        {"op": "add", "path": f"/spec/template/spec/containers/{index}/{PROBES[k]}/{key}", "value": value}
        for k in kinds
    ]
    action = Fix(FixOp.PATCH_WORKLOAD, f"DaemonSet/{ns}/{ds}", {"patch": patch, "type": "json"})
    kept = repair_target(ctx, pod=pod, operand=operand)
    fields = " and ".join(f"{PROBES[k]}.{key}" for k in kinds)
    return Known(
        cause=f"the kubelet {'kills' if 'Liveness' in kinds else 'holds unready'} the {container} container of "
        f"{name_of(pod)} through its probes, not for anything it reports: {why}.",
        evidence=tuple(dict.fromkeys(failed))[:4],
        action=action,
        fix=ctx.stack.render(action)
        + f"   # raise {fields} of container {container} to {value}s"
        + (
            ""
            if kept.startswith("DaemonSet ")
            else f"; {kept} renders it: set the same there, or a later render puts the old probe back"
        ),
    )
