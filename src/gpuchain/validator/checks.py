"""The four link checks. Each takes its dependencies as arguments so tests run them without a GPU.

- driver: NVML loads and lists GPUs (the kernel module and user-space library agree).
- toolkit: inside a container started with the NVIDIA runtime the device nodes were injected
  and NVML works, i.e. the runtime class does its job.
- cuda: the CUDA driver API initialises and sees devices (``cuInit``/``cuDeviceGetCount`` on
  ``libcuda.so.1``), the in-container equivalent of the gpu-operator validator's vectorAdd pod.
- plugin: the node advertises ``nvidia.com/gpu`` or ``nvidia.com/mig-*`` capacity.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError
from gpuchain.kube import NODE, Cluster, KubeError
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA, allocator_of
from gpuchain.kube.gpu_resources import node_gpu_resources


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """Outcome of one check: ``ok``, a one-line ``message`` (what failed and the fix), and facts."""

    link: str
    ok: bool
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def check_driver(backend: GpuBackend) -> CheckResult:
    """NVML answers and lists at least one GPU."""
    try:
        inv = backend.inventory()
    except GpuError as exc:
        return CheckResult(link="driver", ok=False, message=f"NVML not usable: {exc}")
    if not inv.gpus:
        return CheckResult(
            link="driver", ok=False, message="driver loaded but no GPU enumerated: check `lspci | grep -i nvidia`"
        )
    details = {"driverVersion": inv.driver.version, "cudaVersion": inv.driver.cuda_version, "gpus": len(inv.gpus)}
    msg = f"driver {inv.driver.version} (CUDA {inv.driver.cuda_version}) sees {len(inv.gpus)} GPU(s)"
    return CheckResult(link="driver", ok=True, message=msg, details=details)


def check_toolkit(backend: GpuBackend, dev_dir: str | Path = "/dev") -> CheckResult:
    """The NVIDIA runtime injected device nodes into this container and NVML works through them."""
    dev = Path(dev_dir)
    missing = [name for name in ("nvidiactl",) if not (dev / name).exists()]
    gpus = sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    if missing or not gpus:
        absent = ", ".join([*(f"/dev/{m}" for m in missing), *([] if gpus else ["/dev/nvidia<N>"])])
        return CheckResult(
            link="toolkit",
            ok=False,
            message=f"{absent} not injected: the pod did not run with the NVIDIA runtime "
            "(check runtimeClassName nvidia and the container toolkit's runtime config)",
        )
    driver = check_driver(backend)
    if not driver.ok:
        return CheckResult(link="toolkit", ok=False, message=f"device nodes present but {driver.message}")
    return CheckResult(
        link="toolkit",
        ok=True,
        message=f"runtime injected {len(gpus)} GPU device(s); {driver.message}",
        details=driver.details,
    )


class CudaApi(Protocol):
    """The two CUDA driver API calls the check needs (real: ``libcuda.so.1`` over ctypes)."""

    def init(self) -> int: ...

    def device_count(self) -> int: ...


class LibCuda:
    """`CudaApi` over ``libcuda.so.1``; OSError when the library is not present."""

    def __init__(self, name: str = "libcuda.so.1") -> None:
        self._lib = ctypes.CDLL(name)

    def init(self) -> int:
        return int(self._lib.cuInit(0))

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        rc = int(self._lib.cuDeviceGetCount(ctypes.byref(count)))
        if rc != 0:
            raise OSError(f"cuDeviceGetCount returned CUDA error {rc}")
        return count.value


def check_cuda(api: CudaApi | None = None) -> CheckResult:
    """CUDA initialises and enumerates devices."""
    try:
        cuda = api if api is not None else LibCuda()
    except OSError as exc:
        return CheckResult(
            link="cuda", ok=False, message=f"libcuda.so.1 not loadable ({exc}): the toolkit did not mount the driver"
        )
    try:
        rc = cuda.init()
        if rc != 0:
            return CheckResult(
                link="cuda", ok=False, message=f"cuInit failed with CUDA error {rc}: driver/CUDA mismatch or no device"
            )
        count = cuda.device_count()
    except OSError as exc:
        return CheckResult(link="cuda", ok=False, message=str(exc))
    if count < 1:
        return CheckResult(link="cuda", ok=False, message="CUDA initialised but reports 0 devices")
    return CheckResult(link="cuda", ok=True, message=f"CUDA sees {count} device(s)", details={"devices": count})


def check_plugin(cluster: Cluster, node_name: str) -> CheckResult:
    """The device plugin registered: the node advertises at least one GPU resource."""
    try:
        node = cluster.get(NODE, name=node_name)
    except KubeError as exc:
        return CheckResult(link="plugin", ok=False, message=f"cannot read node {node_name}: {exc}")
    field = "allocatable" if (node.get("status") or {}).get("allocatable") else "capacity"
    resources = {k: v for k, v in node_gpu_resources(node, field).items() if v > 0}
    if not resources and allocator_of(node) == DRA:
        return CheckResult(
            link="plugin",
            ok=True,
            message=f"node {node_name}'s GPUs are the DRA driver's ({ALLOCATOR_LABEL}={DRA}): none announced",
        )
    if not resources:
        return CheckResult(
            link="plugin",
            ok=False,
            message=f"node {node_name} advertises no nvidia.com/gpu or nvidia.com/mig-* resource: "
            "is the device plugin running and registered with the kubelet?",
        )
    listing = ", ".join(f"{k}={v}" for k, v in sorted(resources.items()))
    return CheckResult(
        link="plugin", ok=True, message=f"node {node_name} advertises {listing}", details={"resources": resources}
    )
