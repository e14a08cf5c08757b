"""gpuchain's real NvmlBackend, through the real nvidia-ml-py, on go-nvml's DGX A100 mock as a library.

scripts/build-peers builds ``libnvidia-ml.so.1`` from tests/peers/mock-nvml (main.go there says
what each NVML function answers): go-nvml's mock of a DGX A100 behind the NVML C API. A child
process loads it in place of the driver's library through ``LD_LIBRARY_PATH`` and runs the
production backend on it, no fake ``pynvml`` anywhere: every reading crosses ctypes, the C
structures of go-nvml's nvml.h and the mock.

The expected node is what the mock defines, read from its source,
github.com/NVIDIA/go-nvml@v0.13.0-1 pkg/nvml/mock/dgxa100/dgxa100.go (``New``, ``NewDevice``):
eight devices named "Mock NVIDIA A100-SXM4-40GB", UUID "GPU-" + a random UUID (``uuid.New()``, so
new in every process), PCI bus id "0000:%02x:00.0" of the index, PCI device id 0x20B010DE, minor
number = index, CUDA compute capability 8.0, MIG mode 0, memory 42949672960 bytes total with 0
used and 0 free, driver "550.54.15", CUDA driver version 12040. Two answers are the library's own,
not the mock's (main.go): the bus id written into nvmlPciInfo_t, and the DGX A100's PCIe tree
between GPUs. Everything else the mock does not answer is NVML_ERROR_NOT_SUPPORTED, which the
backend reads as "no such reading" (None) or, for event sets, as a failed event stream.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuchain.gpu.model import DriverInfo, Gpu, GpuLink, Inventory, TopologyLevel
from peers.binaries import peer_or_skip

MOCK_NAME = "Mock NVIDIA A100-SXM4-40GB"
MOCK_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
"""``"GPU-" + uuid.New().String()``: a random (version 4) UUID."""
MOCK_DRIVER = DriverInfo("550.54.15", "12.4")
"""DriverVersion and CudaDriverVersion 12040 (NVML's encoding of CUDA 12.4)."""

_READ = """
import asyncio, dataclasses, json, sys
from pathlib import Path
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.nvml import NvmlBackend

def error(call):
    try:
        call()
    except GpuError as exc:
        return [type(exc).__name__, str(exc)]
    return None

async def first_event(backend):
    async for event in backend.events():
        return event

backend = NvmlBackend(sysfs=Path(sys.argv[1]))
inventory = backend.inventory()
uuids = [g.uuid for g in inventory.gpus]
print(json.dumps({
    "inventory": inventory.to_dict(),
    "telemetry": [dataclasses.asdict(backend.telemetry(u)) for u in uuids],
    "health": [dataclasses.asdict(backend.health_readings(u)) for u in uuids],
    "processes": [list(backend.processes(u)) for u in uuids],
    "mig_mode": [dataclasses.asdict(backend.mig_mode(g.index)) for g in inventory.gpus],
    "gpu_instances": [list(backend.gpu_instances(g.index)) for g in inventory.gpus],
    "unknown_uuid": error(lambda: backend.telemetry("GPU-00000000-0000-4000-8000-000000000000")),
    "xid_event_support": error(backend.xid_event_support),
    "events": error(lambda: asyncio.run(asyncio.wait_for(first_event(backend), 10))),
}))
backend.close()
"""
"""What the child process reads through NvmlBackend, as JSON. The sysfs it is given is empty: the
backend falls back to sysfs for the NUMA node and PCI class NVML does not give, and this host's own
PCI devices (it has one at 0000:00:00.0, the mock's GPU 0) must not answer for the mock's GPUs."""


def _env(library: Path) -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(library.parent)}


@pytest.fixture(scope="module")
def read(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One child process's NvmlBackend readings of the mock (the library is loaded once per process)."""
    library = peer_or_skip("libnvidia-ml.so.1")
    sysfs = tmp_path_factory.mktemp("sysfs")
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(sysfs)], env=_env(library), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def mock_gpu(index: int, uuid: str) -> Gpu:
    """GPU ``index`` of the mock as NvmlBackend reads it (its UUID is the process's random one).

    NUMA node and PCI class are None (the mock has neither, the given sysfs neither); the SM count
    is gpuchain's catalog's for PCI id 0x20B0 (an A100 has 108), as the mock has no
    nvmlDeviceGetAttributes; the bus id is NVML's spelling of the mock's "0000:%02x:00.0".
    """
    return Gpu(
        index=index,
        uuid=uuid,
        name=MOCK_NAME,
        pci_bus_id=f"00000000:{index:02X}:00.0",
        pci_device_id=0x20B010DE,
        memory_mib=42949672960 // (1024 * 1024),
        compute_capability=(8, 0),
        numa_node=None,
        multiprocessors=108,
        mig_capable=True,
        mig_enabled=False,
        minor_number=index,
    )


def dgx_a100_links() -> tuple[GpuLink, ...]:
    """The PCIe tree the library answers (main.go): a switch per GPU pair, a socket per four GPUs.
    No NVLink lanes: the mock answers no NVLink state, so the backend sees no link up."""

    def level(a: int, b: int) -> TopologyLevel:
        if a // 2 == b // 2:
            return TopologyLevel.MULTIPLE
        return TopologyLevel.NODE if a // 4 == b // 4 else TopologyLevel.SYSTEM

    return tuple(GpuLink(a=a, b=b, level=level(a, b)) for a in range(8) for b in range(a + 1, 8))


def as_json(inventory: Inventory) -> Any:
    return json.loads(json.dumps(inventory.to_dict()))


def test_inventory_is_the_dgxa100_mocks_node(read: dict[str, Any]) -> None:
    uuids = [g["uuid"] for g in read["inventory"]["gpus"]]
    assert all(MOCK_UUID.fullmatch(u) for u in uuids), uuids
    assert len(set(uuids)) == 8
    expected = Inventory(MOCK_DRIVER, tuple(mock_gpu(i, u) for i, u in enumerate(uuids)), dgx_a100_links())
    assert read["inventory"] == as_json(expected)


def test_telemetry_and_health_read_the_mocks_memory_and_nothing_else(read: dict[str, Any]) -> None:
    """Every GPU answers by its UUID; the mock has memory (0 used, 0 free) and no counter at all:
    each other reading is None (NOT_SUPPORTED), never an error or a made-up zero."""
    uuids = [g["uuid"] for g in read["inventory"]["gpus"]]
    for uuid, telemetry, health in zip(uuids, read["telemetry"], read["health"], strict=True):
        assert telemetry == {
            "uuid": uuid,
            "memory_used_mib": 0,
            "memory_free_mib": 0,
        } | {k: None for k in telemetry if k not in ("uuid", "memory_used_mib", "memory_free_mib")}
        assert health == {"uuid": uuid, "nvlink": []} | {k: None for k in health if k not in ("uuid", "nvlink")}
    assert read["processes"] == [[]] * 8
    assert read["unknown_uuid"][0] == "NotFoundError"


def test_mig_reads(read: dict[str, Any]) -> None:
    """MIG mode 0 on every GPU, current and pending, and no GPU instance: the mock answers the profile
    info of each catalogued A100 profile (nvmlDeviceGetGpuInstanceProfileInfoV, from its v1 table)
    and lists no instance of it; nothing here creates one (main.go bridges MIG reads only)."""
    assert read["mig_mode"] == [{"current": False, "pending": False}] * 8
    assert read["gpu_instances"] == [[]] * 8


def test_without_event_sets_the_event_stream_fails_at_once(read: dict[str, Any]) -> None:
    """The mock has no event sets: nvmlEventSetCreate answers NOT_SUPPORTED, and the backend raises
    that from ``events()`` (at once, not after its 10 s wait) so the consumer marks its devices
    unhealthy instead of waiting for events that can never come; the XID support check says so too."""
    for key in ("events", "xid_event_support"):
        kind, message = read[key]
        assert kind == "NotSupportedError"
        assert message.startswith("nvmlEventSetCreate: ")


def test_gpus_command_lists_the_mocks_gpus(tmp_path: Path) -> None:
    """`gpuchain gpus --backend nvml -o json` on the mock: its own process, so its own random UUIDs;
    the host's real sysfs, so NUMA node and PCI class are left out (the host has a device at GPU 0's
    bus id)."""
    library = peer_or_skip("libnvidia-ml.so.1")
    gpuchain = Path(sys.executable).parent / "gpuchain"
    done = subprocess.run(
        [str(gpuchain), "gpus", "--backend", "nvml", "-o", "json"],
        env=_env(library),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["driver"] == {"version": MOCK_DRIVER.version, "cudaVersion": MOCK_DRIVER.cuda_version}
    for index, gpu in enumerate(listed["gpus"]):
        assert MOCK_UUID.fullmatch(gpu.pop("uuid"))
        del gpu["numaNode"], gpu["pciClass"]
        assert gpu == {
            "index": index,
            "name": MOCK_NAME,
            "pciBusId": f"00000000:{index:02X}:00.0",
            "pciDeviceId": 0x20B010DE,
            "memoryMib": 40960,
            "computeCapability": [8, 0],
            "multiprocessors": 108,
            "migCapable": True,
            "migEnabled": False,
            "migDevices": [],
            "minorNumber": index,
            "vgpu": False,
        }
    assert len(listed["gpus"]) == 8
    assert [(link["a"], link["b"], link["level"], link["nvlinks"]) for link in listed["links"]] == [
        (link.a, link.b, link.level.short, 0) for link in dgx_a100_links()
    ]
