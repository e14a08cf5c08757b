"""Fixtures shared by every layer's tests: simulated GPUs (the NVML fake is in fakes.fake_pynvml)."""

from __future__ import annotations

import pytest
from fakes.fake_pynvml import nvml_over

from gpuchain.gpu.sim import SimBackend

__all__ = ["nvml_over"]  # older tests import it from here


@pytest.fixture
def h100_sim() -> SimBackend:
    """A simulated HGX H100 node (8 x H100 80GB on NVSwitch)."""
    return SimBackend.from_preset("h100-80gb-x8")


@pytest.fixture
def mig_sim() -> SimBackend:
    """A simulated H100 node partly in MIG mode (the `h100-80gb-x8-mig-mixed` preset)."""
    return SimBackend.from_preset("h100-80gb-x8-mig-mixed")
