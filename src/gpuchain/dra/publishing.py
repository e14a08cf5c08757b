"""Writing a node's ResourceSlices and reading back what the API server kept of them.

``DraDriver.publish`` decides what to publish (``slices``); these functions do the writes (the
slices, the Node annotation naming the GPUs whose MIG layout the driver owns) and tell which
features a server without their gates dropped from what was written, so the driver falls back
to what that server serves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from gpuchain.dra import slices
from gpuchain.dra.kinds import DRIVER, RESOURCE_SLICE
from gpuchain.dra.taints import taints_of
from gpuchain.kube.errors import ForbiddenError, NotFoundError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.mig_owner import DRA_MIG_GPUS, annotation_value, dra_mig_gpus
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)


def live_slices(cluster: Cluster, *, node: str, partitionable: bool) -> dict[str, Obj]:
    """This node's live slices by name: all of this driver's on the node where GPUs may be
    ``partitionable`` (so a GPU's slice that is no longer wanted is found), else the one."""
    if not partitionable:
        live = cluster.get_or_none(RESOURCE_SLICE, name=slices.slice_name(node))
        return {} if live is None else {slices.slice_name(node): live}
    found = cluster.list(RESOURCE_SLICE, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return {str(obj["metadata"]["name"]): obj for obj in found}


def write(cluster: Cluster, *, desired: list[Obj], lives: Mapping[str, Obj]) -> tuple[dict[str, Obj], bool]:
    """Apply ``desired`` and delete the live slices it does not name; the slices as written, and
    whether anything was written."""
    changed = False
    written: dict[str, Obj] = {}
    for obj in desired:
        name = str(obj["metadata"]["name"])
        live = lives.get(name)
        if live is not None and live.get("spec", {}).get("sharedCounters") and "sharedCounters" not in obj["spec"]:
            # a GPU's slice in the 1.34 layout (its counter set beside its devices): a merge patch
            # would keep the set, which a 1.35 or later server refuses beside devices
            with contextlib.suppress(NotFoundError):
                cluster.delete(RESOURCE_SLICE, name=name)
            live = None
        result = cluster.apply(obj, live=live, known_live=True)
        changed |= result.changed
        written[name] = result.object
    for name in sorted(set(lives) - set(written)):
        with contextlib.suppress(NotFoundError):  # gone already
            cluster.delete(RESOURCE_SLICE, name=name)
        changed = True
    return written, changed


def announce_mig_gpus(cluster: Cluster, *, node: Obj, wanted: frozenset[int]) -> Obj:
    """Bring the Node annotation that keeps the MIG manager off the driver's MIG GPUs
    (``kube.mig_owner``) to ``wanted`` (one left by a run with ``--partitionable-mig`` is removed by
    one without); the Node as it is now. ForbiddenError only when announcing GPUs: a stale
    announcement the role may not take back is warned of, and serving goes on."""
    name = str(node["metadata"]["name"])
    if dra_mig_gpus(node) == wanted:
        return node
    patch = {"metadata": {"annotations": {DRA_MIG_GPUS: annotation_value(wanted)}}}
    try:
        patched = cluster.patch(NODE, name=name, patch=patch)
    except ForbiddenError:
        if wanted:
            raise  # never publish MIG GPUs the MIG manager has not been told are this driver's
        # Only a stale announcement to take back, under a role granted patch only with partitionable
        # MIG (the chart's dra.partitionableMig): serving goes on; the MIG manager stays off those GPUs.
        log.warning(
            "Node %s: may not remove the annotation %s left by a run with --partitionable-mig, so the "
            "MIG manager keeps off GPUs %s; remove it: kubectl annotate node %s %s-",
            name,
            DRA_MIG_GPUS,
            sorted(dra_mig_gpus(node)),
            name,
            DRA_MIG_GPUS,
        )
        return node
    log.info("Node %s: announced the GPUs whose MIG layout this driver owns: %s", name, sorted(wanted))
    return patched


def taints_dropped(desired: list[Obj], written: Mapping[str, Obj], *, node: str) -> bool:
    """Whether the API server dropped the taints just written (no ``DRADeviceTaints`` gate): then
    the driver withdraws unhealthy devices from here on, as it does without ``device_taints``."""
    wanted = any(taints_of(d) for obj in desired for d in slices.devices_of(obj))
    kept = any(taints_of(d) for obj in written.values() for d in slices.devices_of(obj))
    if not wanted or kept:
        return False
    log.error(
        "the API server dropped the device taints of ResourceSlice %s (Kubernetes before 1.36 serves "
        "Device.taints only with the DRADeviceTaints feature gate): withdrawing unhealthy devices instead",
        slices.slice_name(node),
    )
    return True


def shares_dropped(desired: list[Obj], written: Mapping[str, Obj], *, node: str) -> bool:
    """Whether the API server dropped ``allowMultipleAllocations`` just written (no
    ``DRAConsumableCapacity`` gate): the GPUs are then published whole, one claim each."""
    wanted = any(d.get("allowMultipleAllocations") for obj in desired for d in slices.devices_of(obj))
    kept = any(d.get("allowMultipleAllocations") for obj in written.values() for d in slices.devices_of(obj))
    if not wanted or kept:
        return False
    log.error(
        "the API server dropped allowMultipleAllocations from ResourceSlice %s (Kubernetes before 1.36 serves "
        "consumable capacity only with the DRAConsumableCapacity feature gate): publishing GPUs unshared",
        slices.slice_name(node),
    )
    return True


def counters_dropped(desired: list[Obj], written: Mapping[str, Obj]) -> bool:
    """Whether the API server dropped the shared counters just written (no
    ``DRAPartitionableDevices`` gate). Devices without their counters could all be allocated
    at once, so the driver publishes those GPUs as before (whole, or their static MIG devices)."""
    wanted = [str(obj["metadata"]["name"]) for obj in desired if obj["spec"].get("sharedCounters")]
    if all(written[name].get("spec", {}).get("sharedCounters") for name in wanted):
        return False
    log.error(
        "the API server dropped the shared counters of ResourceSlice %s (Kubernetes before 1.36 serves them "
        "only with the DRAPartitionableDevices feature gate): publishing MIG-capable GPUs without partitions",
        wanted[0],
    )
    return True
