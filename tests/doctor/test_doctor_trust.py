"""The doctor reads the exporter's trust signals: scrapes made by gpuchain's own exporter collector
over simulated GPUs, put beside a simulated cluster's snapshot, live-style and through a dump."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpuchain.doctor import diagnose
from gpuchain.doctor.context import index
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import FixOp, LinkState, Severity
from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.structs import Scrape, Snapshot
from gpuchain.doctor.trust import STALE_INTERVALS, collect_interval
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.exposition import render
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER
from gpuchain.sim import build, load_scenario


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return gather(build(load_scenario("healthy")).cluster)


def _node(snap: Snapshot) -> str:
    return index(snap).views[0].name


def _scrape(node: str, lose: int | None = None, expected: tuple[int, str] | None = None) -> str:
    """What gpuchain's exporter on ``node`` serves after two collections (a GPU lost between them)."""
    gpus = SimBackend.from_preset("a100-80gb-x8")
    collector = GpuMetricsCollector(
        gpus, counters=load_collectors(), hostname=node, expected_gpus=(lambda: expected) if expected else None
    )
    collector.collect_once()
    if lose is not None:
        gpus.lose_gpu(lose)
    collector.collect_once()
    return render(collector.registry).decode()


def _with(snap: Snapshot, node: str, text: str, at: float | None = None) -> Snapshot:
    return Snapshot(**{**snap.__dict__, "scrapes": {node: Scrape(text, time.time() if at is None else at)}})


def test_a_healthy_scrape_leaves_the_exporter_link_ok(snapshot: Snapshot) -> None:
    node = _node(snapshot)
    report = diagnose(_with(snapshot, node, _scrape(node)))
    chain = next(c for c in report.chains if c.node == node)
    assert chain.state("exporter") is LinkState.OK
    assert not report.broken


def test_a_gpu_that_stopped_answering_degrades_the_exporter_link_with_the_gpus_fix(snapshot: Snapshot) -> None:
    node = _node(snapshot)
    report = diagnose(_with(snapshot, node, _scrape(node, lose=3)))
    chain = next(c for c in report.chains if c.node == node)
    assert chain.state("exporter") is LinkState.DEGRADED
    found = [f for f in report.findings if f.node == node and f.link == "exporter"]
    assert [f.id for f in found] == ["exporter.gpu-down"], "the lost GPU is down, not also missing"
    finding = found[0]
    assert finding.severity is Severity.ERROR and finding.root and report.broken
    # The exporter keeps a GPU that stopped answering at 0 on purpose: the fix is the GPU's, not a new
    # exporter pod (which would only drop the evidence).
    assert finding.action is not None and finding.action.op is FixOp.HARDWARE
    assert finding.action.target == node and "nvidia-smi -r" in finding.action.changes["action"]
    assert finding.fix.startswith("# hardware, no command fixes it: reset the GPU")
    assert any("gpuchain_gpu_up 0" in e for e in finding.evidence)
    # The other nodes' scrapes were not read: nothing is said about them.
    assert {f.node for f in report.findings if f.link == "exporter"} == {node}


def test_fewer_gpus_exported_than_feature_discovery_counted(snapshot: Snapshot) -> None:
    node = _node(snapshot)
    report = diagnose(_with(snapshot, node, _scrape(node, expected=(10, "gfd"))))
    found = {f.id: f for f in report.findings if f.node == node}
    assert set(found) == {"exporter.gpus-missing"}
    assert "exports 8 GPU(s) where the node should have 10 (from gfd): 2 GPU(s)" in found["exporter.gpus-missing"].cause


def test_samples_older_than_three_intervals_are_stale(snapshot: Snapshot) -> None:
    node = _node(snapshot)
    text = _scrape(node)
    late = time.time() + STALE_INTERVALS * COLLECT_INTERVAL + 60
    found = [f for f in diagnose(_with(snapshot, node, text, at=late)).findings if f.node == node]
    assert [(f.id, f.severity) for f in found] == [("exporter.stale", Severity.WARNING)]
    pod = index(snapshot).views[0].pod(DCGM_EXPORTER)
    assert pod is not None and found[0].action is not None and found[0].action.op is FixOp.DELETE
    assert found[0].action.changes == {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod)}
    assert found[0].fix.startswith(f"kubectl -n {namespace_of(pod)} delete pod {name_of(pod)}")
    just = time.time() + STALE_INTERVALS * COLLECT_INTERVAL - 30
    assert not [f for f in diagnose(_with(snapshot, node, text, at=just)).findings if f.node == node]


def test_the_pace_is_the_exporter_pods_own_collect_interval() -> None:
    def pod(*args: str) -> dict[str, object]:
        return {"spec": {"containers": [{"command": ["gpuchain", "exporter"], "args": list(args)}]}}

    assert collect_interval(pod("--backend", "nvml", "--collect-interval", "120")) == 120
    assert collect_interval(pod("--collect-interval=5")) == 5
    assert collect_interval(pod("--collect-interval", "soon")) == COLLECT_INTERVAL
    assert collect_interval(None) == COLLECT_INTERVAL


@pytest.mark.parametrize(
    "text",
    [
        # NVIDIA's dcgm-exporter: no trust series, so nothing to judge.
        '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="h"} 40\n',
        "<html>502 Bad Gateway</html>\n",
    ],
)
def test_a_scrape_without_trust_series_says_nothing(snapshot: Snapshot, text: str) -> None:
    node = _node(snapshot)
    assert diagnose(_with(snapshot, node, text)).findings == diagnose(snapshot).findings


def test_a_dump_carries_the_scrape_beside_the_exporter_pod(tmp_path: Path) -> None:
    sim = build(load_scenario("healthy"))
    write_dump(sim.cluster, tmp_path)
    snap = read_dump(tmp_path)
    assert snap.scrapes == {}
    view = index(snap).views[0]
    pod = view.pod(DCGM_EXPORTER)
    assert pod is not None
    metrics = tmp_path / str(namespace_of(pod)) / name_of(pod) / "metrics.txt"
    metrics.write_text(_scrape(view.name, lose=0))
    scraped_at = time.time() - 5
    os.utime(metrics, (scraped_at, scraped_at))
    snap = read_dump(tmp_path)
    assert set(snap.scrapes) == {view.name} and snap.scrapes[view.name].at == pytest.approx(scraped_at)
    assert "exporter.gpu-down" in {f.id for f in diagnose(snap).findings if f.node == view.name}


def test_a_live_doctor_scrapes_gpuchains_ready_exporters_through_the_pod_proxy() -> None:
    from gpuchain.doctor import run_doctor
    from gpuchain.doctor.logs import cluster_scraper
    from gpuchain.doctor.snapshot import scrape_candidates, with_scrapes
    from gpuchain.kube import POD

    sim = build(load_scenario("healthy"))
    exporters = sorted(
        (p["spec"]["nodeName"], name_of(p))
        for p in sim.cluster.list(POD, namespace="gpu-operator")
        if name_of(p).startswith("nvidia-dcgm-exporter-")
    )
    assert len(exporters) >= 2
    assert scrape_candidates(gather(sim.cluster)) == [], "a pod without an IP cannot be proxied to"
    for i, (_, pod) in enumerate(exporters):
        sim.cluster.patch_status(POD, name=pod, status={"podIP": f"10.0.0.{i + 10}"}, namespace="gpu-operator")
    lost_on = exporters[0][0]
    # Each exporter serves its own node's scrape; the last one serves nothing (connection refused).
    for node, pod in exporters[:-1]:
        sim.cluster.set_served(
            pod,
            namespace="gpu-operator",
            port=9400,
            path="metrics",
            text=_scrape(node, lose=2 if node == lost_on else None),
        )
    report = run_doctor(sim.cluster, scraper=cluster_scraper(sim.cluster))
    assert {(f.id, f.node) for f in report.findings} == {("exporter.gpu-down", lost_on)}
    assert report.api_calls["proxy"] == len(exporters) and "proxy" not in run_doctor(sim.cluster).api_calls
    assert not report.not_judged
    # Bounded: one read, and the rest said not judged.
    snap, reads = with_scrapes(gather(sim.cluster), scraper=cluster_scraper(sim.cluster), limit=1)
    assert reads == 1 and set(snap.scrapes) == {lost_on} and snap.unscraped == len(exporters) - 1
    assert any(f"{len(exporters) - 1} exporter(s) beyond" in line for line in diagnose(snap).not_judged)


def test_doctor_dump_writes_the_scrapes_it_reads_back(tmp_path: Path) -> None:
    from gpuchain.kube import POD

    sim = build(load_scenario("healthy"))
    node, pod = min(
        (p["spec"]["nodeName"], name_of(p))
        for p in sim.cluster.list(POD, namespace="gpu-operator")
        if name_of(p).startswith("nvidia-dcgm-exporter-")
    )
    sim.cluster.patch_status(POD, name=pod, status={"podIP": "10.0.0.7"}, namespace="gpu-operator")
    sim.cluster.set_served(pod, namespace="gpu-operator", port=9400, path="metrics", text=_scrape(node, lose=1))
    before = time.time()
    counts = write_dump(sim.cluster, tmp_path)
    assert counts["scrapes"] == 1
    assert (tmp_path / "gpu-operator" / pod / "metrics.txt").read_text().startswith("# HELP")
    snap = read_dump(tmp_path)
    assert set(snap.scrapes) == {node} and snap.scrapes[node].at >= before - 1
    assert {(f.id, f.node) for f in diagnose(snap).findings} == {("exporter.gpu-down", node)}
