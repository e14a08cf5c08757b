"""Fixes that fix: for every finding id a scenario expects, apply the doctor's own fix (the data,
not the text) to that scenario's simulated cluster, diagnose again, and the finding is gone from
the nodes it named. Findings with no command that can fix them (hardware) say so and name the
action, and the simulator applies that action too."""

from __future__ import annotations

import pytest

from gpuchain.doctor import Report, run_doctor
from gpuchain.doctor.model import FixOp, Severity
from gpuchain.sim import Scenario, build, load_scenario, scenario_names
from gpuchain.sim.fixes import apply_fix

#: Finding ids whose text is a consequence or an explanation, not a fault with a fix of its own.
NO_FIX = {
    "device-plugin.mig-resources",  # info: MIG slices explain the count
    "workload.insufficient-gpu",  # a consequence of the root cause (or a full cluster)
}


def _cases() -> list[tuple[str, str]]:
    return [(name, fid) for name in scenario_names() for fid in load_scenario(name).expect if fid not in NO_FIX]


def _diagnose(scenario: Scenario) -> Report:
    """As on a live cluster: list calls, then the logs the doctor asks for, through the port."""
    sim = build(scenario)
    return run_doctor(sim.cluster, reader=sim.read_log)


CASES = _cases()


def test_the_corpus_expects_every_fixable_finding_somewhere() -> None:
    ids = {fid for _, fid in CASES}
    for fid in (
        "driver.kernel-mismatch",
        "driver.host-driver-conflict",
        "driver.version-skew",
        "toolkit.runtime-not-configured",
        "device-plugin.config-missing",
        "device-plugin.no-nvml",
        "mig.invalid-for-strategy",
        "gpu.lost",
        "node.opted-out",
        "operand.not-scheduled",
        "workload.nvml-lost",
    ):
        assert fid in ids, fid


@pytest.mark.parametrize(("scenario", "finding_id"), CASES, ids=[f"{s}:{f}" for s, f in CASES])
def test_applying_the_fix_clears_the_finding(scenario: str, finding_id: str) -> None:
    sc = load_scenario(scenario)
    before = _diagnose(sc)
    found = [f for f in before.findings if f.id == finding_id]
    assert found, f"{scenario}: the doctor does not name {finding_id} ({sorted(before.ids)})"
    first = found[0]
    if first.action is None:
        pytest.fail(f"{finding_id} in {scenario} has no fix as data; its text is: {first.fix}")
    if first.action.op is FixOp.HARDWARE:
        assert first.fix.count("hardware, no command fixes it") == 1 and first.action.changes["action"]
    fixed = sc
    targets = {f.action.target: f.action for f in found if f.action is not None}
    for action in targets.values():
        fixed = apply_fix(fixed, action)
    after = _diagnose(fixed)
    still = [f for f in after.findings if f.id == finding_id and f.severity is not Severity.INFO]
    assert not still, f"{finding_id} still named after {first.fix}: {[f.node for f in still]}"


@pytest.mark.parametrize("scenario", ["healthy", "healthy-gpu-operator"])
def test_the_runtime_class_fix_is_an_object_created_on_the_cluster(scenario: str) -> None:
    """toolkit.runtime-class-missing: the fix is the RuntimeClass itself, created through the API."""
    from gpuchain.kube import RUNTIME_CLASS, name_of
    from gpuchain.sim.fixes import apply_to_cluster

    sim = build(load_scenario(scenario))
    for rc in sim.cluster.list(RUNTIME_CLASS):
        sim.cluster.delete(RUNTIME_CLASS, name_of(rc))
    before = run_doctor(sim.cluster, reader=sim.read_log)
    found = [f for f in before.findings if f.id == "toolkit.runtime-class-missing"]
    assert found and all(f.action is not None and f.action.op is FixOp.CREATE for f in found)
    action = found[0].action
    assert action is not None
    apply_to_cluster(sim.cluster, action)
    after = run_doctor(sim.cluster, reader=sim.read_log)
    assert "toolkit.runtime-class-missing" not in after.ids and not after.broken
