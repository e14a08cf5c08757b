"""The burn-in judges a GPU's health probes by their resolution (``gpu.probes.burn_in_verdict``),
the same way in NvmlBackend (over the fake pynvml) and SimBackend.

A burn-in asks whether a repair worked. Retired pages at DCGM's limit (resolution none) are a count
kept in the InfoROM (NVIDIA's Dynamic Page Retirement guide, docs.nvidia.com/deploy/
dynamic-page-retirement): no reset or reboot lowers it, so a burn-in that failed on it asked for a
reboot that could not help and then gave the GPU up, while a GPU in the same state that never
entered the loop kept serving (review of 2026-12-03). Such a probe is reported in the check's
detail and does not fail it; a probe a reset is for (a retirement still pending) still does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

import pytest
from fakes.fake_libcuda import FakeCuda
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu import cuda
from gpuchain.gpu.burnin import BurnInConfig
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.probes import PROBE_TABLE, PROBES, burn_in_verdict
from gpuchain.gpu.sim import SimBackend

LIMIT = PROBES["retired-pages-limit"]
PENDING = PROBES["retired-pages-pending"]


def test_only_probes_a_repair_is_for_fail_and_the_others_are_named() -> None:
    assert burn_in_verdict(()) == (True, "")
    assert burn_in_verdict(("retired-pages-limit",)) == (True, f"needs no repair: {LIMIT}")
    assert burn_in_verdict(("retired-pages-pending", "retired-pages-limit")) == (
        False,
        f"{PENDING}; needs no repair: {LIMIT}",
    )
    assert burn_in_verdict(("no-such-probe",)) == (False, "no-such-probe")  # unknown: a reset, as an unknown XID


@pytest.mark.parametrize("name", sorted(PROBE_TABLE))
def test_every_probe_fails_the_burn_in_exactly_when_its_resolution_is_a_repair(name: str) -> None:
    passed, detail = burn_in_verdict((name,))
    assert passed is not PROBE_TABLE[name].resolution.repairs
    assert PROBES[name] in detail


class CudaRunner:
    """Answers the CUDA child with gpuchain.gpu.cuda's own checks run against the fake libcuda."""

    def __init__(self, bus_id: str) -> None:
        self.bus_id = bus_id
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        config = cuda.CudaCheckConfig(arith_elements=1024, min_memory_bytes=4096)
        result = cuda.run_checks(FakeCuda([self.bus_id]), bus_id=self.bus_id, config=config)  # type: ignore[arg-type]
        return subprocess.CompletedProcess(list(argv), 0, json.dumps(result.to_json()) + "\n", "")


def t4(index: int, **readings: object) -> tuple[SimBackend, NvmlBackend, CudaRunner]:
    sim = SimBackend.from_preset("t4-x4")
    sim.set_health_readings(index, **readings)  # type: ignore[arg-type]
    runner = CudaRunner(sim.inventory().gpu(index).pci_bus_id)
    nvml = NvmlBackend(
        nvml=FakeNvml(sim), run_command=runner, burn_in_config=BurnInConfig(dcgm=False), sleep=lambda _s: None
    )
    return sim, nvml, runner


def test_retired_pages_at_the_limit_pass_both_burn_ins_and_are_reported() -> None:
    sim, nvml, runner = t4(3, retired_pages_sbe=53, retired_pages_dbe=10)
    real = nvml.burn_in(3)
    assert real.passed, real.summary()
    (pages,) = (c for c in real.checks if c.name == "retired-pages")
    assert (pages.passed, pages.detail) == (True, f"needs no repair: {LIMIT}")
    assert f"retired-pages: ok (needs no repair: {LIMIT})" in real.summary()
    assert [c.name for c in real.checks if c.name in ("cuda", "memory")] == ["cuda", "memory"] and runner.calls
    modelled = sim.burn_in(3)
    assert modelled.passed, modelled.summary()
    assert (modelled.checks[0].name, modelled.checks[0].detail) == ("nvml", pages.detail)


def test_a_pending_retirement_still_fails_both_burn_ins_and_the_limit_is_named_beside_it() -> None:
    sim, nvml, runner = t4(3, retired_pages_pending=True, retired_pages_sbe=53, retired_pages_dbe=10)
    real = nvml.burn_in(3)
    assert not real.passed and runner.calls == []  # nothing runs on a GPU NVML found at fault
    assert f"retired-pages: {PENDING}; needs no repair: {LIMIT}" in real.summary()
    modelled = sim.burn_in(3)
    assert not modelled.passed and modelled.reasons["cuda"] == "not run: an NVML check failed"
    assert modelled.checks[0].detail == f"{PENDING}; needs no repair: {LIMIT}"
