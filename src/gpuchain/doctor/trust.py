"""Whether a node's GPU metrics can be trusted: the exporter's own trust signals, judged.

gpuchain's exporter says in every scrape, per GPU, whether it answered the last collection
(``gpuchain_gpu_up``) and when it last did (``gpuchain_gpu_last_sample_timestamp_seconds``), and per
node how many GPUs it exports beside how many the node should have (``gpuchain_gpus_exported``,
``gpuchain_gpus_expected{source}``; see `gpuchain.exporter.metrics`). A pod that is Running and ready
says none of that: its series of a GPU that stopped answering stay frozen or vanish, and dashboards
and alerts go quiet rather than red (dcgm-exporter#348). Where the doctor has a node's scrape
(`Snapshot.scrapes`: read live through the API server, or ``<ns>/<pod>/metrics.txt`` in a dump),
the exporter link of a node with a ready exporter is degraded by:

- ``exporter.gpu-down``: GPUs whose ``gpuchain_gpu_up`` is 0 (read failed or hung, or the GPU left
  the inventory);
- ``exporter.gpus-missing``: fewer GPUs exported than expected, beyond those the scrape shows down;
- ``exporter.stale``: answering GPUs whose last sample is older than ``STALE_INTERVALS`` collection
  intervals (the exporter's collection loop is stuck while its HTTP server still answers).

The exporter lists the node's GPUs at every collection and keeps a GPU it saw that stopped
answering at ``gpuchain_gpu_up 0`` on purpose, so a GPU down or missing in its scrape is the GPU's
or the driver's state, not the exporter's: the fix is the GPU's (reset it, or reboot the node;
replace a GPU that falls off again), and a new exporter pod would only drop the evidence. A stale
sample is the exporter's own loop: the fix is a new exporter pod (its DaemonSet makes one), which
starts collecting again. A scrape without gpuchain's trust series (NVIDIA's dcgm-exporter) says
nothing here.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result
from gpuchain.doctor.links.exporter import check_exporter as check_exporter_pod
from gpuchain.doctor.model import Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.structs import Scrape, Stack
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.exporter.top import NodeTop, top_view
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DCGM_EXPORTER

LINK = "exporter"
STALE_INTERVALS = 3
"""A last sample older than this many collection intervals is stale: one late collection is a slow
NVML call (bounded by the exporter's call timeout), three in a row is a loop that stopped."""
INTERVAL_FLAG = "--collect-interval"
GPU_ACTION = "reset the GPU (nvidia-smi -r -i <UUID>) or reboot the node; replace the GPU if it is lost again"


def collect_interval(pod: Obj | None) -> float:
    """The exporter pod's ``--collect-interval`` (seconds), else gpuchain's default."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or ():
        argv = [str(a) for a in (*(container.get("command") or ()), *(container.get("args") or ()))]
        for i, arg in enumerate(argv):
            value = argv[i + 1] if arg == INTERVAL_FLAG and i + 1 < len(argv) else None
            if arg.startswith(INTERVAL_FLAG + "="):
                value = arg.split("=", 1)[1]
            try:
                if value is not None and float(value) > 0:
                    return float(value)
            except ValueError:
                continue
    return COLLECT_INTERVAL


def _node_top(scrape: Scrape, node: str) -> NodeTop | None:
    """The node's part of its exporter's scrape; None when the text carries no trust series."""
    try:
        tops = [t for t in top_view(scrape.text, now=scrape.at, node=node) if t.node == node]
    except ValueError:  # not Prometheus text (an error page saved as metrics.txt): nothing to judge
        return None
    if not tops:
        return None
    top = tops[0]
    if top.gpus_exported is None and all(d.up is None for d in top.devices):
        return None
    return top


def trust_findings(view: NodeView, *, pod: Obj, scrape: Scrape, interval: float, stack: Stack) -> list[Finding]:
    """What the scrape of ``view``'s exporter pod ``pod`` says against trusting its metrics (its fixes
    written by ``stack``'s renderer)."""
    top = _node_top(scrape, view.name)
    if top is None:
        return []
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    restart = Fix.delete_pod(namespace, name)
    command = stack.render(restart)
    gpu_work = Fix(FixOp.HARDWARE, view.name, {"action": GPU_ACTION})
    findings: list[Finding] = []
    down = [d for d in top.devices if d.up is False]
    if down:
        gpus = ", ".join(f"GPU {d.gpu} ({d.uuid})" for d in down)
        findings.append(
            Finding(
                id="exporter.gpu-down",
                severity=Severity.ERROR,
                link=LINK,
                cause=f"{len(down)} GPU(s) on {view.name} stopped answering NVML ({gpus}): the exporter's last read "
                "of them failed or hung, or they left the driver's GPU list, so their metrics stopped while the "
                "exporter pod looks healthy.",
                evidence=(
                    *(f"{d.uuid}: gpuchain_gpu_up 0, last good sample" + _age(d.sample_age_s) for d in down),
                    f"on {view.name}: nvidia-smi -q -i <UUID> and the kernel log's XID lines say why",
                ),
                fix=stack.render(gpu_work),
                node=view.name,
                action=gpu_work,
            )
        )
    if top.gpus_exported is not None and top.gpus_expected is not None:
        missing = top.gpus_expected - top.gpus_exported - len(down)
        if missing > 0:
            findings.append(
                Finding(
                    id="exporter.gpus-missing",
                    severity=Severity.ERROR,
                    link=LINK,
                    cause=f"the exporter on {view.name} exports {top.gpus_exported} GPU(s) where the node should have "
                    f"{top.gpus_expected} (from {top.expected_from}): {missing} GPU(s) the driver does not list "
                    "have no series at all, so nothing about them reaches dashboards or alerts.",
                    evidence=(
                        f"gpuchain_gpus_exported {top.gpus_exported}",
                        f'gpuchain_gpus_expected{{source="{top.expected_from}"}} {top.gpus_expected}',
                        f"the exporter lists the GPUs NVML lists at every collection: nvidia-smi -L on "
                        f"{view.name} shows which one the driver lost",
                    ),
                    fix=stack.render(gpu_work),
                    node=view.name,
                    action=gpu_work,
                )
            )
    limit = STALE_INTERVALS * interval
    stale = [d for d in top.devices if d.up and d.sample_age_s is not None and d.sample_age_s > limit]
    if stale:
        oldest = max(d.sample_age_s or 0.0 for d in stale)
        findings.append(
            Finding(
                id="exporter.stale",
                severity=Severity.WARNING,
                link=LINK,
                cause=f"the exporter on {view.name} serves samples up to {oldest:.0f}s old for {len(stale)} GPU(s), "
                f"more than {STALE_INTERVALS} collection intervals ({interval:g}s each): its collection has stopped "
                "while its HTTP server still answers, so every scrape repeats the same numbers.",
                evidence=tuple(
                    f"{d.uuid}: last sample{_age(d.sample_age_s)} (collect interval {interval:g}s)" for d in stale
                ),
                fix=command + "   # a new pod starts collecting again",
                node=view.name,
                action=restart,
            )
        )
    return findings


def _age(age: float | None) -> str:
    return "" if age is None else f", {age:.0f}s ago"


def check_exporter(ctx: Context, view: NodeView) -> Result:
    """The exporter link: its pod (`links.exporter.check_exporter`), then, where the pod is ready and its
    scrape was read, the trust signals in it."""
    result = check_exporter_pod(ctx, view)
    scrape = ctx.snapshot.scrapes.get(view.name)
    pod = view.pod(DCGM_EXPORTER)
    if result.state is not LinkState.OK or scrape is None or pod is None:
        return result
    findings = trust_findings(view, pod=pod, scrape=scrape, interval=collect_interval(pod), stack=ctx.stack)
    if not findings:
        return result
    ids = ", ".join(f.id.removeprefix("exporter.") for f in findings)
    return Result(LinkState.DEGRADED, f"{result.summary}; metrics not to be trusted: {ids}", tuple(findings))
