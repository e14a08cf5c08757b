"""What an OOM-killed operand's memory limit is, and what else makes it fit.

A container's limit is in its pod's spec; where the pod was read without it (a pod the listing shortened, or one
created before its DaemonSet's template got the limit), the DaemonSet's template says what the next pod gets, which is
the value a raise must exceed. dcgm-exporter's memory also follows how often it collects and how many fields: it
collects every ``--collect-interval`` ms (``-c``, ``DCGM_EXPORTER_INTERVAL``) the fields of its metrics CSV
(``--collectors``, ``-f``, ``DCGM_EXPORTER_COLLECTORS``) for each GPU (NVIDIA/dcgm-exporter pkg/cmd/app.go@4.1.1-4.0.4),
and as a Go program it keeps its heap under ``GOMEMLIMIT`` when that is set (Go runtime/debug SetMemoryLimit): on
many-GPU nodes a longer interval, fewer fields and GOMEMLIMIT under the limit keep it from the kernel's OOM kill
(pytorch/ci-infra#631).
"""

from __future__ import annotations

from gpuchain.doctor.context import Context
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER, Operand


def memory_limit(ctx: Context, *, container: Obj, ns: str, ds: str) -> str:
    """The memory limit of ``container`` (its pod spec's), else that of its namesake in DaemonSet ``ns``/``ds``'s
    template; "" where neither sets one."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if limit:
        return str(limit)
    for d in ctx.snapshot.daemonsets:
        if name_of(d) == ds and (namespace_of(d) or ctx.namespace) == ns:
            template = (((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            same: Obj = next((c for c in template if c.get("name") == container.get("name")), {})
            return str(((same.get("resources") or {}).get("limits") or {}).get("memory") or "")
    return ""


def lighter(operand: Operand) -> str:
    """The operand's own ways to need less memory, as a clause after the raise ("" where it has none)."""
    if operand != DCGM_EXPORTER:
        return ""
    return (
        "; or make it need less: collect less often (--collect-interval / -c in ms, DCGM_EXPORTER_INTERVAL, e.g. "
        "60000 for a 60s scrape), set GOMEMLIMIT a little under the limit, and drop fields it need not export from "
        "its metrics CSV (--collectors / -f)"
    )
