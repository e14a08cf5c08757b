"""The NVML release board in the chart: one host directory, mounted where an agent holds NVML
(the device plugin, exporter, GFD and MIG manager operands or the node agent serving them, the DRA plugin) and in gpu-health
when it repairs GPUs, at the path the agents default to; nowhere else."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from test_chart import VERSIONS, policy_of, render

from gpuchain.gpu.nvmlrelease import DEFAULT_DIR
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import parse_policy

BOARD = str(DEFAULT_DIR)
HOLDERS = {
    "nvidia-device-plugin-daemonset",
    "nvidia-dcgm-exporter",
    "gpu-feature-discovery",
    "nvidia-mig-manager",
}


def _board(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(container, mount path, host path type) for every mount of the board's host directory."""
    volumes = {v["name"]: v["hostPath"] for v in pod.get("volumes", []) if "hostPath" in v}
    board = {name for name, hp in volumes.items() if hp["path"] == BOARD}
    return [
        (c["name"], m["mountPath"], volumes[m["name"]].get("type", ""))
        for c in pod["containers"]
        for m in c.get("volumeMounts", [])
        if m["name"] in board
    ]


def _operands(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = parse_policy(policy_of(render(values))["spec"])
    return {
        o["metadata"]["name"]: o
        for o in desired(spec, Facts(namespace="gpu-operator", policy_name="cluster-policy"))
        if o["kind"] == "DaemonSet"
    }


@pytest.mark.parametrize("layout", [{"nodeAgent": {"enabled": False}}, {}])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_nvml_holding_operand_mounts_the_board_and_no_other(version: str, layout: dict[str, Any]) -> None:
    operands = _operands({**layout, "migManager": {"enabled": True}})
    holders = HOLDERS if layout else {"gpuchain-node-agent"}  # the node agent serves them all
    assert set(operands) >= holders
    for name, ds in operands.items():
        kubernetes_validate.validate(ds, version, strict=True)
        mounts = _board(ds["spec"]["template"]["spec"])
        if name in holders:
            assert [(path, kind) for _, path, kind in mounts] == [(BOARD, "DirectoryOrCreate")], name
        else:
            assert mounts == [], name  # the driver, toolkit and validator hold no NVML for their life


def _daemonset(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    ds: dict[str, Any] = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == name)
    return ds


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_the_dra_plugin_mounts_the_board(version: str) -> None:
    ds = _daemonset(render({"dra": {"enabled": True}}), "gpuchain-dra-plugin")
    kubernetes_validate.validate(ds, version, strict=True)
    assert _board(ds["spec"]["template"]["spec"]) == [("dra-plugin", BOARD, "DirectoryOrCreate")]


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_health_mounts_the_board_only_when_it_repairs(version: str) -> None:
    repair = _daemonset(render({"remediation": {"enabled": True, "repair": {"enabled": True}}}), "gpuchain-gpu-health")
    kubernetes_validate.validate(repair, version, strict=True)
    assert _board(repair["spec"]["template"]["spec"]) == [("gpu-health", BOARD, "DirectoryOrCreate")]
    publish_only = _daemonset(render({"remediation": {"enabled": True}}), "gpuchain-gpu-health")
    assert _board(publish_only["spec"]["template"]["spec"]) == []
