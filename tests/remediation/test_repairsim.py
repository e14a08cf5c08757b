"""The repair loop's simulator scenarios and `gpuchain sim run gpu-reset[-fails] -o json`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.remediation.gpuloop import Stage
from gpuchain.sim.remediation import SimCluster
from gpuchain.sim.repair import REPAIR_SCENARIOS, SCENARIO_NAMES, run_repair

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


def _stages(gpu: dict[str, Any]) -> list[str]:
    return [s["stage"] for s in gpu["timeline"]]


ROUND_TRIP = ["quarantined", "drained", "reset", "burn-in", "burn-in", "healthy"]


def test_retired_pages_follow_each_probes_resolution_through_the_real_command() -> None:
    """`gpuchain sim run gpu-retired-pages -o json`, the command as a user runs it, on T4 nodes:
    a pending retirement needs a reset (GPU 1 goes round and comes back), 63 retired pages need
    nothing a repair can do (GPU 2 is reported and keeps its pod), and a pending retirement that
    reaches 63 (GPU 3) is reset, burned in and given back: its count stays at the limit (kept in
    the InfoROM: no reset or reboot lowers it), which the burn-in reports but does not fail on, so
    GPU 3 ends as GPU 2 does, reported and serving, and the node is not tainted."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuchain", "sim", "run", "gpu-retired-pages", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    gpus = {g["index"]: g for g in data["gpus"]}
    assert sorted(gpus) == [1, 3]  # GPUs 0 and 2 never enter the loop
    assert _stages(gpus[1]) == ROUND_TRIP and gpus[1]["stage"] == "healthy"
    assert "page retirement pending" in gpus[1]["timeline"][0]["note"]
    assert _stages(gpus[3]) == ROUND_TRIP and gpus[3]["stage"] == "healthy"
    passed = gpus[3]["timeline"][-2]["note"]
    assert passed.startswith("passed: nvml: ok (needs no repair: retired pages at DCGM's limit"), passed
    assert "cuda: ok" in passed and "memory: ok" in passed
    times = [s["seconds"] for s in gpus[1]["timeline"]]
    assert times == sorted(times) and times[0] > 0
    published = {f["index"]: f for f in data["faults"].values()}
    assert sorted(published) == [2, 3]  # GPU 1's one retired page is under the limit: nothing left
    for index in (2, 3):
        assert (published[index]["probes"], published[index]["resolution"]) == (["retired-pages-limit"], "none")
    assert data["podsLeft"] == ["ml/w-0", "ml/w-2"]
    assert data["taints"] == []
    assert "gpuchain.io/reboot-requested" not in data["annotations"]
    assert data["metrics"]["node-0"]["outcomes"] == {"reset-ok": 2, "burn-in-ok": 2, "readmitted": 2}


def test_nvlink_recovery_errors_get_a_reset_and_replay_or_crc_errors_are_only_reported() -> None:
    data = run_repair("gpu-nvlink-errors").to_dict()
    (gpu,) = data["gpus"]
    assert gpu["index"] == 0 and gpu["stage"] == "healthy" and _stages(gpu) == ROUND_TRIP
    assert "NVLink recovery errors" in gpu["timeline"][0]["note"]
    (reported,) = data["faults"].values()  # GPU 0's counters start afresh after its reset
    assert (reported["index"], reported["probes"], reported["resolution"]) == (5, ["nvlink-errors"], "none")
    assert data["podsLeft"] == [f"ml/w-{i}" for i in range(1, 8)] and data["taints"] == []
    assert [e["reason"] for e in data["events"]].count("GPUResetStarted") == 1


def test_the_counter_scenarios_are_listed_with_stack_and_source() -> None:
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, ["sim", "list", "-o", "json"]).stdout)}
    assert (rows["gpu-retired-pages"]["kind"], rows["gpu-retired-pages"]["stack"]) == ("repair", "gpuchain")
    assert rows["gpu-retired-pages"]["url"] == "https://github.com/NVIDIA/NVSentinel/issues/1826"
    assert rows["gpu-nvlink-errors"]["url"] == "https://github.com/marin-community/marin/issues/9086"


def test_a_link_that_keeps_failing_after_its_reset_is_not_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-nvlink-errors, but link 14 keeps retraining after the reset (one more recovery before
    every publish): the burn-in passes, yet the publisher's probe trips again on the fresh counters,
    so the GPU stays withheld waiting for its health to clear instead of being re-admitted."""
    scenario = REPAIR_SCENARIOS["gpu-nvlink-errors"]

    def keeps_failing(sim: SimCluster) -> None:
        scenario.play(sim)
        publish = sim.publish

        def publish_after_another_recovery() -> None:
            sim.backends["node-0"].add_nvlink_errors(0, 14, recovery=1)
            publish()

        sim.publish = publish_after_another_recovery  # type: ignore[method-assign]

    monkeypatch.setitem(REPAIR_SCENARIOS, "nvlink-keeps-failing", replace(scenario, play=keeps_failing))
    data = run_repair("nvlink-keeps-failing").to_dict()
    (gpu,) = data["gpus"]
    assert gpu["index"] == 0 and gpu["stage"] == "burn-in" and "healthy" not in _stages(gpu)
    assert gpu["waiting"].startswith("burn-in passed; waiting for the GPU's health to clear")
    assert "GPUReadmitted" not in [e["reason"] for e in data["events"]]
    assert "ml/w-0" not in data["podsLeft"]
