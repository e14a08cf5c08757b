"""The MIG instances behind partitionable devices: made on Prepare, destroyed on Unprepare or when
an interrupted Prepare left them (``dra.partitions``).

``DraDriver`` decides when; these functions do it against the node's GPU backend, so the driver
keeps its slice and claim bookkeeping and this module the MIG instance lifecycle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from gpuchain.common.labels import MIG_CONFIG_STATE
from gpuchain.dra import cdi, partitions, slices
from gpuchain.dra.checkpoint import CreatedInstance, PreparedClaim
from gpuchain.dra.errors import PrepareError
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.model import Gpu
from gpuchain.kube.kinds import NODE
from gpuchain.kube.mig_owner import mig_change_pending
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)


def placements(gpus: Iterable[Gpu]) -> dict[str, partitions.Partition]:
    """Every MIG placement of the partitionable GPUs among ``gpus``, by device name."""
    return {
        p.name: p
        for gpu in gpus
        if (model := partitions.partitionable(gpu)) is not None
        for p in partitions.partitions(gpu, model)
    }


def partitionable_gpu(gpus: Iterable[Gpu], name: str) -> Gpu | None:
    """The partitionable GPU whose full-GPU device ``name`` is, if any."""
    return next((g for g in gpus if slices.gpu_device_name(g) == name and partitions.partitionable(g)), None)


def make_ready(
    backend: GpuBackend,
    *,
    cluster: Cluster,
    node: str,
    claim: str,
    device: cdi.CdiDevice,
    part: partitions.Partition | None,
    gpu: Gpu,
) -> tuple[cdi.CdiDevice, CreatedInstance | None]:
    """Put the partitionable ``gpu`` in the MIG mode ``device`` needs (on for a placement ``part``,
    off for the full GPU) and create the placement's MIG device: the device to hand out (with the
    new MIG device's UUID) and the instance made (None if none). ``claim`` ("claim ns/name") names
    the claim in the log and in errors, which are PrepareError."""
    where = f"{claim}: device {device.name!r}"
    if mig_change_pending(cluster.get_or_none(NODE, name=node)):
        raise PrepareError(
            f"{where}: the MIG manager is changing this node's MIG layout ({MIG_CONFIG_STATE}=pending); "
            "the MIG manager and this driver never change one GPU at once, and the kubelet retries the claim"
        )
    try:
        mode = backend.mig_mode(gpu.index)
        if mode.current != (part is not None):
            if part is None and backend.gpu_instances(gpu.index):
                raise PrepareError(f"{where}: GPU {gpu.index} still has MIG instances; the whole GPU is not free")
            mode = backend.set_mig_mode(gpu.index, part is not None)
            if mode.current != (part is not None):
                raise PrepareError(f"{where}: GPU {gpu.index} switches MIG mode only after a GPU reset")
        if part is None:
            return device, None
        gi_id = backend.create_gpu_instance(gpu.index, profile=part.profile.name, start=part.start)
        made = CreatedInstance(gpu_index=gpu.index, gi_id=gi_id, profile=part.profile.name, start=part.start)
        try:
            backend.create_compute_instance(gpu.index, gi_id=gi_id)
            migs = [m for m in backend.inventory().gpu(gpu.index).mig_devices if m.gi_id == gi_id]
            if not migs:
                raise PrepareError(f"{where}: GPU instance {gi_id} made no MIG device")
        except BaseException:
            destroy(backend, [made])
            raise
    except GpuError as exc:
        raise PrepareError(f"{where}: {exc}") from exc
    log.info("%s: created MIG device %s (%s) as %s", claim, migs[0].uuid, migs[0].profile, device.name)
    return cdi.CdiDevice(name=device.name, uuid=migs[0].uuid, device_node=device.device_node), made


def destroy(backend: GpuBackend, instances: Iterable[CreatedInstance]) -> None:
    """Destroy MIG GPU instances this driver created, each only while it is still the one
    recorded (same id, profile and start); one already gone is no error. Raises GpuError."""
    for made in instances:
        live = {gi.gi_id: gi for gi in backend.gpu_instances(made.gpu_index)}
        gi = live.get(made.gi_id)
        if gi is not None and (gi.profile, gi.start) == (made.profile, made.start):
            backend.destroy_gpu_instance(made.gpu_index, made.gi_id)
            log.info(
                "destroyed MIG GPU instance %d (%s at slice %d) of GPU %d",
                made.gi_id,
                made.profile,
                made.start,
                made.gpu_index,
            )


def destroy_orphans(backend: GpuBackend, *, gpus: Iterable[Gpu], prepared: Sequence[PreparedClaim]) -> None:
    """Destroy the MIG instances of partitionable GPUs that no ``prepared`` claim holds: Prepare
    creates an instance before it records the claim, so a crash between the two leaves one the
    kubelet never got, which would otherwise keep its slices booked forever.

    An instance behind any prepared claim's device stays, made here or not: a claim prepared on
    a static MIG device before partitions were switched on still has its pod. A failure is
    logged; the caller tries again later."""
    held = {(c.gpu_index, c.gi_id) for claim in prepared for d in claim.devices if (c := d.created)}
    in_use = {d.uuid for claim in prepared for d in claim.devices}
    try:
        for gpu in gpus:
            if partitions.partitionable(gpu) is None or not gpu.mig_enabled:
                continue
            held |= {(gpu.index, m.gi_id) for m in gpu.mig_devices if m.uuid in in_use}
            destroy(
                backend,
                (
                    CreatedInstance(gpu_index=gpu.index, gi_id=gi.gi_id, profile=gi.profile, start=gi.start)
                    for gi in backend.gpu_instances(gpu.index)
                    if (gpu.index, gi.gi_id) not in held
                ),
            )
    except GpuError as exc:
        log.error("cannot clean up MIG instances left by an interrupted Prepare: %s", exc)
