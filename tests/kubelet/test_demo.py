"""`gpuchain demo`: the scenario's transcript and the command's output."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.sim.demo import run_demo


async def test_demo_transcript() -> None:
    seen: list[str] = []
    steps = await run_demo(lambda s: seen.append(s.key), quiet_seconds=0.05)
    assert seen == ["node", "capacity", "pod", "pod-resources", "xid", "recovery", "stop"]
    by = {s.key: s.data for s in steps}
    assert by["capacity"]["capacity"] == {"nvidia.com/gpu": 8}
    assert by["pod"]["env"]["NVIDIA_VISIBLE_DEVICES"] == by["pod"]["device"]
    assert by["pod-resources"]["pods"][0]["devices"] == [by["pod"]["device"]]
    assert by["xid"]["allocatable"] == {"nvidia.com/gpu": 7}
    assert by["xid"]["within_same_second"] is True
    assert by["xid"]["pod_on_failed_gpu"] == by["pod"]["pod"]
    assert by["recovery"]["allocatable"] == {"nvidia.com/gpu": 8}
    assert by["recovery"]["events"] == ["xid", "gpu-lost", "gpu-recovered"]


def test_demo_command_json() -> None:
    result = CliRunner().invoke(app, ["demo", "-o", "json", "--quiet-seconds", "0.05"])
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)
    assert [s["key"] for s in steps][-1] == "stop"


def test_demo_command_table() -> None:
    result = CliRunner().invoke(app, ["demo", "--quiet-seconds", "0.05"])
    assert result.exit_code == 0, result.output
    assert "nvidia.com/gpu" in result.output and "NVIDIA_VISIBLE_DEVICES" in result.output
    assert "within the same second" in result.output
