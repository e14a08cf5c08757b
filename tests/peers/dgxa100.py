"""NVIDIA's device plugin and GFD (v0.18.0) on go-nvml's DGX A100 mock, made to match gpuchain's node.

scripts/build-peers builds both from NVIDIA's module with NVML pointed at the mock
(tests/peers/nvidia-plugin says how). The mock makes up part of its node (random UUIDs, "Mock"
names, its own bus ids and driver), and NVIDIA's components read the rest from the host's sysfs,
which has no such GPUs. The helpers here fill both from gpuchain's simulated node, so that the
two stacks describe the same eight GPUs and any difference in their answers is theirs
(``on_dgxa100`` with ``nvidia_env``):

- the mock's node (UUIDs, names, PCI bus ids, driver and CUDA versions) through
  ``GPUCHAIN_MOCK_NODE``;
- ``/sys/bus/pci/devices`` holding one directory per GPU as a bare-metal A100 has it (vendor,
  device, class, NUMA node, an empty BAR list, a config space without capabilities: no vGPU),
  which NVIDIA's plugin reads for NUMA topology and GFD for ``gpu.mode`` and ``vgpu.present``;
- where a test plays the kubelet, ``/var/lib/kubelet/device-plugins``, a path NVIDIA's plugin
  hard-codes whatever ``--kubelet-socket`` says, bound on the test's socket directory, under a
  tmpfs over ``/var/lib`` so nothing is created on the host.

Those are mounts, made in a mount namespace of the NVIDIA process's own (``unshare -m``: private
propagation, gone with the process). That needs root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuchain.gpu.model import Inventory
from gpuchain.gpu.sim import SimBackend

PRESET = "a100-40gb-x8"
"""gpuchain's simulated DGX A100: the mock's GPUs, eight A100-SXM4-40GB behind NVSwitch."""
PLUGIN = "nvidia-device-plugin-dgxa100"
GFD = "gpu-feature-discovery-dgxa100"

_FAKE_SYSFS = 'mount --bind "$0" /sys/bus/pci/devices && exec "$@"'
_FAKE_SYSFS_AND_SOCKETS = (
    'mount --bind "$0" /sys/bus/pci/devices'
    " && mount -t tmpfs gpuchain-nvidia-peer /var/lib && mkdir -p /var/lib/kubelet/device-plugins"
    ' && mount --bind "$1" /var/lib/kubelet/device-plugins && shift && exec "$@"'
)


def inventory() -> Inventory:
    """What gpuchain's simulated DGX A100 reports: the node both stacks are given."""
    return SimBackend.from_preset(PRESET).inventory()


def mock_node(inv: Inventory) -> str:
    """``GPUCHAIN_MOCK_NODE`` for ``inv``: what the mock answers for its GPUs and driver."""
    major, minor = inv.driver.cuda_major_minor
    gpus = [{"uuid": g.uuid, "name": g.name, "pciBusId": g.pci_bus_id} for g in inv.gpus]
    return json.dumps(
        {"driverVersion": inv.driver.version, "cudaDriverVersion": int(major) * 1000 + int(minor) * 10, "gpus": gpus}
    )


def sysfs_address(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as sysfs names the device: ``0000:18:00.0``."""
    return nvml_bus_id.lower().removeprefix("0000")


def pci_devices(inv: Inventory, root: Path) -> Path:
    """``root`` as the ``/sys/bus/pci/devices`` of ``inv``'s GPUs on bare metal."""
    for gpu in inv.gpus:
        dev = root / sysfs_address(gpu.pci_bus_id)
        dev.mkdir(parents=True)
        device_id = gpu.pci_device_id >> 16
        pci_class = gpu.pci_class if gpu.pci_class is not None else 0x030200
        (dev / "vendor").write_text("0x10de\n")
        (dev / "device").write_text(f"0x{device_id:04x}\n")
        (dev / "class").write_text(f"0x{pci_class:06x}\n")
        (dev / "numa_node").write_text(f"{gpu.numa_node if gpu.numa_node is not None else -1}\n")
        (dev / "resource").write_text("0x0000000000000000 0x0000000000000000 0x0000000000000000\n")
        # The first 256 bytes of config space as a privileged reader sees them: ids, class, and a
        # status word without the capability-list bit (a bare-metal GPU has no vGPU capability).
        config = bytearray(256)
        config[0:4] = (0x10DE | device_id << 16).to_bytes(4, "little")
        config[9:12] = pci_class.to_bytes(3, "little")
        (dev / "config").write_bytes(bytes(config))
    return root


def needs_root() -> None:
    """Skip the test unless it can make the mounts ``on_dgxa100`` makes."""
    if os.geteuid() != 0:
        pytest.skip("NVIDIA's components need a private /sys/bus/pci/devices: a mount namespace, which needs root")


def on_dgxa100(argv: list[str], workdir: Path, socket_dir: Path | None = None) -> list[str]:
    """``argv`` in a mount namespace where the host looks like ``inventory()``'s node (needs root).

    With ``socket_dir``, that is its /var/lib/kubelet/device-plugins; without, the directory stays
    what it is where the command runs (on the real node: the kubelet's).
    """
    sysfs = workdir / "pci-devices"
    if not sysfs.exists():
        pci_devices(inventory(), sysfs)
    if socket_dir is None:
        return ["unshare", "-m", "sh", "-c", _FAKE_SYSFS, str(sysfs), *argv]
    return ["unshare", "-m", "sh", "-c", _FAKE_SYSFS_AND_SOCKETS, str(sysfs), str(socket_dir), *argv]


def nvidia_env() -> dict[str, str]:
    """The environment NVIDIA's components run with: PATH and the mock's node, nothing of the test's."""
    return {"PATH": os.environ["PATH"], "GPUCHAIN_MOCK_NODE": mock_node(inventory())}
