"""`gpuchain top`: per-pod shares on shared GPUs from the simulator, a running exporter, or the backend."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.exporter.server import MetricsServer
from gpuchain.gpu.sim import SimBackend

runner = CliRunner()


def test_scenario_json_shows_pods_time_sliced_on_one_gpu_with_their_own_figures() -> None:
    result = runner.invoke(app, ["top", "--scenario", "time-sliced", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["simulated"] is True
    node = next(n for n in data["nodes"] if n["node"] == "gpu-0")
    assert (node["gpusExpected"], node["expectedFrom"], node["gpusExported"]) == (8, "seen", 8)
    shared = next(d for d in node["devices"] if len(d["pods"]) >= 2)
    pods = {p["pod"]: (p["memoryMib"], p["smPercent"], p["processes"]) for p in shared["pods"]}
    assert pods["train"] == (40_000, 55, 1) and pods["notebook"] == (2_000, 3, 1)
    assert shared["up"] is True and shared["sampleAgeS"] < 60
    mps = next(d for d in next(n for n in data["nodes"] if n["node"] == "gpu-1")["devices"] if d["pods"])
    assert mps["unattributedProcesses"] == 1


def test_scenario_table_names_each_pod() -> None:
    result = runner.invoke(app, ["top", "--scenario", "time-sliced"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "research/notebook/main" in result.stdout and "(no pod)" in result.stdout


def test_url_reads_a_running_exporter_and_shows_a_lost_gpu() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    uuid = sim.inventory().gpus[1].uuid
    sim.run_process(1, pid=10, memory_mib=5_000, sm_percent=30)
    rows = [Assignment("nvidia.com/gpu", uuid, PodRef("ml", "solo", "main"))]
    collector = GpuMetricsCollector(
        sim,
        counters=load_collectors(),
        hostname="node-a",
        pod_lister=lambda: rows,
        processes=True,
        cgroup_of=lambda pid: None,
    )
    collector.collect_once()
    sim.lose_gpu(4)
    collector.collect_once()
    server = MetricsServer(collector, host="127.0.0.1", port=0)
    server.start_background()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        result = runner.invoke(app, ["top", "--url", url, "-o", "json"])
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.output
    (node,) = json.loads(result.stdout)["nodes"]
    assert (node["node"], node["gpusExported"], node["gpusExpected"]) == ("node-a", 7, 8)
    by_gpu = {d["gpu"]: d for d in node["devices"]}
    assert by_gpu["4"]["up"] is False
    # No cgroup names a pod here: the process is counted on the GPU, not charged to the holder.
    assert by_gpu["1"]["unattributedProcesses"] == 1
    assert [(p["pod"], p["memoryMib"]) for p in by_gpu["1"]["pods"]] == [("solo", 0)]


def test_a_url_nobody_serves_is_one_line() -> None:
    result = runner.invoke(app, ["top", "--url", "http://127.0.0.1:9/metrics", "--timeout", "2"])
    assert result.exit_code == 2
    assert "cannot read http://127.0.0.1:9/metrics" in result.output
