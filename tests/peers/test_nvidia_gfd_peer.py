"""NVIDIA's GPU feature discovery v0.18.0 and `gpuchain gfd`, side by side on the same node.

NVIDIA's GFD runs on go-nvml's DGX A100 mock made to match gpuchain's `a100-40gb-x8` preset
(peers/dgxa100.py: the same UUIDs, names, bus ids, driver and CUDA versions, and a bare-metal
sysfs for the PCI class and vGPU capability it reads). Both get the same config file and machine
type file, label once into a feature file, and the test compares the files label by label: no
difference is listed (the last one, `vgpu.present`, was fixed in gpuchain).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from peers.binaries import peer_or_skip
from peers.dgxa100 import GFD, PRESET, needs_root, nvidia_env, on_dgxa100

MACHINE = "DGXA100 920-23687-2530-000"
"""/sys/class/dmi/id/product_name of a DGX A100."""

_TIME_SLICED = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n"
)
CONFIGS = {
    "default": "version: v1\n",
    "mig-single-without-mig": "version: v1\nflags:\n  migStrategy: single\n",
    "mig-mixed-without-mig": "version: v1\nflags:\n  migStrategy: mixed\n",
    "time-slicing": _TIME_SLICED,
    "time-slicing-renamed": _TIME_SLICED.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n"),
    # GFD ignores a custom rename and a device subset, as the plugin does (DisableResourceNamingInConfig).
    "time-slicing-custom-rename": _TIME_SLICED.replace(
        "replicas: 4\n", "replicas: 4\n        rename: shared-gpu\n        devices: [0, 1]\n"
    ),
    "mps": _TIME_SLICED.replace("timeSlicing", "mps"),
}
"""Config files both read (NVIDIA's config v1), by test id."""


def _labels(path: Path) -> dict[str, str]:
    """A feature file's labels (NFD skips comment lines; gpuchain's sim marks its file with one)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_same_labels_as_nvidias_gfd(config: str, tmp_path: Path) -> None:
    binary = peer_or_skip(GFD)
    needs_root()
    cfg, machine = tmp_path / "config.yaml", tmp_path / "product_name"
    cfg.write_text(CONFIGS[config])
    machine.write_text(MACHINE + "\n")
    common = ["--config-file", str(cfg), "--machine-type-file", str(machine), "--oneshot", "--no-timestamp"]
    theirs, ours = tmp_path / "nvidia.gfd", tmp_path / "gpuchain.gfd"
    nvidia = subprocess.run(
        on_dgxa100([str(binary), *common, "--output-file", str(theirs)], tmp_path),
        env=nvidia_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert nvidia.returncode == 0, nvidia.stderr[-3000:]
    gpuchain = subprocess.run(
        [sys.executable, "-m", "gpuchain", "gfd", "--backend", "sim", "--preset", PRESET, *common, "--output-file", str(ours)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert gpuchain.returncode == 0, gpuchain.stderr[-3000:]
    nvidia_labels, our_labels = _labels(theirs), _labels(ours)
    assert nvidia_labels["nvidia.com/gpu.count"] == "8", "NVIDIA's GFD did not see the mock's eight GPUs"
    differences = {
        key: (nvidia_labels.get(key), our_labels.get(key))
        for key in sorted(nvidia_labels.keys() | our_labels.keys())
        if nvidia_labels.get(key) != our_labels.get(key)
    }
    assert differences == {}, "label -> (NVIDIA's value, gpuchain's value), None where one has no such label"
