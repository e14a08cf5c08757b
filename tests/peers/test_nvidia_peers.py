"""NVIDIA's own components as peers: its mock NVML loaded by the real nvidia-ml-py, and its device
plugin and GFD side by side with ours. Both skip, naming the reason scripts/build-peers recorded,
while their Go modules cannot be had from the Go module proxy (see the README's test section).
"""

from __future__ import annotations

import pytest

from peers.binaries import peer_or_skip


def test_nvml_backend_on_nvidias_mock_nvml() -> None:
    peer_or_skip("mock-nvml")
    pytest.fail("the mock NVML is now built: load it through nvidia-ml-py (LD_LIBRARY_PATH) and run NvmlBackend")


def test_device_plugin_and_gfd_differential_against_nvidias() -> None:
    peer_or_skip("nvidia-device-plugin")
    pytest.fail("NVIDIA's device plugin is now built: write the differential test against it")
