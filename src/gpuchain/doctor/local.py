"""The first command anyone runs, ``nvidia-smi`` on the node: does NVML answer here?

The cluster view can only infer the driver from pods and labels; on the node itself the driver
link is one question to NVML. ``ask()`` is the shell (open a backend, read the inventory);
``local_chain()`` turns the answer into the same Link/Finding shapes as the cluster walk (pure).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Link, LinkState, NodeChain, Severity
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import DriverNotLoadedError, GpuError, GpuLostError, LibraryNotFoundError


@dataclass(frozen=True, kw_only=True)
class LocalAnswer:
    """What NVML said on this node: the driver and GPUs, or the error class and message."""

    node: str
    kernel: str
    driver: str | None = None
    cuda: str | None = None
    gpus: tuple[str, ...] = ()
    error: str | None = None  #: "library" | "not-loaded" | "lost" | "other"
    message: str = ""


def ask(open_backend: Callable[[], GpuBackend], *, node: str | None = None, kernel: str | None = None) -> LocalAnswer:
    """Open the backend and read its inventory once; errors become part of the answer."""
    name, release = node or platform.node(), kernel or platform.release()
    try:
        backend = open_backend()
        try:
            inv = backend.inventory()
        finally:
            backend.close()
    except LibraryNotFoundError as exc:
        return LocalAnswer(node=name, kernel=release, error="library", message=str(exc))
    except DriverNotLoadedError as exc:
        return LocalAnswer(node=name, kernel=release, error="not-loaded", message=str(exc))
    except GpuLostError as exc:
        return LocalAnswer(node=name, kernel=release, error="lost", message=str(exc))
    except GpuError as exc:
        return LocalAnswer(node=name, kernel=release, error="other", message=str(exc))
    gpus = tuple(f"GPU {g.index}: {g.name} ({g.uuid})" for g in inv.gpus)
    return LocalAnswer(node=name, kernel=release, driver=inv.driver.version, cuda=inv.driver.cuda_version, gpus=gpus)


#: Why --local's fixes are not simulated: they change the host, which no cluster object describes.
HOST_ONLY = "work on the host itself (packages, kernel, hardware): no scenario fact or cluster object models it"

_ERRORS = {
    "library": (
        "driver.nvml-missing",
        "libnvidia-ml.so cannot be loaded on this node: no NVIDIA driver user space is installed here "
        "(what 'nvidia-smi: command not found' means).",
        FixOp.NODE,
        "install the NVIDIA driver on this node (the distribution's driver package for its kernel), or let the GPU "
        "stack's driver container install it (ClusterPolicy spec.driver.enabled=true, and no "
        "nvidia.com/gpu.deploy.driver=false label on the node)",
    ),
    "not-loaded": (
        "driver.not-loaded",
        "the NVIDIA libraries are present but the kernel module is not loaded on kernel {kernel}: usually a driver "
        "built for another kernel.",
        FixOp.NODE,
        "rebuild the driver for the running kernel {kernel} (dkms autoinstall, or the driver package built for it) "
        "and modprobe nvidia, or boot the kernel the driver was built for",
    ),
    "lost": (
        "gpu.lost",
        "a GPU on this node stopped answering NVML (fell off the bus).",
        FixOp.HARDWARE,
        "drain the node, reset the GPU (nvidia-smi -r) or reboot; replace the GPU if it falls off again",
    ),
    "other": (
        "driver.nvml-error",
        "NVML answered with an error on this node.",
        FixOp.NODE,
        "reload the driver (reboot the node); if NVML still fails, reinstall the driver for this kernel",
    ),
}


def _host_fix(op: FixOp, node: str, action: str) -> tuple[str, Fix]:
    """The fix as data (marked as host work the simulator does not apply) and as text."""
    fix = Fix(op, node, {"action": action, NOT_SIMULATED: HOST_ONLY})
    text = (
        f"# hardware, no command fixes it: {action}"
        if op is FixOp.HARDWARE
        else f"# on node {node} (outside the cluster): {action}"
    )
    return text, fix


def local_chain(answer: LocalAnswer) -> NodeChain:
    """The driver link as seen from inside the node; the links above need the cluster view."""
    rest = tuple(Link(name, LinkState.SKIPPED, "needs the cluster view") for name in ("toolkit", "device-plugin"))
    if answer.error is None:
        if not answer.gpus:
            text, action = _host_fix(
                FixOp.HARDWARE,
                answer.node,
                "the GPU is not on the PCI bus (lspci -nn | grep -i nvidia shows nothing): reseat it or enable its "
                "slot in the BIOS/BMC",
            )
            finding = Finding(
                id="driver.no-gpus",
                severity=Severity.ERROR,
                link="driver",
                cause="NVML answers but sees no GPU on this node.",
                evidence=(f"driver {answer.driver}, 0 GPUs", f"kernel {answer.kernel}"),
                fix=text,
                node=answer.node,
                root=True,
                action=action,
            )
            return NodeChain(answer.node, (Link("driver", LinkState.BROKEN, "no GPUs"), *rest), (finding,))
        summary = f"NVML: driver {answer.driver}, CUDA {answer.cuda}, {len(answer.gpus)} GPU(s)"
        return NodeChain(answer.node, (Link("driver", LinkState.OK, summary), *rest))
    fid, cause, op, work = _ERRORS[answer.error]
    cause, work = cause.format(kernel=answer.kernel), work.format(kernel=answer.kernel)
    known = catalog.known_error(answer.message)
    if known is not None and answer.error == "other":
        # NVML's message names the failure (a driver/library version mismatch): its cause and repair.
        cause, work = known.entry.cause, known.entry.fix
    text, action = _host_fix(op, answer.node, work)
    finding = Finding(
        id=fid,
        severity=Severity.ERROR,
        link="driver",
        cause=cause,
        evidence=(f"NVML: {answer.message}", *([known.entry.cite()] if known else []), f"kernel {answer.kernel}"),
        fix=text,
        node=answer.node,
        root=True,
        action=action,
    )
    return NodeChain(answer.node, (Link("driver", LinkState.BROKEN, f"NVML: {answer.error}"), *rest), (finding,))
