"""Typed GPU errors. Every NVML failure becomes one of these, with a message that says what to do."""

from __future__ import annotations


class GpuError(Exception):
    """Base of every error the GPU layer raises on purpose."""


class LibraryNotFoundError(GpuError):
    """libnvidia-ml.so.1 cannot be loaded: no driver, or a container without the NVIDIA runtime."""


class DriverNotLoadedError(GpuError):
    """The library loaded but the kernel module is not running."""


class GpuLostError(GpuError):
    """The GPU fell off the bus (XID 79) or otherwise stopped answering."""


class NotSupportedError(GpuError):
    """The device or driver does not support the call (MIG on an L4, telemetry on some SKUs)."""


class NoPermissionError(GpuError):
    """The caller lacks the privilege the call needs (MIG changes need root or CAP_SYS_ADMIN)."""


class NotFoundError(GpuError):
    """A GPU, MIG device or profile named by the caller does not exist."""


class InvalidConfigError(GpuError, ValueError):
    """A topology or layout the caller supplied is invalid; the message names the field."""


class ReleasedError(GpuError):
    """The backend has let go of the driver (``GpuBackend.release``) while a GPU on this node is
    reset; the call is refused until ``reacquire``. Not a fault of any GPU: consumers skip the
    reading, they never mark a device unhealthy for it."""


class NotReacquiredError(GpuError):
    """A backend let go of the driver to reset a GPU and could not take it back afterwards: it stays
    released (every reading refused with ReleasedError, events paused) until ``reacquire`` succeeds.
    The caller must retry ``reacquire`` (or restart the agent). ``reset_error`` is the reset's own
    failure, None when the reset itself went through."""

    def __init__(self, message: str, reset_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.reset_error = reset_error
