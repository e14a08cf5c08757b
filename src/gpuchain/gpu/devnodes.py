"""The driver's control device nodes a GPU container needs besides its ``/dev/nvidiaN``.

One list for every consumer (the device plugin's ``passDeviceSpecs`` and the DRA plugin's CDI
specs), as NVIDIA's container stack injects them: ``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools`` always, and ``/dev/nvidia-modeset`` only where the driver created it
(it exists only when the nvidia-modeset module is loaded, and a device node that is not there
would make the container fail to start).
"""

from __future__ import annotations

from pathlib import Path

CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
OPTIONAL_CONTROL_DEVICES = ("/dev/nvidia-modeset",)


def control_device_nodes(dev_root: str | Path = "/") -> list[str]:
    """The control devices' paths as the container sees them; optional ones only when present under ``dev_root``.

    ``dev_root`` is where the driver's ``/dev`` is rooted as this process sees it (``/`` for a
    host driver, the driver container's root otherwise).
    """
    root = Path(dev_root)
    return [*CONTROL_DEVICES, *(p for p in OPTIONAL_CONTROL_DEVICES if (root / p.lstrip("/")).exists())]
