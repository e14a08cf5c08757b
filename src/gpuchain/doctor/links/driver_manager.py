"""The driver pod held in its driver manager (the k8s-driver-manager init container) by a wait that never ends:
the MOFED wait GPUDirect RDMA asks for. Its log says only that it waits, at info level, so no error line names it;
the ClusterPolicy's RDMA keys say which MOFED it waits for and so what repairs the wait."""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.pods import PodState

#: The driver manager's words while it waits for MOFED (catalog.yaml).
MOFED_WAIT = "k8s-driver-manager.waiting-for-mofed"


def mofed_wait(ctx: Context, *, state: PodState, log: str) -> Known | None:
    """The driver pod held in its init container by the driver manager's MOFED wait (GPUDirect RDMA on), with the
    ClusterPolicy change that ends it; None when its log shows no such wait or no ClusterPolicy asks for RDMA."""
    found = catalog.find(log, MOFED_WAIT) if state.waiting_init else None
    if found is None or ctx.policy_obj is None:
        return None
    # Read from the object as written: a ClusterPolicy of another release may carry keys gpuchain's schema drops.
    driver = (ctx.policy_obj.get("spec") or {}).get("driver") or {}
    rdma = driver.get("rdma") or {}
    if not rdma.get("enabled"):
        return None
    spec = driver.get("manager") or {}
    manager = (
        ":".join(
            x
            for x in (
                "/".join(str(spec[k]) for k in ("repository", "image") if spec.get(k)),
                str(spec.get("version") or ""),
            )
            if x
        )
        or "its default release"
    )
    if rdma.get("useHostMofed"):
        # The host's MOFED is loaded as mlx5_core; the MOFED driver container's ready file never appears without
        # that container, and a manager release whose host check looks for the file waits for ever.
        cause = (
            "GPUDirect RDMA is on with MOFED from the host (spec.driver.rdma.useHostMofed=true), and the driver "
            f"manager ({manager}) keeps waiting for MOFED: with a host MOFED only mlx5_core in /proc/modules shows "
            "it, and a driver manager release that checks for the MOFED driver container's ready file "
            "(/run/mellanox/drivers/.driver-ready) instead waits for ever, so the driver never installs."
        )
        fix = (
            "# run a driver manager release whose host-MOFED check reads /proc/modules: set "
            f"spec.driver.manager.version in {ctx.policy_ref} to one before or after the release whose two checks "
            "are swapped; or, with that release, set spec.driver.rdma.useHostMofed=false (its other check is the "
            "/proc/modules one the host's mlx5_core passes); first check the host has MOFED loaded (lsmod | grep "
            "mlx5_core)"
        )
    else:
        cause = (
            "GPUDirect RDMA is on with MOFED from NVIDIA's network operator (spec.driver.rdma.useHostMofed=false), "
            f"and the driver manager ({manager}) keeps waiting for that MOFED driver container to be ready, so the "
            "driver never installs."
        )
        fix = (
            "# deploy the network operator's MOFED driver on this node (its ready file /run/mellanox/drivers/"
            ".driver-ready ends the wait); where MOFED is installed on the host instead, set "
            f"spec.driver.rdma.useHostMofed=true in {ctx.policy_ref}; without RDMA NICs, spec.driver.rdma.enabled=false"
        )
    return Known(cause=cause, evidence=found.evidence(), action=None, fix=fix)
