"""NVIDIA's mock NVML (``libnvidia-ml.so`` from k8s-test-infra) loaded by the real nvidia-ml-py.

It skips, naming the reason scripts/build-peers recorded, while its Go module cannot be had from
the Go module proxy (see the README's test section). go-nvml's DGX A100 mock, which NVIDIA's
device plugin and GFD run on as peers (test_nvidia_plugin_peer.py, test_nvidia_gfd_peer.py,
test_nvidia_real_kubelet.py), is a Go package, not a library nvidia-ml-py can load, so it does
not stand in for this one.
"""

from __future__ import annotations

import pytest

from peers.binaries import peer_or_skip


def test_nvml_backend_on_nvidias_mock_nvml() -> None:
    peer_or_skip("mock-nvml")
    pytest.fail("the mock NVML is now built: load it through nvidia-ml-py (LD_LIBRARY_PATH) and run NvmlBackend")
