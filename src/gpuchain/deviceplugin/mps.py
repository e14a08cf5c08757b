"""MPS sharing as NVIDIA's plugin does it: a control daemon per shared resource, its limits, and
what a container asking for an MPS share is given.

``sharing.mps`` announces each GPU ``replicas`` times; without a control daemon those replicas
are plain time-slicing, with neither MPS's memory limit nor its compute share. NVIDIA's plugin
(k8s-device-plugin v0.18.0, ``cmd/mps-control-daemon/mps/daemon.go``) runs, per resource:

- ``nvidia-smi -i <uuid> -c EXCLUSIVE_PROCESS`` on every GPU of the resource (``DEFAULT`` on stop);
- ``nvidia-cuda-mps-control -d`` with ``CUDA_MPS_PIPE_DIRECTORY=<root>/<resource>/pipe`` and
  ``CUDA_MPS_LOG_DIRECTORY=<root>/<resource>/log``;
- through the control program's stdin, one ``set_default_device_pinned_mem_limit <index> <MiB>M``
  per GPU (its memory divided by its replicas, whole MiB) and one
  ``set_default_active_thread_percentage <100 / replicas>``;
- health: ``get_default_active_thread_percentage`` answered (``AssertHealthy``); ``quit`` stops it.

The device plugin (``internal/plugin/mps.go`` at v0.18.0) gives each container
``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and mounts the host's ``<mpsRoot>/<resource>/pipe``
there and ``<mpsRoot>/shm`` at ``/dev/shm``. MPS is refused for MIG devices.

Here are the device plugin's parts (its limits from the replicas, its containers' mounts); the
daemon itself is run by ``gpu.mps`` (``MpsControl``, ``keep_daemon``), shared with the DRA plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpuchain.deviceplugin.allocate import ContainerAllocation, MountSpec
from gpuchain.deviceplugin.resources import Resource
from gpuchain.gpu.mps import CONTAINER_ROOT, SHM_DIR, MpsLimits, MpsRoot, percentage, split_memory_mib


def check_shareable(resource: Resource) -> None:
    """Refuse MPS over MIG devices, as NVIDIA's plugin does (``getMPSOptions``)."""
    if any(d.mig_uuid is not None for d in resource.devices):
        raise ValueError(f"{resource.name}: sharing using MPS is not supported for MIG devices")


def daemon_commands(resource: Resource, memory_mib: Mapping[str, int]) -> list[str]:
    """What NVIDIA's daemon tells the control program after starting, for the same resource.

    ``memory_mib``: each GPU's memory by UUID. The pinned-memory limit of a GPU is its memory
    divided by the replicas announced for it, in whole MiB (NVIDIA divides bytes by replicas, then
    by 1 MiB, rounding down); the thread percentage is 100 divided by the replicas per GPU
    (all announced devices over distinct GPUs, rounded down). A GPU of unknown memory gets no limit.
    """
    check_shareable(resource)
    replicas: dict[str, int] = {}
    index: dict[str, int] = {}
    for d in resource.devices:
        replicas[d.gpu_uuid] = replicas.get(d.gpu_uuid, 0) + 1
        index[d.gpu_uuid] = d.gpu_index
    gpus = sorted(replicas, key=lambda u: index[u])
    memory = tuple((index[u], split_memory_mib(memory_mib[u], replicas[u])) for u in gpus if memory_mib.get(u, 0))
    threads = percentage(1, len(resource.devices) // len(replicas)) if replicas else None
    return MpsLimits(memory, threads).control_commands()


def with_mps(alloc: ContainerAllocation, *, resource: str, host_root: str) -> ContainerAllocation:
    """``alloc`` with what a container of an MPS share needs: the daemon's pipe directory (in the
    environment and mounted from the host) and the daemon's shared memory at ``/dev/shm``, both
    writable, as NVIDIA's plugin mounts them."""
    inside, host = MpsRoot(CONTAINER_ROOT), MpsRoot(host_root)
    mounts = (
        MountSpec(inside.pipe_dir(resource), host.pipe_dir(resource)),
        MountSpec(SHM_DIR, host.shm_dir()),
    )
    envs = {**alloc.envs, "CUDA_MPS_PIPE_DIRECTORY": inside.pipe_dir(resource)}
    return replace(alloc, envs=envs, mounts=alloc.mounts + mounts)
