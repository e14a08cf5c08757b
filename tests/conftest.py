"""Fixtures shared by every layer's tests: simulated GPUs and the fake pynvml built from them."""

from __future__ import annotations

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend


@pytest.fixture
def h100_sim() -> SimBackend:
    """A simulated HGX H100 node (8 x H100 80GB on NVSwitch)."""
    return SimBackend.from_preset("h100-80gb-x8")


@pytest.fixture
def mig_sim() -> SimBackend:
    """A simulated H100 node partly in MIG mode (the `h100-80gb-x8-mig-mixed` preset)."""
    return SimBackend.from_preset("h100-80gb-x8-mig-mixed")


def nvml_over(sim: SimBackend, **kwargs: object) -> NvmlBackend:
    """An NvmlBackend whose pynvml is the fake answering from ``sim``."""
    return NvmlBackend(nvml=FakeNvml(sim, **kwargs), probe_interval=0.2)  # type: ignore[arg-type]
