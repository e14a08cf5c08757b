"""The repair loop's metrics as Prometheus sees them: served by ``gpu-health --repair --metrics-port``
on the exporter's HTTP server, scraped over real HTTP on loopback and parsed by prometheus-client's
own text parser, after a simulated repair whose every stage took a known time (a stepped clock)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube.kmock_server import kmock_server, write_kubeconfig
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpuchain.exporter.server import MetricsServer
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import LiveCluster
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.gpuloop import LOOP_ANNOTATION, GpuRecord, Stage, Step, decode_records, encode_records
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.model import FAULTS_ANNOTATION, Fault, encode_faults
from gpuchain.sim.remediation import node_object


class SteppedClock:
    """Time moves only when the test says so: each stage's duration is known exactly."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def scrape(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def samples(text: str) -> dict[str, list[Sample]]:
    """Every family of the exposition by name, parsed the way Prometheus' client library parses."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(found: dict[str, list[Sample]], family: str, sample: str, **labels: str) -> float:
    hits = [s.value for s in found[family] if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"{sample} {labels}: {hits}"
    return hits[0]


@contextlib.contextmanager
def serving(agent: GpuLoopAgent) -> Iterator[MetricsServer]:
    server = MetricsServer(agent.metrics, host="127.0.0.1", port=0)
    server.start_background()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def repair_rig() -> tuple[MemoryCluster, SimBackend, GpuLoopAgent, SteppedClock, str]:
    backend = SimBackend.from_preset("h100-80gb-x8", node="n")
    uuid = backend.inventory().gpu(2).uuid
    node = node_object("n")
    node["status"]["nodeInfo"] = {"bootID": "b1"}
    node["metadata"]["annotations"] = {
        FAULTS_ANNOTATION: encode_faults({uuid: Fault(uuid=uuid, gpu=uuid, xids=(48,), covers=(uuid,))}),
        "gpuchain.io/gpu-pods": json.dumps({uuid: ["ml/train/main"]}),
    }
    cluster = MemoryCluster([node])
    clock = SteppedClock()
    return cluster, backend, GpuLoopAgent(backend, cluster=cluster, node_name="n", clock=clock), clock, uuid


async def test_a_simulated_repair_shows_in_the_stage_histograms_scraped_over_http() -> None:
    cluster, _, agent, clock, uuid = repair_rig()
    stop = asyncio.Event()
    with serving(agent) as server:
        status, _, body = await asyncio.to_thread(scrape, server.server_port, "/health")
        assert status == 503 and "no repair pass" in body  # nothing has run yet

        agent.run_once()  # XID 48 seen: quarantined; a pod still holds the GPU
        assert decode_records(cluster.get(NODE, name="n")["metadata"]["annotations"][LOOP_ANNOTATION])[uuid].stage is (
            Stage.QUARANTINED
        )
        clock.now += 20.0  # the pod takes 20 s to leave
        cluster.patch(NODE, name="n", patch={"metadata": {"annotations": {"gpuchain.io/gpu-pods": "{}"}}})
        agent.run_once()  # drained -> reset -> burn-in passed, all at this instant
        clock.now += 400.0  # the recovery quiet period: the fault is still published
        cluster.patch(NODE, name="n", patch={"metadata": {"annotations": {FAULTS_ANNOTATION: None}}})
        task = asyncio.create_task(agent.run(stop, interval=3600))  # one supervised pass: re-admitted
        deadline = time.monotonic() + 10
        while agent.metrics.passes["ok"] < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

        status, ctype, body = await asyncio.to_thread(scrape, server.server_port)
        stop.set()
        await task
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    found = samples(body)

    # time in each stage, one observation each, in the bucket its duration falls in
    stage = "gpuchain_gpu_repair_stage_seconds"
    for name, seconds, bucket_in, bucket_below in (
        ("quarantined", 20.0, "30", "15"),
        ("drained", 0.0, "1", None),
        ("reset", 0.0, "1", None),
        ("burn-in", 400.0, "600", "300"),
    ):
        assert value(found, stage, stage + "_count", stage=name, node="n") == 1
        assert value(found, stage, stage + "_sum", stage=name, node="n") == seconds
        assert value(found, stage, stage + "_bucket", stage=name, le=bucket_in) == 1
        if bucket_below is not None:
            assert value(found, stage, stage + "_bucket", stage=name, le=bucket_below) == 0
        assert value(found, stage, stage + "_bucket", stage=name, le="+Inf") == 1
    assert {s.labels["stage"] for s in found[stage]} == {"quarantined", "drained", "reset", "burn-in"}

    total = "gpuchain_gpu_repair_duration_seconds"
    assert value(found, total, total + "_count", node="n") == 1
    assert value(found, total, total + "_sum", node="n") == 420.0  # detection to re-admission

    outcomes = "gpuchain_gpu_repair_outcomes"
    assert value(found, outcomes, outcomes + "_total", outcome="readmitted") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="reset-ok") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="burn-in-ok") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="reboot-requested") == 0  # served from zero
    gpus = "gpuchain_gpu_repair_gpus"
    assert all(s.value == 0 for s in found[gpus])  # every GPU serving again
    assert value(found, "gpuchain_gpu_repair_passes", "gpuchain_gpu_repair_passes_total", result="ok") == 1


async def test_a_reboot_request_counts_and_the_gpu_stays_counted_in_its_stage() -> None:
    cluster, backend, agent, _, _ = repair_rig()
    backend.fail_reset(2)
    cluster.patch(NODE, name="n", patch={"metadata": {"annotations": {"gpuchain.io/gpu-pods": "{}"}}})
    stop = asyncio.Event()
    with serving(agent) as server:
        task = asyncio.create_task(agent.run(stop, interval=3600))
        deadline = time.monotonic() + 10
        while agent.metrics.passes["ok"] < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        status, _, body = await asyncio.to_thread(scrape, server.server_port)
        health = await asyncio.to_thread(scrape, server.server_port, "/health")
        stop.set()
        await task
    assert status == 200 and health[0] == 200 and health[2].startswith("OK: last repair pass ok")
    found = samples(body)
    outcomes = "gpuchain_gpu_repair_outcomes"
    assert value(found, outcomes, outcomes + "_total", outcome="reset-failed") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="reboot-requested") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="readmitted") == 0
    assert value(found, "gpuchain_gpu_repair_gpus", "gpuchain_gpu_repair_gpus", stage="reboot-requested") == 1
    assert value(found, "gpuchain_gpu_repair_duration_seconds", "gpuchain_gpu_repair_duration_seconds_count") == 0


def test_a_failed_pass_turns_health_red_with_the_reason() -> None:
    _, _, agent, clock, _ = repair_rig()
    agent.metrics.finished_pass(None, error="UnreachableError: the API server did not answer", at=clock())
    ok, reason = agent.metrics.health()
    assert not ok and "UnreachableError" in reason
    found = samples(agent.metrics.prometheus())
    assert value(found, "gpuchain_gpu_repair_passes", "gpuchain_gpu_repair_passes_total", result="failed") == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_gpu_health_serves_the_loop_metrics_on_its_metrics_port(tmp_path: Path) -> None:
    """The command end to end: ``gpu-health --repair --metrics-port`` against kmock's API over HTTP.
    The Node says GPU 2 waited for a reboot (requested at boot b1) and the node now runs boot b2:
    the process's loop burns the GPU in and re-admits it, and its /metrics shows those stages."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    name, uuid = sim.topology.node, sim.inventory().gpu(2).uuid
    asked = time.time() - 90.0  # the reboot was requested 90 s ago
    waiting = GpuRecord(
        uuid=uuid,
        index=2,
        stage=Stage.REBOOT,
        since=asked,
        cause=f"{uuid}: XID 48",
        boot_id="b1",
        timeline=(Step(Stage.QUARANTINED, asked - 30), Step(Stage.DRAINED, asked - 20), Step(Stage.RESET, asked - 10),
                  Step(Stage.REBOOT, asked, "reset failed")),
    )  # fmt: skip
    node = node_object(name)
    node["metadata"]["annotations"] = {LOOP_ANNOTATION: encode_records({uuid: waiting})}
    port = _free_port()
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        live.create(node)
        live.patch_status(NODE, name=name, status={"nodeInfo": {"bootID": "b2"}})
        env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url))}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpuchain", "gpu-health", "--node", name, "--backend", "sim"),
            *("--preset", "h100-80gb-x8", "--pod-resources-socket", str(tmp_path / "none.sock"), "--repair"),
            *("--metrics-address", "127.0.0.1", "--metrics-port", str(port)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        try:
            deadline = time.monotonic() + 30
            readmitted = ("gpuchain_gpu_repair_outcomes_total", {"outcome": "readmitted", "node": name}, 1)
            while True:
                assert time.monotonic() < deadline, "gpu-health never re-admitted the GPU"
                with contextlib.suppress(OSError):
                    status, _, body = await asyncio.to_thread(scrape, port)
                    health = await asyncio.to_thread(scrape, port, "/health")  # the pass has ended
                    # The endpoint serves once the first role does; the repair loop's families come with it.
                    outcomes = samples(body).get("gpuchain_gpu_repair_outcomes", []) if status == 200 else []
                    if health[0] == 200 and readmitted in [(x.name, x.labels, x.value) for x in outcomes]:
                        break
                await asyncio.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 15)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        annotations = live.get(NODE, name=name)["metadata"]["annotations"]
        live.close()
    assert proc.returncode == 0, out.decode()
    assert f"serving the repair loop's metrics on http://127.0.0.1:{port}/metrics" in out.decode()
    assert health[0] == 200 and health[2].startswith("OK: last repair pass ok")
    assert decode_records(annotations[LOOP_ANNOTATION]) == {}  # re-admitted: no GPU held any more
    assert QUARANTINE_ANNOTATION not in annotations
    found = samples(body)
    stage = "gpuchain_gpu_repair_stage_seconds"
    assert value(found, stage, stage + "_count", stage="reboot-requested", node=name) == 1
    assert value(found, stage, stage + "_sum", stage="reboot-requested", node=name) >= 90.0
    assert value(found, stage, stage + "_bucket", stage="reboot-requested", le="60") == 0
    assert value(found, stage, stage + "_count", stage="burn-in", node=name) == 1
    outcomes = "gpuchain_gpu_repair_outcomes"
    assert value(found, outcomes, outcomes + "_total", outcome="burn-in-ok") == 1
    assert value(found, outcomes, outcomes + "_total", outcome="readmitted") == 1
    total = "gpuchain_gpu_repair_duration_seconds"
    assert value(found, total, total + "_count") == 1
    assert value(found, total, total + "_sum") >= 120.0  # quarantined 120 s before the re-admission


def test_a_metrics_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as busy, kmock_server() as (url, _emulator):
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        live = LiveCluster.from_url(url)
        live.create(node_object("h100-node"))
        live.close()
        env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url))}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = subprocess.run(
            [sys.executable, "-m", "gpuchain", "gpu-health", "--node", "h100-node", "--backend", "sim", "--repair",
             "--pod-resources-socket", str(tmp_path / "none.sock"),
             "--metrics-address", "127.0.0.1", "--metrics-port", str(busy.getsockname()[1])],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "--metrics-port" in line]
    assert len(lines) == 1 and "cannot listen on 127.0.0.1:" in lines[0] and "pick another port" in lines[0]


def test_sim_run_reports_the_metrics_next_to_the_timeline_and_they_agree() -> None:
    """`gpuchain sim run gpu-reset -o json`: the agent's stage histograms hold exactly the time the
    timeline shows between one stage and the next, and the repair's whole duration."""
    from typer.testing import CliRunner

    from gpuchain.cli import app

    result = CliRunner().invoke(app, ["sim", "run", "gpu-reset", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (gpu,) = data["gpus"]
    steps = gpu["timeline"]
    spent: dict[str, float] = {}
    entered = steps[0]
    for step in steps[1:]:
        if step["stage"] != entered["stage"]:  # from entering a stage to entering the next one
            spent[entered["stage"]] = step["seconds"] - entered["seconds"]
            entered = step
    assert spent["burn-in"] > 0  # the burn-in's own pass counts in its stage
    metrics = data["metrics"][gpu["node"]]
    assert {k: v["sum"] for k, v in metrics["stageSeconds"].items()} == pytest.approx(spent)
    assert all(v["count"] == 1 for v in metrics["stageSeconds"].values())
    assert metrics["repairSeconds"] == {"count": 1, "sum": pytest.approx(steps[-1]["seconds"] - steps[0]["seconds"])}
    assert metrics["outcomes"] == {"readmitted": 1, "reset-ok": 1, "burn-in-ok": 1}


def test_a_stage_is_timed_from_its_entry_not_from_a_note_made_in_it() -> None:
    """The burn-in stage holds two steps (entered, then "passed"); its time runs from the first."""
    from gpuchain.remediation.loopagent import LoopMetrics

    steps = (Step(Stage.QUARANTINED, 0.0), Step(Stage.DRAINED, 10.0), Step(Stage.RESET, 10.0),
             Step(Stage.BURN_IN, 100.0, "reset done"), Step(Stage.BURN_IN, 130.0, "passed: ok"))  # fmt: skip
    before = GpuRecord(uuid="GPU-a", index=0, stage=Stage.BURN_IN, since=100.0, passed=True, timeline=steps)
    after = GpuRecord(
        uuid="GPU-a", index=0, stage=Stage.HEALTHY, since=200.0, timeline=(*steps, Step(Stage.HEALTHY, 200.0))
    )
    metrics = LoopMetrics(node="n")
    metrics.observe(before, after)
    assert metrics.durations == {"burn-in": [100.0]}
    assert metrics.repairs == [200.0] and metrics.outcomes["readmitted"] == 1
