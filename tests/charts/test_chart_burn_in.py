"""The chart's ``remediation.burnIn`` values: rendered into gpu-health's ``--burn-in-*`` args only when
set, valid manifests on every supported Kubernetes, and args gpu-health accepts (or refuses in one
line naming the flag)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from test_chart import VERSIONS, render
from typer.testing import CliRunner

from gpuchain.cli import app

ALL = {
    "cuda": False,
    "dcgm": True,
    "memoryFraction": 0.25,
    "memoryCapMiB": 100000,
    "timeBudget": "30s",
    "cudaTimeout": "2m",
    "dcgmLevel": 2,
    "dcgmHost": "nvidia-dcgm.gpu-operator.svc:5555",
    "dcgmTimeout": "10m",
    "fabricWait": 0,
}


def _values(burn_in: dict[str, Any] | None, repair: bool = True) -> dict[str, Any]:
    remediation: dict[str, Any] = {"enabled": True, "repair": {"enabled": repair}}
    if burn_in is not None:
        remediation["burnIn"] = burn_in
    return {"remediation": remediation}


def _args(values: dict[str, Any]) -> list[str]:
    docs = render(values)
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-gpu-health")
    args: list[str] = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _burn_in_args(values: dict[str, Any]) -> list[str]:
    return [a for a in _args(values) if "burn-in-" in a]


@pytest.mark.parametrize("burn_in", [None, {}])
def test_unset_renders_no_burn_in_flag(burn_in: dict[str, Any] | None) -> None:
    assert _burn_in_args(_values(burn_in)) == []


def test_each_value_set_becomes_its_flag() -> None:
    assert sorted(_burn_in_args(_values(ALL))) == sorted(
        [
            "--no-burn-in-cuda",
            "--burn-in-dcgm",
            "--burn-in-memory-fraction=0.25",
            "--burn-in-memory-cap-mib=100000",
            "--burn-in-time-budget=30s",
            "--burn-in-cuda-timeout=2m",
            "--burn-in-dcgm-level=2",
            "--burn-in-dcgm-host=nvidia-dcgm.gpu-operator.svc:5555",
            "--burn-in-dcgm-timeout=10m",
            "--burn-in-fabric-wait=0",
        ]
    )
    assert _burn_in_args(_values({"dcgmLevel": 3})) == ["--burn-in-dcgm-level=3"]
    assert _burn_in_args(_values({"cuda": True, "dcgm": False})) == ["--burn-in-cuda", "--no-burn-in-dcgm"]


def test_the_gate_alone_gets_them_too() -> None:
    """gateStartup.burnIn burns GPUs in without the repair loop: the same settings apply."""
    values = _values({"dcgmLevel": 2}, repair=False)
    values["remediation"]["gateStartup"] = {"burnIn": True}
    args = _args(values)
    assert "--gate-burn-in" in args and "--burn-in-dcgm-level=2" in args and "--repair" not in args


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_with_every_setting_validate(version: str) -> None:
    for doc in render(_values(ALL)):
        if doc["kind"].startswith("ValidatingAdmissionPolicy") and version < "1.30":
            continue  # admissionregistration v1 policies exist from 1.30; the template renders only there
        if doc["kind"] != "ClusterPolicy":
            kubernetes_validate.validate(doc, version, strict=True)


def _run_as_rendered(values: dict[str, Any]) -> Any:
    """gpu-health with the rendered args, on simulated GPUs into an in-memory API (it validates every
    flag before it touches a GPU; --backend=nvml needs a node)."""
    args = [a for a in _args(values) if a != "--backend=nvml"]
    return CliRunner().invoke(app, ["gpu-health", *args, "--backend", "sim", "--dry-run", "-o", "json"])


def test_gpu_health_accepts_what_the_chart_renders() -> None:
    result = _run_as_rendered(_values(ALL))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("burn_in", "line"),
    [
        ({"memoryFraction": 0.95}, "--burn-in-memory-fraction 0.95: must be in (0, 0.9]"),
        ({"timeBudget": "10m"}, "--burn-in-time-budget 600s: must be below --burn-in-cuda-timeout"),
        ({"dcgmTimeout": "soon"}, "--burn-in-dcgm-timeout: 'soon' is not a positive duration"),
    ],
)
def test_a_bad_value_fails_gpu_health_in_one_line_naming_the_flag(burn_in: dict[str, Any], line: str) -> None:
    result = _run_as_rendered(_values(burn_in))
    assert result.exit_code == 2 and line in result.stderr, result.output
