"""Our GPU catalog and our fake pynvml against what real A100/H100/B200/GB200 nodes report.

The facts are NVIDIA's real-hardware nvidia-smi captures (tests/peers/hardware/README.md names
the source). Where our fake or catalog disagrees, the capture is right.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu import catalog
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend

CAPTURES: dict[str, Any] = json.loads((Path(__file__).parent / "hardware" / "nvidia-smi-captures.json").read_text())
#: The preset whose GPUs are the captured board (B200 and GB200 have no preset).
PRESETS = {"a100": "a100-40gb-x8", "h100": "h100-80gb-x8"}


def _mib(text: str) -> int:
    return int(text.removesuffix(" MiB"))


@pytest.mark.parametrize("board", sorted(CAPTURES))
def test_the_catalog_knows_the_captured_board(board: str) -> None:
    gpu = CAPTURES[board]["gpus"][0]
    model = catalog.model_for_name(gpu["product_name"], int(gpu["pci_device_id"], 16))
    assert model is not None, f"{gpu['product_name']} ({gpu['pci_device_id']}) is not catalogued"
    assert model.name == gpu["product_name"]
    assert model.memory_mib == _mib(gpu["fb_memory_total"]), "NVML's total is nvidia-smi's FB total"


@pytest.mark.parametrize("board", sorted(PRESETS))
def test_the_fake_answers_what_the_board_answers(board: str) -> None:
    capture = CAPTURES[board]
    real = capture["gpus"][0]
    fake = FakeNvml(SimBackend.from_preset(PRESETS[board]))
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    pci = fake.nvmlDeviceGetPciInfo(h)
    assert fake.nvmlDeviceGetName(h) == real["product_name"]
    assert pci.pciDeviceId == int(real["pci_device_id"], 16)
    assert fake.nvmlDeviceGetMemoryInfo(h).total // 2**20 == _mib(real["fb_memory_total"])
    shape = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")  # nvidia-smi's bus id: 8-digit domain
    assert shape.match(real["pci_bus_id"]) and shape.match(pci.busId), (real["pci_bus_id"], pci.busId)
    uuid = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    assert uuid.match(real["uuid"]) and uuid.match(fake.nvmlDeviceGetUUID(h))
    assert re.match(r"^\d{3}\.\d+(\.\d+)?$", capture["driver_version"])
    assert re.match(r"^\d{3}\.\d+(\.\d+)?$", fake.nvmlSystemGetDriverVersion())


@pytest.mark.parametrize("board", sorted(PRESETS))
def test_nvml_backend_reports_the_captured_identity(board: str) -> None:
    real = CAPTURES[board]["gpus"][0]
    backend = NvmlBackend(nvml=FakeNvml(SimBackend.from_preset(PRESETS[board])))
    gpu = backend.inventory().gpus[0]
    assert (gpu.name, gpu.pci_device_id, gpu.memory_mib) == (
        real["product_name"],
        int(real["pci_device_id"], 16),
        _mib(real["fb_memory_total"]),
    )
    assert gpu.mig_enabled is (real["current_mig"] == "Enabled")
