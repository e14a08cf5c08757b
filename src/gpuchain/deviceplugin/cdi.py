"""The device plugin's CDI spec: what the names its Allocate answers in CDI mode refer to.

Under ``deviceListStrategy`` ``cdi-annotations`` or ``cdi-cri`` Allocate answers CDI names
(``k8s.device-plugin.nvidia.com/gpu=<id>``), and the container runtime injects a device only if a
spec in its CDI directory defines that name; without one it refuses the container. So the plugin
writes that spec itself, as NVIDIA's does (``/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json``,
the file name CDI derives from the kind), every time it (re)serves: the spec names exactly the
units it announces, so a GPU or MIG device that is gone (a lost GPU, a new MIG layout, a
withheld GPU) leaves the spec with the next re-serve. A config that leaves CDI mode removes it.

The layout is ``nvidia-ctk cdi generate``'s (``gpu.cdi``): one device per unit, named as
``deviceIDStrategy`` names ids (GPU or MIG UUID; ``3`` or ``3:1``), carrying its GPU's
``/dev/nvidiaN`` (a MIG device also its capability devices), an ``all`` device with every unit's
nodes, and spec-wide the driver's control devices and ``NVIDIA_VISIBLE_DEVICES=void`` (so
NVIDIA's legacy runtime hook, should it also run, injects nothing more). The driver libraries
``nvidia-ctk`` adds as mounts and hooks are not written: gpuchain does not inspect the driver's
files, so on a GPU node they come from the toolkit (its own ``nvidia.com/gpu`` spec or its
runtime hook).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuchain.api.config.v1.flags import DeviceIdStrategy
from gpuchain.deviceplugin.allocate import CDI_KIND, gpu_device_node, mig_capability_nodes, visible_ids
from gpuchain.deviceplugin.resources import Resource
from gpuchain.gpu import cdi

SPEC_FILE = CDI_KIND.replace("/", "-") + ".json"
"""The spec's file name: CDI's ``GenerateNameForSpec`` for the kind (``<vendor>-<class>``)."""
ALL = "all"


def spec_path(cdi_dir: Path) -> Path:
    return cdi_dir / SPEC_FILE


def plugin_spec(
    resources: Sequence[Resource], *, strategy: DeviceIdStrategy, control_nodes: Sequence[str], dev_root: str = "/"
) -> dict[str, Any]:
    """The spec for every unit ``resources`` announce (replicas name their GPU), pure."""
    devices: dict[str, list[str]] = {}
    for res in resources:
        for device in res.devices:
            (name,) = visible_ids([device], strategy)
            devices.setdefault(name, [gpu_device_node(device), *mig_capability_nodes(device)])
    every = list(dict.fromkeys(node for nodes in devices.values() for node in nodes))
    if every:
        devices[ALL] = every
    return cdi.spec(
        CDI_KIND, devices=devices, control_nodes=control_nodes, env=["NVIDIA_VISIBLE_DEVICES=void"], dev_root=dev_root
    )
