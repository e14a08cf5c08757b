"""scripts/hardware-check: its report, and that it only ever asks NVML read-only questions."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu import nvml
from gpuchain.gpu.sim import SimBackend

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "hardware-check"
MUTATING = ("nvmlDeviceSet", "nvmlDeviceCreate", "nvmlGpuInstanceCreate", "nvmlDeviceReset", "nvmlDeviceClear")


def test_report_and_read_only(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    fake = FakeNvml(sim)
    monkeypatch.setattr(nvml, "_nvml_module", lambda: fake)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--events-seconds", "0.5"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert done.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert all(check["ok"] for check in report["checks"].values())
    assert len(report["inventory"]["gpus"]) == 8
    assert sum(len(g["devices"]) for g in report["mig"]) == 30
    assert "nvmlDeviceRegisterEvents" in fake.calls
    assert not [c for c in fake.calls if c.startswith(MUTATING) or "Destroy" in c]


def test_event_registration_failure_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml(SimBackend.from_preset("l4-x2"), unsupported=frozenset({"nvmlDeviceRegisterEvents"}))
    monkeypatch.setattr(nvml, "_nvml_module", lambda: fake)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--events-seconds", "0.3"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert done.value.code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["checks"]["event_registration"]["ok"] is False
    assert set(report["checks"]["event_registration"]["gpus"].values()) == {False}
