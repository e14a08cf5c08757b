"""`gpuchain gpu-health --burn-in-*`: the burn-in's settings from the command line reach what the
burn-in runs on a real node (NvmlBackend over the fake pynvml), and a bad value is one line naming
its flag, exit 2."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.gpu import nvml
from gpuchain.gpu.burnin import BurnInConfig
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend


class Recorder:
    """Stands in for the child processes the burn-in starts: records argv and deadline, runs nothing
    (the CUDA check answers nothing, so it fails; only what it was asked to do matters here)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), deadline))
        return subprocess.CompletedProcess(list(argv), 1, "", "")


def _gpu_health_on_nvml(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], gpu: int = 0
) -> tuple[int, str, BurnInConfig | None, Recorder]:
    """Run ``gpu-health --backend nvml --dry-run`` over the fake pynvml; the burn-in settings of the
    backend it built, and what that backend's burn-in of ``gpu`` starts (run just before the command
    closes the backend, with the child processes recorded instead of run)."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    monkeypatch.setattr(nvml, "_nvml_module", lambda: FakeNvml(sim))
    seen: list[BurnInConfig] = []
    runner = Recorder()
    close = NvmlBackend.close

    def closing(self: NvmlBackend) -> None:
        seen.append(self.burn_in_config)
        self._run_command = runner
        self.burn_in(gpu)
        close(self)

    monkeypatch.setattr(NvmlBackend, "close", closing)
    result = CliRunner().invoke(
        app, ["gpu-health", "--backend", "nvml", "--node", "n0", "--dry-run", "-o", "json", *flags]
    )
    return result.exit_code, result.output, (seen[0] if seen else None), runner


def test_without_flags_the_burn_in_keeps_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, config, _ = _gpu_health_on_nvml(monkeypatch, [])
    assert code == 0, output
    assert config == BurnInConfig()


def test_the_flags_reach_the_burn_in_that_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = [
        "--burn-in-memory-fraction", "0.25",
        "--burn-in-memory-cap-mib", "1024",
        "--burn-in-time-budget", "30s",
        "--burn-in-cuda-timeout", "2m",
        "--no-burn-in-dcgm",
        "--burn-in-fabric-wait", "0",
    ]  # fmt: skip
    code, output, config, runner = _gpu_health_on_nvml(monkeypatch, flags, gpu=3)
    assert code == 0, output
    assert config == BurnInConfig(
        memory_fraction=0.25, memory_cap_mib=1024, cuda_budget_s=30, cuda_deadline_s=120, dcgm=False, fabric_wait_s=0
    )
    ((argv, deadline),) = runner.calls  # the CUDA check only: DCGM is off
    assert argv[argv.index("--memory-fraction") + 1] == "0.25" and argv[argv.index("--time-budget") + 1] == "30.0"
    assert argv[argv.index("--memory-cap-mib") + 1] == "1024" and deadline == 120


def test_dcgm_settings_reach_dcgmi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dcgmi = tmp_path / "dcgmi"  # found on PATH, never run: the recorder answers instead
    dcgmi.write_text("#!/bin/sh\nexit 1\n")
    dcgmi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    flags = ["--no-burn-in-cuda", "--burn-in-dcgm-level", "3", "--burn-in-dcgm-host", "nvidia-dcgm:5555",
             "--burn-in-dcgm-timeout", "45m"]  # fmt: skip
    code, output, _, runner = _gpu_health_on_nvml(monkeypatch, flags)
    assert code == 0, output
    ((argv, deadline),) = runner.calls  # dcgmi only: the CUDA check is off
    assert argv == [str(dcgmi), "diag", "-r", "3", "-i", "0", "-j", "--host", "nvidia-dcgm:5555"]
    assert deadline == 45 * 60


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--burn-in-memory-fraction", "0.95"], "--burn-in-memory-fraction 0.95: must be in (0, 0.9], e.g. 0.5"),
        (["--burn-in-dcgm-level", "5"], "--burn-in-dcgm-level 5: must be 1, 2, 3 or 4 (dcgmi diag -r)"),
        (["--burn-in-memory-cap-mib", "0"], "--burn-in-memory-cap-mib 0: must be at least 1 (MiB)"),
        (["--burn-in-time-budget", "soon"], "--burn-in-time-budget: 'soon' is not a positive duration"),
        (["--burn-in-dcgm-timeout", "0"], "--burn-in-dcgm-timeout: '0' is not a positive duration"),
        (["--burn-in-fabric-wait", "-1s"], "--burn-in-fabric-wait: '-1s' is not a positive duration"),
        (
            ["--burn-in-time-budget", "10m"],
            "--burn-in-time-budget 600s: must be below --burn-in-cuda-timeout (300s, the kill deadline)",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(flags: list[str], line: str) -> None:
    result = CliRunner().invoke(app, ["gpu-health", "--dry-run", *flags])
    assert result.exit_code == 2, result.output
    assert line in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
