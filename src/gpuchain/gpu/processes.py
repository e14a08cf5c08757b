"""The processes running on a GPU, as NVML reports them: who uses how much of a shared GPU.

When pods share a GPU (time-slicing, MPS) the device's own readings are the sum of everyone on
it. NVML knows more, per process and without any hook in the containers:

- ``nvmlDeviceGetComputeRunningProcesses``: the CUDA contexts on a device and the framebuffer each
  holds. On a MIG device handle it lists that GPU instance's processes.
- ``nvmlDeviceGetMPSComputeRunningProcesses``: the MPS clients, which the compute list does not
  show (it shows the MPS server instead).
- ``nvmlDeviceGetProcessUtilization``: each process's share of the SMs over the samples since a
  timestamp. Not on MIG devices (NVML answers NOT_SUPPORTED), so a MIG process has no SM figure.

dcgm-exporter's ``--kubernetes-virtual-gpus`` reads the same three calls (its MPS support aside).
The reader here takes the NVML module and the backend's call wrappers, so ``gpu/nvml/telemetry.py`` only
forwards to it and the sim backend answers with the same dataclass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuchain.gpu.errors import NotFoundError, NotSupportedError

MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class GpuProcess:
    """One process on one GPU or MIG device.

    ``device_uuid`` is where it runs: the GPU's UUID, or the MIG device's when the GPU is
    partitioned. ``sm_percent`` is None where NVML gives no per-process SM share (MIG, or no
    sample since the last read); ``used_memory_mib`` is None where the driver withholds it.
    """

    pid: int
    device_uuid: str
    used_memory_mib: int | None
    sm_percent: int | None = None
    mps: bool = False


Call = Callable[..., Any]


def read_processes(nvml: Any, *, call: Call, optional: Call, gpu_uuid: str, since_us: int) -> tuple[GpuProcess, ...]:
    """Every process on one GPU (on each of its MIG devices when partitioned).

    ``call`` and ``optional`` are the backend's NVML wrappers (errors translated; ``optional``
    answers None for NOT_SUPPORTED). ``since_us`` is the timestamp the SM shares are averaged
    from: the caller passes its previous read's time, as NVML expects.
    """
    handle = call(nvml.nvmlDeviceGetHandleByUUID, gpu_uuid)
    mode = optional(nvml.nvmlDeviceGetMigMode, handle)
    if mode is not None and mode[0]:
        out: list[GpuProcess] = []
        count = call(nvml.nvmlDeviceGetMaxMigDeviceCount, handle)
        for i in range(count):
            try:
                mig = call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            except NotFoundError:
                continue
            uuid = call(nvml.nvmlDeviceGetUUID, mig)
            out += _on_device(nvml, call, optional, mig, uuid, None)
        return tuple(out)
    shares = _sm_shares(nvml, call, handle, since_us)
    return tuple(_on_device(nvml, call, optional, handle, gpu_uuid, shares))


def _on_device(
    nvml: Any, call: Call, optional: Call, handle: Any, uuid: str, shares: dict[int, int] | None
) -> list[GpuProcess]:
    compute = optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    mps = optional(nvml.nvmlDeviceGetMPSComputeRunningProcesses, handle) or []
    seen: dict[int, GpuProcess] = {}
    for info, is_mps in [*((p, False) for p in compute), *((p, True) for p in mps)]:
        pid = int(info.pid)
        if pid in seen:
            continue
        # None: the driver withholds the figure (NVML_VALUE_NOT_AVAILABLE, which nvidia-ml-py turns into None).
        used = info.usedGpuMemory
        share = None if shares is None else shares.get(pid)
        memory = None if used is None else int(used) // MIB
        seen[pid] = GpuProcess(pid=pid, device_uuid=uuid, used_memory_mib=memory, sm_percent=share, mps=is_mps)
    return list(seen.values())


def _sm_shares(nvml: Any, call: Call, handle: Any, since_us: int) -> dict[int, int] | None:
    """PID -> SM percent from the samples since ``since_us``; None when NVML keeps no such samples.

    NVML answers NOT_FOUND when no process ran a kernel since ``since_us``: everyone's share is 0.
    A PID sampled several times keeps its latest sample.
    """
    try:
        samples = call(nvml.nvmlDeviceGetProcessUtilization, handle, since_us)
    except NotFoundError:
        return {}
    except NotSupportedError:
        return None
    latest: dict[int, tuple[int, int]] = {}
    for s in samples:
        pid, stamp = int(s.pid), int(s.timeStamp)
        if pid not in latest or stamp >= latest[pid][0]:
            latest[pid] = (stamp, int(s.smUtil))
    return {pid: min(100, share) for pid, (_, share) in latest.items()}
