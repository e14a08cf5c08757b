"""The repair loop's simulator scenarios and `gpuchain sim run gpu-reset[-fails] -o json`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.remediation.gpuloop import Stage
from gpuchain.remediation.repairsim import SCENARIO_NAMES, run_repair

runner = CliRunner()
ALL_BUT_W3 = [f"ml/w-{i}" for i in range(8) if i != 3]


def test_gpu_reset_repairs_one_gpu_and_leaves_the_node_untainted() -> None:
    run = run_repair("gpu-reset")
    (gpu,) = run.to_dict()["gpus"]
    assert gpu["index"] == 3 and gpu["stage"] == "healthy"
    assert [s["stage"] for s in gpu["timeline"]] == ["quarantined", "drained", "reset", "burn-in", "burn-in", "healthy"]
    assert run.pods == ALL_BUT_W3 and run.taints == []
    reasons = [e["reason"] for e in run.events]
    assert reasons.index("GPUWorkloadEvicted") < reasons.index("GPUResetStarted") < reasons.index("GPUReadmitted")


def test_gpu_reset_fails_ends_in_a_reboot_request_and_stays_there() -> None:
    run = run_repair("gpu-reset-fails")
    (gpu,) = run.to_dict()["gpus"]
    assert gpu["stage"] == Stage.REBOOT.value and "reboot" in gpu["waiting"]
    assert [s["stage"] for s in gpu["timeline"]] == ["quarantined", "drained", "reset", "reboot-requested"]
    assert run.taints == ["gpuchain.io/gpu-reset-required=reboot-node:NoSchedule"]
    assert "gpuchain.io/reboot-requested" in run.annotations
    assert [e["reason"] for e in run.events].count("GPUResetStarted") == 1  # one reset, never a loop


@pytest.mark.parametrize("name", ["gpu-reset", "gpu-reset-fails"])
def test_sim_run_prints_the_stage_timeline_as_json(name: str) -> None:
    result = runner.invoke(app, ["sim", "run", name, "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["scenario"] == name
    times = [s["seconds"] for s in data["gpus"][0]["timeline"]]
    assert times == sorted(times) and times[0] > 0


def test_unknown_repair_scenario_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="gpu-reset"):
        run_repair("nope")


def test_the_breaker_holds_when_many_nodes_fail_at_once() -> None:
    run = run_repair("gpu-reset-storm")
    data = run.to_dict()
    assert len(data["gpus"]) == 3
    assert {g["stage"] for g in data["gpus"]} == {"quarantined"}  # withheld, nothing more
    assert len(run.pods) == 8 + 2  # nothing evicted
    assert run.taints == [] and "gpuchain.io/reboot-requested" not in run.annotations
    reasons = {e["reason"] for e in run.events}
    assert "RemediationPaused" in reasons
    assert not reasons & {"GPUWorkloadEvicted", "GPUResetStarted", "GPURebootRequested", "GPUNodeTainted"}


def test_sim_run_help_names_the_repair_scenarios() -> None:
    result = runner.invoke(app, ["sim", "run", "--help"], terminal_width=400)
    assert result.exit_code == 0
    for name in SCENARIO_NAMES:
        assert name in result.output


def test_a_pending_row_remap_without_any_xid_is_repaired_like_one() -> None:
    run = run_repair("gpu-row-remap-pending")
    (gpu,) = run.to_dict()["gpus"]
    assert gpu["index"] == 3 and gpu["stage"] == "healthy"
    assert "row remapping pending" in gpu["timeline"][0]["note"]
    assert [s["stage"] for s in gpu["timeline"]][-1] == "healthy"
    assert run.pods == ALL_BUT_W3 and run.taints == []
