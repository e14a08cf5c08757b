"""The first command anyone runs, ``nvidia-smi`` on the node: does NVML answer here?

The cluster view can only infer the driver from pods and labels; on the node itself the driver
link is one question to NVML. ``ask()`` is the shell (open a backend, read the inventory);
``local_chain()`` turns the answer into the same Link/Finding shapes as the cluster walk (pure).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

from gpuchain.doctor.model import Finding, Link, LinkState, NodeChain, Severity
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import DriverNotLoadedError, GpuError, GpuLostError, LibraryNotFoundError


@dataclass(frozen=True)
class LocalAnswer:
    """What NVML said on this node: the driver and GPUs, or the error class and message."""

    node: str
    kernel: str
    driver: str | None = None
    cuda: str | None = None
    gpus: tuple[str, ...] = ()
    error: str | None = None  #: "library" | "not-loaded" | "lost" | "other"
    message: str = ""


def ask(open_backend: Callable[[], GpuBackend], node: str | None = None, kernel: str | None = None) -> LocalAnswer:
    """Open the backend and read its inventory once; errors become part of the answer."""
    name, release = node or platform.node(), kernel or platform.release()
    try:
        backend = open_backend()
        try:
            inv = backend.inventory()
        finally:
            backend.close()
    except LibraryNotFoundError as exc:
        return LocalAnswer(name, release, error="library", message=str(exc))
    except DriverNotLoadedError as exc:
        return LocalAnswer(name, release, error="not-loaded", message=str(exc))
    except GpuLostError as exc:
        return LocalAnswer(name, release, error="lost", message=str(exc))
    except GpuError as exc:
        return LocalAnswer(name, release, error="other", message=str(exc))
    gpus = tuple(f"GPU {g.index}: {g.name} ({g.uuid})" for g in inv.gpus)
    return LocalAnswer(name, release, inv.driver.version, inv.driver.cuda_version, gpus)


_ERRORS = {
    "library": (
        "driver.nvml-missing",
        "libnvidia-ml.so cannot be loaded on this node: no NVIDIA driver user space is installed here "
        "(what 'nvidia-smi: command not found' means).",
        "kubectl -n gpu-operator get pods -o wide --field-selector spec.nodeName={node}   # is the driver pod running?",
    ),
    "not-loaded": (
        "driver.not-loaded",
        "the NVIDIA libraries are present but the kernel module is not loaded on kernel {kernel}: usually a driver "
        "built for another kernel.",
        "dmesg | grep -i nvidia; modinfo nvidia | grep vermagic   # compare with uname -r",
    ),
    "lost": (
        "gpu.lost",
        "a GPU on this node stopped answering NVML (fell off the bus).",
        "dmesg | grep -i xid   # then drain the node and reset the GPU or reboot",
    ),
    "other": (
        "driver.nvml-error",
        "NVML answered with an error on this node.",
        "nvidia-smi -q | head -40",
    ),
}


def local_chain(answer: LocalAnswer) -> NodeChain:
    """The driver link as seen from inside the node; the links above need the cluster view."""
    rest = tuple(Link(name, LinkState.SKIPPED, "needs the cluster view") for name in ("toolkit", "device-plugin"))
    if answer.error is None:
        if not answer.gpus:
            finding = Finding(
                "driver.no-gpus",
                Severity.ERROR,
                "driver",
                "NVML answers but sees no GPU on this node.",
                (f"driver {answer.driver}, 0 GPUs", f"kernel {answer.kernel}"),
                "lspci -nn | grep -i nvidia   # is the GPU on the PCI bus at all?",
                node=answer.node,
                root=True,
            )
            return NodeChain(answer.node, (Link("driver", LinkState.BROKEN, "no GPUs"), *rest), (finding,))
        summary = f"NVML: driver {answer.driver}, CUDA {answer.cuda}, {len(answer.gpus)} GPU(s)"
        return NodeChain(answer.node, (Link("driver", LinkState.OK, summary), *rest))
    fid, cause, fix = _ERRORS[answer.error]
    finding = Finding(
        fid,
        Severity.ERROR,
        "driver",
        cause.format(kernel=answer.kernel),
        (f"NVML: {answer.message}", f"kernel {answer.kernel}"),
        fix.format(node=answer.node),
        node=answer.node,
        root=True,
    )
    return NodeChain(answer.node, (Link("driver", LinkState.BROKEN, f"NVML: {answer.error}"), *rest), (finding,))
