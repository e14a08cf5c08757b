"""A dcgm-exporter whose embedded DCGM host engine runs without root's privileges.

dcgm-exporter starts DCGM's host engine inside its own container and asks it to watch the fields of its metrics CSV;
DCGM refuses with DCGM_ST_REQUIRES_ROOT ("Host engine is running as non-root", NVIDIA/DCGM dcgmlib/src/
dcgm_errors.c@v4.6.0) where the container holds neither root nor SYS_ADMIN, and the exporter exits with "Failed to
watch metrics: Error watching fields: ..." (NVIDIA/dcgm-exporter pkg/dcgmexporter/gpu_collector.go@3.3.8-3.6.0).
NVIDIA's Helm chart grants the capability; its static dcgm-exporter.yaml did not until NVIDIA/dcgm-exporter#403
(818a20f, first in 3.3.9-3.6.1) added ``capabilities: add: ["SYS_ADMIN"]`` beside ``runAsNonRoot: false`` and
``runAsUser: 0``; its images since run as a non-root user unless the pod says root (docker/Dockerfile@4.5.3-4.8.2:
"--cap-add only grants capabilities to root (UID 0)"). The repair is that securityContext on the exporter's own
DaemonSet.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import owner_ds
from gpuchain.kube.objects import Obj, namespace_of

#: DCGM's words for a host engine without root's privileges (catalog.yaml).
REQUIRES_ROOT = "dcgm.requires-root"


def host_engine_not_root(ctx: Context, *, pod: Obj, log: str) -> Known | None:
    """The exporter's DaemonSet patched to run its container as root with SYS_ADMIN, as NVIDIA's manifest and chart
    run it; None where the log does not say the host engine runs as non-root, or no DaemonSet of its own owns the pod
    (the stack's exporter is the operator's to render: the catalog's repair stands)."""
    found = catalog.find(log, REQUIRES_ROOT)
    ds = owner_ds(pod)
    ns = namespace_of(pod) or ctx.namespace
    if found is None or not ds or (ns == ctx.namespace and ctx.policy_obj is not None):
        return None
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    container = next((c for c in containers if "dcgm" in str(c.get("name", ""))), containers[0])
    security = container.get("securityContext") or {}
    added = [*((security.get("capabilities") or {}).get("add") or []), "SYS_ADMIN"]
    grant = {
        "name": str(container.get("name", "")),
        "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "capabilities": {"add": sorted(set(added))}},
    }
    action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{ds}", {"spec": {"template": {"spec": {"containers": [grant]}}}})
    return Known(
        cause=f"{found.entry.cause.rstrip('.')}: DaemonSet {ns}/{ds} gives its container "
        f"{'no securityContext' if not security else f'securityContext {security}'}, without SYS_ADMIN.",
        evidence=(*found.evidence(), f"container {grant['name']} securityContext: {security or 'none'}"),
        action=action,
        fix=ctx.stack.render(action) + "   # root with SYS_ADMIN, as NVIDIA's dcgm-exporter.yaml sets it since "
        "NVIDIA/dcgm-exporter#403 (3.3.9-3.6.1) and its Helm chart does; or deploy the exporter from that Helm chart",
    )
