"""The driver's control device nodes a GPU container needs besides its ``/dev/nvidiaN``.

One list for every consumer (the device plugin's ``passDeviceSpecs`` and the DRA plugin's CDI
specs): ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools`` and
``/dev/nvidia-modeset``, each only where the driver created it. A device node that is not there
would make the runtime refuse to create the container, and ``/dev/nvidia-uvm`` in particular
appears only once the nvidia-uvm module is loaded and ``nvidia-modprobe`` has run (the GPU
Operator's driver validation does that before the device plugin starts). NVIDIA's plugin treats
all four as optional in the same way (k8s-device-plugin internal/plugin/server.go
``apiDeviceSpecs``, v0.18.0), and ``nvidia-ctk cdi generate`` lists only the ones it finds.
"""

from __future__ import annotations

from pathlib import Path

CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def control_device_nodes(dev_root: str | Path = "/") -> list[str]:
    """The control devices' paths as the container sees them, those present under ``dev_root``.

    ``dev_root`` is where the driver's ``/dev`` is rooted as this process sees it (``/`` for a
    host driver, the driver container's root otherwise).
    """
    root = Path(dev_root)
    return [p for p in CONTROL_DEVICES if (root / p.lstrip("/")).exists()]
