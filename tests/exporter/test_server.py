"""The exporter's HTTP server under the fault campaign's load: idle connections cost no thread,
slow ones time out, a flood is capped, renders are shared (issue 15 defect 5).

No timing assertions: latency goals live in bench/exporter/concurrency.py."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.server import MetricsServer
from gpuchain.gpu.sim import SimBackend


def _wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


@pytest.fixture
def collector() -> GpuMetricsCollector:
    c = GpuMetricsCollector(SimBackend.from_preset("l4-x2"), counters=load_collectors(), hostname="n")
    assert c.collect_once()
    return c


@contextlib.contextmanager
def _serve(collector: GpuMetricsCollector, **kwargs: object) -> Iterator[MetricsServer]:
    server = MetricsServer(collector, host="127.0.0.1", port=0, **kwargs)  # type: ignore[arg-type]
    server.start_background()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _scrape(server: MetricsServer, path: str = "/metrics", method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_300_idle_connections_hold_no_threads_and_scrapes_still_answer(collector: GpuMetricsCollector) -> None:
    with _serve(collector, max_connections=400) as server:
        assert _scrape(server)[0] == 200  # the render worker thread exists from here on
        threads = set(threading.enumerate())
        idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(300)]
        try:
            _wait_for(lambda: server.active == 300)
            assert set(threading.enumerate()) - threads == set()  # other tests' threads may end meanwhile
            status, body = _scrape(server)
            assert status == 200 and b"DCGM_FI_DEV_GPU_TEMP{" in body
        finally:
            for s in idle:
                s.close()
        _wait_for(lambda: server.active == 0)


def test_a_scrape_is_served_while_idle_connections_fill_the_default_cap(collector: GpuMetricsCollector) -> None:
    """300 idle connections against the default cap of 256 (issue 24: a real scrape got 503): the
    longest-waiting idle connections make room, the scrape gets its metrics, and the cap holds."""
    with _serve(collector) as server:
        assert server.max_connections < 300
        idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(300)]
        try:
            _wait_for(lambda: server.evicted == 300 - server.max_connections)
            _wait_for(lambda: server.active == server.max_connections)
            status, body = _scrape(server)
            assert status == 200 and b"DCGM_FI_DEV_GPU_TEMP{" in body
            assert server.refused == 0 and server.evicted == 301 - server.max_connections
            idle[0].settimeout(10)
            assert idle[0].recv(100) == b"", "the longest-waiting connection was the one closed"
            assert server.active <= server.max_connections
        finally:
            for s in idle:
                s.close()
        _wait_for(lambda: server.active == 0)


def test_connections_past_the_cap_close_the_longest_idle_one(collector: GpuMetricsCollector) -> None:
    with _serve(collector, max_connections=3) as server:
        idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(3)]
        try:
            _wait_for(lambda: server.active == 3)
            status, _ = _scrape(server)
            assert status == 200 and server.refused == 0 and server.evicted == 1
        finally:
            for s in idle:
                s.close()
        _wait_for(lambda: server.active == 0)
        assert _scrape(server)[0] == 200


def test_a_client_that_never_sends_a_request_is_closed_after_the_timeout(collector: GpuMetricsCollector) -> None:
    with _serve(collector, request_timeout=0.2) as server:
        silent = socket.create_connection(("127.0.0.1", server.server_port))
        silent.settimeout(10)
        try:
            assert silent.recv(100) == b""  # closed by the server, not by our 10 s
        finally:
            silent.close()
        half = socket.create_connection(("127.0.0.1", server.server_port))
        half.settimeout(10)
        try:
            half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the head never ends
            assert half.recv(100) == b""
        finally:
            half.close()


def test_keep_alive_serves_several_scrapes_on_one_connection(collector: GpuMetricsCollector) -> None:
    with _serve(collector) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        try:
            for _ in range(3):
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                assert resp.status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in resp.read()
            assert server.active == 1
        finally:
            conn.close()


def test_methods_paths_and_oversized_heads(collector: GpuMetricsCollector) -> None:
    with _serve(collector) as server:
        assert _scrape(server, "/health")[0] == 200
        assert _scrape(server, "/nope")[0] == 404
        assert _scrape(server, "/metrics", "POST")[0] == 405
        status, body = _scrape(server, "/metrics", "HEAD")
        assert status == 200 and body == b""
        big = socket.create_connection(("127.0.0.1", server.server_port))
        big.settimeout(10)
        try:
            big.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n")
            assert big.recv(100).startswith(b"HTTP/1.1 431 ")
        finally:
            big.close()
        garbage = socket.create_connection(("127.0.0.1", server.server_port))
        garbage.settimeout(10)
        try:
            garbage.sendall(b"\x00\xff nonsense\r\n\r\n")
            assert garbage.recv(100).startswith(b"HTTP/1.1 400 ")
        finally:
            garbage.close()


def test_scrapes_that_arrive_during_a_render_share_it(collector: GpuMetricsCollector) -> None:
    with _serve(collector) as server:
        gate = threading.Event()
        render = server._render._produce

        def slow_render() -> bytes:
            gate.wait(10)
            return render()

        server._render._produce = slow_render
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(_scrape(server)[0])) for _ in range(20)]
        for t in threads:
            t.start()
        _wait_for(lambda: server._render.waiting == 20)
        gate.set()
        for t in threads:
            t.join(30)
        assert results == [200] * 20
        assert server.renders == 1
        assert _scrape(server)[0] == 200 and server.renders == 1, "nothing changed: the body is reused"
        collector.collect_once()
        assert _scrape(server)[0] == 200 and server.renders == 2


def test_a_new_xid_or_error_renders_again(collector: GpuMetricsCollector) -> None:
    with _serve(collector) as server:
        first = _scrape(server)[1]
        uuid = collector.backend.inventory().gpus[0].uuid
        collector.xids.record(uuid, 79)
        second = _scrape(server)[1]
        assert b'xid="79"' in second and b'xid="79"' not in first
        collector._error("inventory")
        third = _scrape(server)[1]
        assert b'gpuchain_exporter_scrape_errors_total{operation="inventory"} 1.0' in third
        assert server.renders == 3


@pytest.mark.parametrize("flag", ["--collect-interval", "--call-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_non_finite_or_non_positive_seconds_are_refused(flag: str, value: str) -> None:
    result = CliRunner().invoke(app, ["exporter", "--port", "0", flag, value])
    assert result.exit_code == 2, result.output
    assert f"{flag}: must be a finite number of seconds above zero" in result.stderr


def test_collector_refuses_nan_interval_from_code() -> None:
    with pytest.raises(ValueError, match="collection interval: must be a finite number"):
        GpuMetricsCollector(
            SimBackend.from_preset("l4-x2"), counters=load_collectors(), hostname="n", interval=float("nan")
        )


def test_gzip_when_the_scraper_accepts_it_as_prometheus_does(collector: GpuMetricsCollector) -> None:
    import gzip

    with _serve(collector) as server:
        plain = _scrape(server)[1]
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        try:
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            resp = conn.getresponse()
            assert resp.getheader("Content-Encoding") == "gzip"
            assert gzip.decompress(resp.read()) == plain
        finally:
            conn.close()
