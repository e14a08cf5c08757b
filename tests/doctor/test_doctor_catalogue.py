"""The symptom catalogue: each scenario's symptom is named by the doctor, and nothing else is."""

from __future__ import annotations

import pytest

from gpuchain.doctor import LinkState, Severity, run_doctor
from gpuchain.sim import build, load_scenario, scenario_names


@pytest.mark.parametrize("name", scenario_names())
def test_the_doctor_names_exactly_what_the_scenario_produces(name: str) -> None:
    sim = build(load_scenario(name))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert report.ids == set(sim.scenario.expect)
    for finding in report.findings:
        assert finding.evidence and finding.cause and finding.fix
        assert finding.cause.endswith(".")


def test_healthy_cluster_has_no_finding_and_every_link_ok() -> None:
    report = run_doctor(build(load_scenario("healthy")).cluster)
    assert report.findings == [] and not report.broken
    assert report.gpu_nodes == 4  # the two CPU nodes are not walked
    for chain in report.chains:
        assert [lk.state for lk in chain.links] == [LinkState.OK] * 5 + [LinkState.SKIPPED]


def test_friday_root_cause_is_the_kernel_driver_mismatch_and_the_rest_waits() -> None:
    sim = build(load_scenario("friday-scale-out"))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    roots = report.root_causes
    assert [g.id for g in roots] == ["driver.kernel-mismatch"]
    assert roots[0].nodes == tuple(f"gpu-new-{i}" for i in range(8))
    root = roots[0].first
    assert "6.8.0-51-generic" in root.cause
    # The driver container's own line (NVIDIA/gpu-operator#85), not a simulator paraphrase.
    assert any(e == "log: Could not resolve Linux kernel version" for e in root.evidence)
    assert any("5.15.0-105-generic" in e for e in root.evidence)
    assert any(c.startswith("device-plugin:") and "Init:0/1" in c for c in root.consequences)
    assert any("no nvidia.com/gpu in capacity" in c for c in root.consequences)
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert not pending.root and "consequence of driver.kernel-mismatch" in pending.cause
    chains = {c.node: c for c in report.chains}
    assert [lk.state for lk in chains["gpu-new-3"].links] == [LinkState.BROKEN] + [LinkState.NOT_REACHED] * 5
    assert chains["gpu-old-0"].healthy
    assert report.broken


def test_warnings_and_info_do_not_break_the_cluster() -> None:
    ts = run_doctor(build(load_scenario("leftover-time-slicing")).cluster)
    finding = ts.findings[0]
    assert finding.severity is Severity.WARNING and "16 nvidia.com/gpu on 8 physical GPUs" in finding.cause
    assert "shared-2" in " ".join(finding.evidence)
    assert not ts.broken
    mig = run_doctor(build(load_scenario("mig-56")).cluster)
    assert mig.findings[0].severity is Severity.INFO and "56" in mig.findings[0].cause
    assert not mig.broken


def test_lost_gpu_names_the_numbers_and_the_pod_bound_to_it() -> None:
    report = run_doctor(build(load_scenario("gpu-fell-off-bus")).cluster)
    f = report.findings[0]
    assert f.node == "gpu-17" and f.severity is Severity.ERROR
    assert "nvidia.com/gpu: allocatable 7, capacity 8" in f.evidence[0]
    assert any("default/infer-3" in e for e in f.evidence)
    assert "infer-3" in f.fix and f.fix.startswith("kubectl cordon gpu-17")
    chain = next(c for c in report.chains if c.node == "gpu-17")
    assert chain.state("device-plugin") is LinkState.DEGRADED and chain.state("exporter") is LinkState.OK


def test_skew_lists_both_versions_and_fix_targets_the_minority() -> None:
    report = run_doctor(build(load_scenario("driver-version-skew")).cluster)
    f = report.findings[0]
    assert f.id == "driver.version-skew" and f.node is None
    assert "535.161.08" in f.cause and "550.54.15" in f.cause
    assert "gpu-b-0" in f.fix and "535.161.08" in f.fix


def test_reads_a_big_cluster_with_nine_list_calls() -> None:
    from gpuchain.sim import parse_scenario

    text = (
        "name: big\ndriverBuilds: [5.15.0-105-generic]\nnodes:\n  - {name: gpu, count: 300}\n"
        "  - {name: new, count: 20, kernel: 6.8.0-51-generic}\n"
    )
    sim = build(parse_scenario(text))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert report.api_calls == {"list": 9}  # snapshot.STEPS: one list per kind, ResourceSlices the ninth
    assert report.root_causes[0].id == "driver.kernel-mismatch" and len(report.root_causes[0].nodes) == 20
