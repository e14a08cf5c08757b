"""NvmlBackend's repair calls against the fake pynvml (tests/fakes): the reset runs the driver's
``nvidia-smi --gpu-reset -i UUID`` only when allowed and only where one GPU can be reset alone,
with persistence mode off around it, retried while nvidia-smi says the GPU is in use, and
reports the GPU recovered to event subscribers; the burn-in reads NVML, waits for the NVLink
fabric, then runs the CUDA, memory and DCGM checks as child processes and never claims one that
did not run. Nothing here touches real hardware: the
command runner is a recorder, or PATH leads to fake ``nvidia-smi``/``dcgmi`` scripts."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes.fake_libcuda import FakeCuda
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu import cuda
from gpuchain.gpu.burnin import BurnInConfig
from gpuchain.gpu.errors import GpuError, NotSupportedError
from gpuchain.gpu.model import EventKind
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend

FIXTURES = Path(__file__).parent / "fixtures"
# nvidia-smi's answers to a reset, as NVIDIA/NVSentinel#1690 quotes them (exit 255, then exit 0).
REFUSED = (
    "The following GPUs could not be reset:\n"
    "  GPU 00000000:1A:00.0: In use by another client\n\n"
    "1 device is currently being used by one or more other processes (e.g. Fabric Manager, CUDA application, "
    "graphics application such as an X server, or a monitoring application such as another instance of "
    "nvidia-smi). Please first kill all processes using this device and all compute applications running in "
    "the system.\n"
)
RESET_OK = "GPU 00000000:1A:00.0 was successfully reset.\n"


class Recorder:
    """A command runner: answers by program, records argv and deadline, never runs anything."""

    def __init__(self, answers: dict[str, subprocess.CompletedProcess[str] | Exception] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        key = "cuda" if "gpuchain.gpu.cuda" in argv else Path(argv[0]).name
        answer = self.answers.get(key, subprocess.CompletedProcess(list(argv), 0, "", ""))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def programs(self) -> list[str]:
        return ["cuda" if "gpuchain.gpu.cuda" in a else Path(a[0]).name for a in self.calls]


def backend(sim: SimBackend, runner: Recorder, fake: FakeNvml | None = None, **config: object) -> NvmlBackend:
    return NvmlBackend(
        nvml=fake or FakeNvml(sim),
        probe_interval=0.2,
        run_command=runner,
        burn_in_config=BurnInConfig(**config),  # type: ignore[arg-type]
        sleep=lambda _s: None,
    )


def done(stdout: str = "", rc: int = 0, stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, stdout, stderr)


# ---- reset -----------------------------------------------------------------------------------


def test_reset_is_refused_unless_allowed(h100_sim: SimBackend) -> None:
    runner = Recorder()
    nvml = backend(h100_sim, runner)
    with pytest.raises(NotSupportedError, match="nvidia-smi -r -i 2"):
        nvml.reset_gpu(2)
    assert runner.calls == []


def test_a_reset_names_the_gpu_by_uuid_with_persistence_mode_off_around_it(h100_sim: SimBackend) -> None:
    runner = Recorder({"nvidia-smi": done(RESET_OK)})
    fake = FakeNvml(h100_sim)
    nvml = backend(h100_sim, runner, fake)
    nvml.allow_reset = True
    nvml.reset_gpu(2)
    assert runner.calls == [["nvidia-smi", "--gpu-reset", "-i", h100_sim.inventory().gpu(2).uuid]]
    off, on = fake.NVML_FEATURE_DISABLED, fake.NVML_FEATURE_ENABLED
    assert fake.persistence_log == [(2, off), (2, on)]


def test_a_refused_reset_is_retried_then_fails_with_nvidia_smis_words_and_restores_persistence(
    h100_sim: SimBackend,
) -> None:
    runner = Recorder({"nvidia-smi": done(REFUSED, rc=255)})
    fake = FakeNvml(h100_sim)
    slept: list[float] = []
    nvml = NvmlBackend(nvml=fake, run_command=runner, sleep=slept.append, reset_wait_s=2)
    nvml.allow_reset = True
    with pytest.raises(GpuError, match="exit 255.*In use by another client"):
        nvml.reset_gpu(2)
    assert len(runner.calls) == 3 and slept == [1.0, 1.0]
    assert fake.persistence_log[-1] == (2, fake.NVML_FEATURE_ENABLED)


def test_the_older_drivers_in_use_words_are_retried_too(h100_sim: SimBackend) -> None:
    """Drivers of 2020 said it differently (NVIDIA/gpu-operator#118): still "in use", still retried."""
    older = (
        "GPU 00000000:C1:00.0 is currently in use by another process.\n\n1 device is currently being used by one "
        "or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X "
        "server, or a monitoring application such as another instance of nvidia-smi). Please first kill all "
        "processes using this device and all compute applications running in the system.\n"
    )
    runner = Recorder({"nvidia-smi": done(older, rc=255)})
    nvml = NvmlBackend(nvml=FakeNvml(h100_sim), run_command=runner, sleep=lambda _s: None, reset_wait_s=1)
    nvml.allow_reset = True
    with pytest.raises(GpuError, match="in use by another process.*e.g., Fabric Manager"):
        nvml.reset_gpu(0)
    assert len(runner.calls) == 2


def test_persistence_mode_already_off_is_left_off(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    fake.persistence[h100_sim.inventory().gpu(1).uuid] = fake.NVML_FEATURE_DISABLED
    nvml = backend(h100_sim, Recorder({"nvidia-smi": done(RESET_OK)}), fake)
    nvml.allow_reset = True
    nvml.reset_gpu(1)
    assert fake.persistence_log == []


class _Volta(FakeNvml):
    """The fake with every GPU answering compute capability 7.0, as a V100 of a DGX-2 does."""

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        super().nvmlDeviceGetCudaComputeCapability(handle)  # type: ignore[arg-type]
        return (7, 0)


def test_a_pre_ampere_gpu_with_nvlink_peers_is_not_reset_alone(h100_sim: SimBackend) -> None:
    runner = Recorder()
    nvml = backend(h100_sim, runner, _Volta(h100_sim))
    nvml.allow_reset = True
    with pytest.raises(NotSupportedError, match=r"compute capability 7\.0.*NVLink peers.*needs a reboot"):
        nvml.reset_gpu(3)
    assert runner.calls == []


def test_a_pre_ampere_gpu_without_nvlink_is_reset() -> None:
    sim = SimBackend.from_preset("l4-x2")
    runner = Recorder({"nvidia-smi": done(RESET_OK)})
    nvml = backend(sim, runner, _Volta(sim))
    nvml.allow_reset = True
    nvml.reset_gpu(1)
    assert runner.programs() == ["nvidia-smi"]


async def test_a_reset_gpu_is_reported_recovered_to_subscribers(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(h100_sim, Recorder({"nvidia-smi": done(RESET_OK)}), fake)
    nvml.allow_reset = True
    uuid = h100_sim.inventory().gpu(4).uuid
    stream = nvml.events()
    first = asyncio.ensure_future(stream.__anext__())
    for _ in range(500):  # until the watcher waits on its event set: it has counted the resets so far
        if "nvmlEventSetWait" in fake.calls:
            break
        await asyncio.sleep(0.01)
    await asyncio.to_thread(nvml.reset_gpu, 4)
    event = await asyncio.wait_for(first, 5)
    assert (event.kind, event.gpu_uuid) == (EventKind.GPU_RECOVERED, uuid)
    await stream.aclose()


def _script(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/usr/bin/env python3\nimport sys, pathlib\n" + body)
    path.chmod(0o755)


def test_the_real_runner_runs_nvidia_smi_from_path(
    h100_sim: SimBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default runner, a real child process, with a fake nvidia-smi first on PATH."""
    log = tmp_path / "argv"
    _script(
        tmp_path,
        "nvidia-smi",
        f"pathlib.Path({str(log)!r}).write_text(' '.join(sys.argv[1:]))\nsys.stdout.write({RESET_OK!r})\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    nvml = NvmlBackend(nvml=FakeNvml(h100_sim))
    nvml.allow_reset = True
    nvml.reset_gpu(5)
    assert log.read_text() == f"--gpu-reset -i {h100_sim.inventory().gpu(5).uuid}"


# ---- burn-in ---------------------------------------------------------------------------------


def cuda_child(sim: SimBackend, index: int, **faults: object) -> subprocess.CompletedProcess[str]:
    """What the CUDA child prints: gpuchain.gpu.cuda's own checks run against the fake libcuda."""
    bus = sim.inventory().gpu(index).pci_bus_id
    config = cuda.CudaCheckConfig(arith_elements=1024, min_memory_bytes=4096)
    result = cuda.run_checks(FakeCuda([bus], **faults), bus_id=bus, config=config)  # type: ignore[arg-type]
    return done(json.dumps(result.to_json()) + "\n")


@pytest.fixture
def dcgmi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executable named dcgmi on PATH (the Recorder answers for it; it is never run)."""
    _script(tmp_path, "dcgmi", "sys.exit(1)\n")
    monkeypatch.setenv("PATH", str(tmp_path))


def test_burn_in_runs_nvml_fabric_cuda_memory_and_dcgm_in_order(h100_sim: SimBackend, dcgmi_on_path: None) -> None:
    diag = (FIXTURES / "dcgm" / "diag-r3-8gpu-diagnostic-test-dcgm-issue-215.json").read_text()
    runner = Recorder({"cuda": cuda_child(h100_sim, 3), "dcgmi": done(diag, rc=0)})
    result = backend(h100_sim, runner).burn_in(3)
    assert [c.name for c in result.checks] == ["nvml", "row-remap", "fabric", "cuda", "memory", "dcgm"]
    assert result.passed, result.summary()
    cuda_argv, dcgm_argv = runner.calls
    assert cuda_argv[1:5] == ["-m", "gpuchain.gpu.cuda", "--bus-id", h100_sim.inventory().gpu(3).pci_bus_id]
    assert dcgm_argv[1:] == ["diag", "-r", "1", "-i", "3", "-j"]
    assert result.skipped == ("retired-pages",)  # an H100 remaps rows: NVML has no retired pages for it


def test_burn_in_fails_on_a_stuck_memory_bit_and_on_dcgms_failure(h100_sim: SimBackend, dcgmi_on_path: None) -> None:
    gb10 = (FIXTURES / "dcgm" / "diag-r1-gb10-dcgm-4.2.3.json").read_text()
    runner = Recorder({"cuda": cuda_child(h100_sim, 0, stuck_bit=(7, 3)), "dcgmi": done(gb10, rc=226)})
    result = backend(h100_sim, runner).burn_in(0)
    assert not result.passed
    summary = result.summary()
    assert "memory: address-in-address: 1 of" in summary or "memory: inverted address: 1 of" in summary
    assert "dcgm: software: Persistence Mode: Persistence mode for GPU 0 is disabled" in summary


def test_burn_in_without_dcgmi_or_libcuda_says_what_it_skipped(
    h100_sim: SimBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dcgmi
    missing = cuda.CudaResult(
        skipped={"cuda": "libcuda.so.1 cannot be loaded", "memory": "libcuda.so.1 cannot be loaded"}
    )
    runner = Recorder({"cuda": done(json.dumps(missing.to_json()))})
    result = backend(h100_sim, runner).burn_in(2)
    assert result.passed  # NVML's checks ran and passed; nothing else is claimed
    assert {"cuda", "memory", "dcgm"} <= set(result.skipped)
    assert "dcgm: skipped (dcgmi is not installed in this container)" in result.summary()
    assert "cuda: skipped (libcuda.so.1 cannot be loaded)" in result.summary()


def test_a_hung_cuda_check_is_killed_and_fails(
    h100_sim: SimBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    runner = Recorder({"cuda": subprocess.TimeoutExpired(["python"], 300)})
    result = backend(h100_sim, runner).burn_in(1)
    assert not result.passed and "cuda: did not finish within 300 s" in result.summary()


def test_nvml_faults_stop_the_burn_in_before_cuda(h100_sim: SimBackend) -> None:
    runner = Recorder()
    h100_sim.set_telemetry(1, row_remap_failure=1)
    failed = backend(h100_sim, runner).burn_in(1)
    assert not failed.passed and "row-remap: row remapping failed" in failed.summary()
    assert failed.reasons["cuda"] == "not run: an NVML check failed" and runner.calls == []
    h100_sim.lose_gpu(6)
    lost = backend(h100_sim, runner).burn_in(6)
    assert not lost.passed and lost.skipped == ("cuda", "memory", "dcgm")


def test_a_gpu_in_mig_mode_is_not_given_to_cuda(mig_sim: SimBackend) -> None:
    runner = Recorder()
    result = backend(mig_sim, runner).burn_in(0)
    assert runner.calls == [] and "MIG mode is on" in result.reasons["cuda"]


def test_the_burn_in_waits_for_the_gpu_to_rejoin_the_nvlink_fabric(
    h100_sim: SimBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    fake = FakeNvml(h100_sim)
    n = fake
    fake.fabric[2] = [(n.NVML_GPU_FABRIC_STATE_IN_PROGRESS, n.NVML_SUCCESS)] * 3 + [
        (n.NVML_GPU_FABRIC_STATE_COMPLETED, n.NVML_SUCCESS)
    ]
    slept: list[float] = []
    nvml = NvmlBackend(nvml=fake, run_command=Recorder(), sleep=slept.append)
    assert any(c.name == "fabric" and c.passed for c in nvml.burn_in(2).checks)
    assert len(slept) == 3
    fake.fabric[2] = [(n.NVML_GPU_FABRIC_STATE_IN_PROGRESS, n.NVML_SUCCESS)]
    slept.clear()
    stuck = NvmlBackend(nvml=fake, run_command=Recorder(), sleep=slept.append).burn_in(2)
    assert "fabric: NVLink fabric state In Progress after 60 s" in stuck.summary()
    assert sum(slept) == 60 and "cuda" in stuck.skipped  # nothing runs on a GPU outside its fabric
    fake.fabric[2] = [(n.NVML_GPU_FABRIC_STATE_COMPLETED, n.NVML_ERROR_UNKNOWN)]
    assert "registration failed" in backend(h100_sim, Recorder(), fake).burn_in(2).summary()


def test_an_ampere_gpu_has_no_fabric_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sim = SimBackend.from_preset("a100-80gb-x8")
    result = backend(sim, Recorder()).burn_in(0)
    assert "fabric" in result.skipped and all(c.name != "fabric" for c in result.checks)


def test_the_burn_in_judges_nvml_readings_by_the_health_probes(h100_sim: SimBackend) -> None:
    """The same rules the health publisher applies (gpu.probes), read through the same NVML calls."""
    h100_sim.set_health_readings(4, retired_pages_pending=True, retired_pages_sbe=2, retired_pages_dbe=0)
    h100_sim.set_telemetry(5, row_remap_pending=1)
    runner = Recorder()
    pages = backend(h100_sim, runner).burn_in(4)
    assert "retired-pages: page retirement pending (a GPU reset activates it)" in pages.summary()
    rows = backend(h100_sim, runner).burn_in(5)
    assert "row-remap: row remapping pending (a GPU reset activates it)" in rows.summary()
    assert not pages.passed and not rows.passed and runner.calls == []
