"""Background collection: a slow or failing backend never blocks a scrape; XIDs arrive live; HTTP."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request

import pytest
from fakes.fake_pynvml import nvml_over

from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.exposition import render
from gpuchain.exporter.server import MetricsServer
from gpuchain.gpu.errors import GpuLostError
from gpuchain.gpu.model import Inventory, Telemetry
from gpuchain.gpu.sim import SimBackend

COUNTERS = load_collectors()


class _Stalling(SimBackend):
    """A SimBackend whose NVML calls can hang (on a gate) or fail, per GPU or for the inventory."""

    def __init__(self, preset: str = "h100-80gb-x8") -> None:
        super().__init__(SimBackend.from_preset(preset).topology)
        self.gate = threading.Event()
        self.gate.set()
        self.stall_uuid: str | None = None
        self.stall_inventory = False
        self.fail_inventory = False
        self.telemetry_calls: dict[str, int] = {}

    def inventory(self) -> Inventory:
        if self.stall_inventory:
            self.gate.wait(30)
        if self.fail_inventory:
            raise GpuLostError("NVML: GPU is lost")
        return super().inventory()

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        self.telemetry_calls[gpu_uuid] = self.telemetry_calls.get(gpu_uuid, 0) + 1
        if gpu_uuid == self.stall_uuid:
            self.gate.wait(30)
        return super().telemetry(gpu_uuid)


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_hung_telemetry_serves_last_good_value_and_counts_errors() -> None:
    sim = _Stalling()
    gpu0, gpu1 = sim.inventory().gpus[:2]
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n", call_timeout=0.2)
    sim.set_telemetry(0, gpu_util=55)
    assert collector.collect_once()

    sim.set_telemetry(0, gpu_util=90)
    sim.set_telemetry(1, gpu_util=40)
    sim.stall_uuid = gpu0.uuid
    sim.gate.clear()
    try:
        began = time.monotonic()
        collector.collect_once()
        assert time.monotonic() - began < 2.0
        text = render(collector.registry).decode()
        assert _value(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu0.uuid) == 55.0, "the last good value, not a zero"
        assert _value(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu1.uuid) == 40.0
        assert _value(text, "gpuchain_exporter_scrape_errors_total", operation="telemetry") == 1.0

        collector.collect_once()
        assert sim.telemetry_calls[gpu0.uuid] == 2, "a hung call must not be stacked behind"
        text = render(collector.registry).decode()
        assert _value(text, "gpuchain_exporter_scrape_errors_total", operation="telemetry") == 2.0
    finally:
        sim.gate.set()
    time.sleep(0.05)
    collector.collect_once()
    assert _value(render(collector.registry).decode(), "DCGM_FI_DEV_GPU_UTIL", UUID=gpu0.uuid) == 90.0


def test_failing_inventory_keeps_the_last_series() -> None:
    sim = _Stalling("l4-x2")
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n", call_timeout=0.5)
    assert collector.collect_once()
    sim.fail_inventory = True
    assert not collector.collect_once()
    text = render(collector.registry).decode()
    assert _value(text, "gpuchain_exporter_scrape_errors_total", operation="inventory") == 1.0
    assert len([line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]) == 2


def test_unhealthy_until_the_first_inventory() -> None:
    sim = _Stalling("l4-x2")
    sim.fail_inventory = True
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n", call_timeout=0.5)
    assert not collector.collect_once()
    ok, reason = collector.health()
    assert not ok and "no successful collection" in reason
    assert "DCGM_FI_DEV_GPU_UTIL{" not in render(collector.registry).decode()
    sim.fail_inventory = False
    assert collector.collect_once()
    assert collector.health()[0]


def test_health_turns_503_when_the_backend_stalls() -> None:
    """A hung backend keeps scrapes answering with old values, so /health must say they are stale."""
    sim = _Stalling("l4-x2")
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n", interval=0.1, call_timeout=0.05)
    server = MetricsServer(collector, host="127.0.0.1", port=0)
    server.start_background()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert collector.collect_once()
        assert _get(base + "/health")[0] == 200
        sim.stall_inventory = True
        sim.gate.clear()
        time.sleep(0.35)  # more than 3 collection intervals
        assert not collector.collect_once()
        code, _, body = _get(base + "/health")
        assert code == 503
        assert body.startswith("KO: last successful collection") and "more than 3 x the 0.1s" in body
        assert "DCGM_FI_DEV_GPU_TEMP{" in _get(base + "/metrics")[2], "old values are still served"
        sim.gate.set()
        sim.stall_inventory = False
        _wait_for(lambda: collector.collect_once() and collector.health()[0])
        assert _get(base + "/health")[0] == 200
    finally:
        sim.gate.set()
        server.shutdown()
        server.server_close()


def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_repeated_xid_from_the_event_stream_moves_the_counter() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    uuid = sim.inventory().gpus[5].uuid
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n", interval=60.0)
    collector.start()
    try:
        _wait_for(lambda: collector.health()[0])

        def probe_seen() -> bool:
            sim.inject_xid(5, xid=31)
            time.sleep(0.02)
            return _value(render(collector.registry).decode(), "DCGM_EXP_XID_ERRORS_TOTAL", xid="31") is not None

        _wait_for(probe_seen)
        sim.inject_xid(5, xid=79)
        sim.inject_xid(5, xid=79)

        def two_79s() -> bool:
            text = render(collector.registry).decode()
            return _value(text, "DCGM_EXP_XID_ERRORS_TOTAL", UUID=uuid, xid="79") == 2.0

        _wait_for(two_79s)
        text = render(collector.registry).decode()
        assert _value(text, "DCGM_FI_DEV_XID_ERRORS", UUID=uuid, err_code="79") == 79.0
    finally:
        collector.stop()


@pytest.fixture
def served() -> tuple[GpuMetricsCollector, str]:  # type: ignore[misc]
    collector = GpuMetricsCollector(SimBackend.from_preset("l4-x2"), counters=COUNTERS, hostname="n")
    server = MetricsServer(collector, host="127.0.0.1", port=0)
    server.start_background()
    yield collector, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_http_health_and_metrics(served: tuple[GpuMetricsCollector, str]) -> None:
    collector, base = served
    code, _, body = _get(base + "/health")
    assert code == 503 and body.startswith("KO")
    collector.collect_once()
    code, _, body = _get(base + "/health")
    assert code == 200 and body.startswith("OK")
    code, ctype, body = _get(base + "/metrics")
    assert code == 200
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    assert re.search(r'^DCGM_FI_DEV_FB_FREE\{gpu="1",.*Hostname="n".*\} \d+', body, re.M)
    assert _get(base + "/other")[0] == 404


def _series_keys(text: str) -> set[str]:
    """Metric name + labels of every sample, without the value."""
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("DCGM_")}


def test_nvml_backend_exports_the_same_series_as_the_simulator() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    mig = sim.inventory().gpus[0].mig_devices[1]
    sim.set_telemetry(mig.uuid, memory_used_mib=1234)
    nvml = nvml_over(sim)
    try:
        via_sim = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n")
        via_nvml = GpuMetricsCollector(nvml, counters=COUNTERS, hostname="n")
        assert via_sim.collect_once() and via_nvml.collect_once()
        sim_series = _series_keys(render(via_sim.registry).decode())
        assert len(sim_series) > 30 * 13  # 30 MIG devices x 13 fields (no utilisation on MIG), 2 whole GPUs
        assert _series_keys(render(via_nvml.registry).decode()) == sim_series
        for via in (via_sim, via_nvml):
            text = render(via.registry).decode()
            assert _value(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID=str(mig.gi_id), gpu="0") == 1234.0
    finally:
        nvml.close()
