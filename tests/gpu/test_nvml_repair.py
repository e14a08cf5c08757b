"""NvmlBackend's repair calls against the fake pynvml (tests/fakes): the reset runs the driver's
``nvidia-smi --gpu-reset -i N`` only when allowed, reports the GPU recovered to event subscribers,
and the burn-in reads NVML (row remapping) and never claims the CUDA or memory tests it cannot run.
Nothing here touches real hardware: the command runner is a recorder."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.errors import GpuError, NotSupportedError
from gpuchain.gpu.model import EventKind
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend


class Recorder:
    def __init__(self, rc: int = 0, stderr: str = "") -> None:
        self.calls: list[list[str]] = []
        self.rc = rc
        self.stderr = stderr

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, self.rc, "", self.stderr)


def backend(sim: SimBackend, runner: Recorder) -> NvmlBackend:
    return NvmlBackend(nvml=FakeNvml(sim), probe_interval=0.2, run_command=runner)  # type: ignore[arg-type]


def test_reset_is_refused_unless_allowed(h100_sim: SimBackend) -> None:
    runner = Recorder()
    nvml = backend(h100_sim, runner)
    with pytest.raises(NotSupportedError, match="nvidia-smi -r -i 2"):
        nvml.reset_gpu(2)
    assert runner.calls == []


def test_allowed_reset_runs_the_drivers_reset_and_reports_a_failure(h100_sim: SimBackend) -> None:
    runner = Recorder(rc=3, stderr="Unable to reset this GPU because it's being used by some other process")
    nvml = backend(h100_sim, runner)
    nvml.allow_reset = True
    with pytest.raises(GpuError, match="exit 3.*being used by some other process"):
        nvml.reset_gpu(2)
    assert runner.calls == [["nvidia-smi", "--gpu-reset", "-i", "2"]]


async def test_a_reset_gpu_is_reported_recovered_to_subscribers(h100_sim: SimBackend) -> None:
    nvml = backend(h100_sim, Recorder())
    nvml.allow_reset = True
    uuid = h100_sim.inventory().gpu(4).uuid
    stream = nvml.events()
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.3)  # the watcher is subscribed
    await asyncio.to_thread(nvml.reset_gpu, 4)
    event = await asyncio.wait_for(first, 5)
    assert (event.kind, event.gpu_uuid) == (EventKind.GPU_RECOVERED, uuid)
    await stream.aclose()


def test_burn_in_reads_row_remapping_and_skips_what_it_cannot_run(h100_sim: SimBackend) -> None:
    nvml = backend(h100_sim, Recorder())
    result = nvml.burn_in(1)
    assert result.passed
    assert "cuda" in result.skipped and "memory" in result.skipped
    assert [c.name for c in result.checks][:2] == ["nvml", "row-remap"]
    h100_sim.set_telemetry(1, row_remap_failure=1)
    failed = nvml.burn_in(1)
    assert not failed.passed and "row-remap: row remapping failed" in failed.summary()
    h100_sim.lose_gpu(6)
    assert not nvml.burn_in(6).passed
