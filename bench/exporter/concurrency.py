"""Exporter under concurrent scrapers and idle connections, against a single scraper in the same run.

The server runs in its own process (``gpuchain exporter`` on simulated H100s with 8 x 7 MIG
devices, the largest exposition), so the client's work does not share its interpreter. For each
server:

1. one scraper: ``--scrapes`` sequential GETs with Prometheus' request headers (gzip accepted),
   a new connection each (p50, p99);
2. ``--clients`` scrapers at once (asyncio clients spread over ``--client-procs`` processes, one
   connection per GET): p50, p99, max, failures; the goal is p99 within ``--goal-ratio`` x the
   single scraper's p99 and under 50 ms;
3. the same two on kept-alive connections (one per scraper, as Prometheus holds them);
4. ``--idle`` connections opened and left silent: the server's threads and RSS (from /proc)
   before and with them open; goal: flat.

The reference is the previous design measured the same way: the stdlib ThreadingHTTPServer
(backlog 5, a thread per connection, no timeout) serving the same collector. It speaks HTTP/1.0
and closes every connection, so its kept-alive rows count those closes as failures.

    .venv/bin/python -m bench.exporter.concurrency [--clients 50] [--scrapes 200] [--idle 300]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.procs import stop as stop_processes

PRESET_MIG = "h100-80gb-x8"
HOST = "127.0.0.1"
SCRAPE = (
    b"GET /metrics HTTP/1.1\r\nHost: bench\r\nUser-Agent: Prometheus/2.53.0\r\n"
    b"Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
    b"X-Prometheus-Scrape-Timeout-Seconds: 10\r\nConnection: close\r\n\r\n"
)
"""The request Prometheus sends (its headers; one connection per scrape here, the harder case)."""


@dataclass
class Latency:
    p50_ms: float
    p99_ms: float
    max_ms: float
    failures: int
    samples: int = 0
    server_cpu_ms: float = float("nan")
    """Server process CPU (user + system) per scrape in this phase: unlike wall time, not
    inflated by other load on the machine."""


@dataclass
class Footprint:
    threads: int
    rss_kib: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _collector() -> Any:
    """The served collector: 8 H100s, each as 7 x 1g.10gb, one collection done."""
    from gpuchain.exporter.collector import GpuMetricsCollector
    from gpuchain.exporter.counters import load_collectors
    from gpuchain.gpu.sim import SimBackend

    sim = SimBackend.from_preset(PRESET_MIG)
    for gpu in sim.inventory().gpus:
        sim.set_mig_layout(gpu.index, {"1g.10gb": 7})
    collector = GpuMetricsCollector(sim, counters=load_collectors(), hostname="bench-node", interval=3600)
    collector.collect_once()
    return collector


def serve(kind: str, port: int) -> None:
    """Child process: serve the collector with ``kind`` (gpuchain | threaded) until killed."""
    from gpuchain.exporter.exposition import CONTENT_TYPE, render

    collector = _collector()
    if kind == "gpuchain":
        from gpuchain.exporter.server import MetricsServer

        MetricsServer(collector, host=HOST, port=port).serve_forever(stop_signals=True)
        return

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = render(collector.registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Threaded(ThreadingHTTPServer):
        daemon_threads = True  # request_queue_size stays the stdlib's 5, as before

    Threaded((HOST, port), Handler).serve_forever()


def _start(kind: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path]))
    proc = subprocess.Popen([sys.executable, "-m", "bench.exporter.concurrency", "--serve", kind, str(port)], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{kind} server did not start")


_VERIFIED: set[bytes] = set()
"""Response bodies already checked in full: the server renders once per collection, so nearly
every scrape returns bytes seen before, and comparing them costs the client microseconds instead
of a gunzip and a search (about 0.5 ms of the client's CPU, which delayed every other scraper
sharing its event loop)."""


def _valid(head: bytes, body: bytes) -> bool:
    if b" 200 " not in head[:16]:
        return False
    if body in _VERIFIED:
        return True
    plain = gzip.decompress(body) if b"content-encoding: gzip" in head.lower() else body
    if b"DCGM_FI_DEV_GPU_UTIL" not in plain:
        return False
    _VERIFIED.add(body)
    return True


async def _get(port: int, timeout: float = 30.0) -> float | None:
    """One scrape on a new connection: seconds, or None when it failed."""
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        writer.write(SCRAPE)
        data = await asyncio.wait_for(reader.read(), timeout)
        writer.close()
    except (OSError, TimeoutError):
        return None
    elapsed = time.perf_counter() - t0
    head, _, body = data.partition(b"\r\n\r\n")
    return elapsed if _valid(head, body) else None


async def _keepalive_client(port: int, scrapes: int, timeout: float = 30.0) -> list[float | None]:
    """``scrapes`` sequential scrapes on one kept-alive connection, as one Prometheus server does."""
    request = SCRAPE.replace(b"Connection: close", b"Connection: keep-alive")
    out: list[float | None] = []
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
    except (OSError, TimeoutError):
        return [None] * scrapes
    try:
        for _ in range(scrapes):
            t0 = time.perf_counter()
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            body = await asyncio.wait_for(reader.readexactly(length), timeout)
            ok = b" 200 " in head[:16] and body[:2] in (b"\x1f\x8b", b"# ")
            out.append(time.perf_counter() - t0 if ok else None)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, StopIteration):
        out.extend([None] * (scrapes - len(out)))
    finally:
        writer.close()
    return out


async def _keepalive(port: int, clients: int, scrapes: int) -> Latency:
    results = await asyncio.gather(*(_keepalive_client(port, scrapes) for _ in range(clients)))
    return _latency([s for r in results for s in r])


def _latency(samples: list[float | None]) -> Latency:
    ok = sorted(s * 1000 for s in samples if s is not None)
    if not ok:
        return Latency(float("nan"), float("nan"), float("nan"), len(samples), samples=len(samples))
    p99 = ok[min(len(ok) - 1, round(0.99 * (len(ok) - 1)))]
    return Latency(statistics.median(ok), p99, ok[-1], len(samples) - len(ok), samples=len(samples))


async def _single(port: int, scrapes: int) -> Latency:
    return _latency([await _get(port) for _ in range(scrapes)])


async def _scrapers(port: int, clients: int, per_client: int) -> list[float | None]:
    async def client() -> list[float | None]:
        return [await _get(port) for _ in range(per_client)]

    results = await asyncio.gather(*(client() for _ in range(clients)))
    return [s for r in results for s in r]


def _scraper_process(port: int, clients: int, per_client: int, start: Any) -> list[float | None]:
    """One client process's share of the scrapers (``start``: a barrier, so all begin together)."""
    start.wait()
    return asyncio.run(_scrapers(port, clients, per_client))


def _concurrent(port: int, clients: int, scrapes: int, procs: int) -> Latency:
    """``clients`` scrapers at once, spread over ``procs`` client processes: 50 scrapers are 50
    Prometheus-like programs, not 50 coroutines on one event loop, whose own CPU per response would
    otherwise queue every other scraper behind it."""
    per_client = max(1, scrapes // clients * 4)
    shares = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(procs) as pool:
        start = manager.Barrier(procs)
        results = pool.starmap(_scraper_process, [(port, n, per_client, start) for n in shares])
    return _latency([s for r in results for s in r])


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _footprint(pid: int) -> Footprint:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return Footprint(int(fields["Threads"].strip()), int(fields["VmRSS"].split()[0]))


def _idle(pid: int, port: int, count: int) -> tuple[Footprint, Footprint]:
    before = _footprint(pid)
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection((HOST, port), timeout=5))
        time.sleep(1.0)  # let the server accept them all
        during = _footprint(pid)
    finally:
        for s in socks:
            s.close()
    return before, during


def measure(
    kind: str, clients: int, scrapes: int, idle: int, procs: int
) -> tuple[Latency, Latency, Latency, Latency, Footprint, Footprint]:
    proc, port = _start(kind)
    try:
        asyncio.run(_single(port, 20))  # warm up

        def phase(run: Callable[[], Latency]) -> Latency:
            cpu = _cpu_seconds(proc.pid)
            result = run()
            scrapes_done = result.samples or 1
            result.server_cpu_ms = (_cpu_seconds(proc.pid) - cpu) * 1000 / scrapes_done
            return result

        single = phase(lambda: asyncio.run(_single(port, scrapes)))
        many = phase(lambda: _concurrent(port, clients, scrapes, procs))
        single_ka = phase(lambda: asyncio.run(_keepalive(port, 1, scrapes)))
        many_ka = phase(lambda: asyncio.run(_keepalive(port, clients, max(4, scrapes // clients * 4))))
        before, during = _idle(proc.pid, port, idle)
    finally:
        stop_processes(proc)
    return single, many, single_ka, many_ka, before, during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--scrapes", type=int, default=200, help="sequential scrapes for the single scraper")
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--goal-ratio", type=float, default=5.0)
    parser.add_argument(
        "--client-procs", type=int, default=5, help="processes the new-connection scrapers are spread over"
    )
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    print(f"Exporter, 8 x 7 MIG devices: {args.clients} concurrent scrapers vs 1, {args.idle} idle connections")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}; new-connection scrapers in {args.client_procs} processes")
    for kind, label in (("gpuchain", "gpuchain (asyncio)"), ("threaded", "previous: stdlib threaded, backlog 5")):
        single, many, single_ka, many_ka, before, during = measure(
            kind, args.clients, args.scrapes, args.idle, args.client_procs
        )
        print(f"  {label}")
        for how, one, lots in (
            ("new connection per scrape", single, many),
            ("kept-alive connections", single_ka, many_ka),
        ):
            ratio = lots.p99_ms / one.p99_ms
            verdict = "ok" if ratio <= args.goal_ratio and lots.p99_ms < 50 and not lots.failures else "ABOVE GOAL"
            print(f"    {how}")
            print(
                f"      1 scraper      p50 {one.p50_ms:7.2f} ms  p99 {one.p99_ms:7.2f} ms  failures {one.failures}"
                f"  server CPU {one.server_cpu_ms:.2f} ms/scrape"
            )
            print(
                f"      {args.clients} scrapers    p50 {lots.p50_ms:7.2f} ms  p99 {lots.p99_ms:7.2f} ms  "
                f"max {lots.max_ms:7.2f} ms  failures {lots.failures}  p99 ratio {ratio:5.2f}x ({verdict})"
                f"  server CPU {lots.server_cpu_ms:.2f} ms/scrape"
            )
        print(
            f"    {args.idle} idle connections: server threads {before.threads} -> {during.threads}  "
            f"RSS {before.rss_kib / 1024:.1f} -> {during.rss_kib / 1024:.1f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
