"""Node agents' footprint: RSS after activity and idle CPU of the real `gpuchain <agent>` processes.

Every agent runs as its own ``python -m gpuchain <agent> --backend sim`` process, exactly the
command a DaemonSet runs, on a simulated H100 node. In the same run, next to them, the floor:
``python -c "import grpc"`` kept alive, the least a Python gRPC agent can weigh.

Phase 1, activity (``--duration``, default 300 s): the agents work while RSS is sampled every
``--sample`` seconds.
- device-plugin: the bench plays the kubelet on the plugin's socket: a ListAndWatch stream, and
  every second 10 GetPreferredAllocation and 10 Allocate calls;
- exporter: collects every second, scraped every second;
- gfd: labels every second into a feature file;
- dra-plugin (``--cluster memory``): republishes its ResourceSlice every second;
- gpu-health: publishes every second to a Kubernetes API (kmock's emulator on loopback);
- mig-manager: the bench flips the node's ``nvidia.com/mig.config`` label every 15 s, so the
  manager re-lays out the simulated GPUs, against the same API.
Reported: RSS at the end against the floor's, and growth over the last ``--flat-window``
seconds (default 180: the issue's "flat over the last 3 minutes"). Two reference rows, also in
the same run, show what no agent can go below: a typer command (typer runs its options through
pydantic, so it imports pydantic), and the same command serving gRPC on a unix socket.

Phase 2, idle (``--idle``, default 60 s): fresh processes with their default intervals and no
requests, after ``--settle`` seconds of start-up; CPU seconds from /proc over the window, as a
percentage of one core, against the floor's.

    .venv/bin/python -m bench.agents.run [--duration 300] [--idle 60] [--python PATH] [--json]

Every process runs as ``bench.agents.node``'s do: under gpuchain's runtime dependencies alone
(``bench.agents.interpreter``), this tree's ``src`` first on the path.

Where each agent's RSS goes, package by package: ``python -m bench.agents.imports``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.agents.interpreter import add_python_option, python_of, tree_env
from bench.procs import stop as stop_processes

AGENTS = ("device-plugin", "exporter", "gfd", "dra-plugin", "gpu-health", "mig-manager")
FLOOR = "floor: python -c 'import grpc'"
TYPER_FLOOR = "ref: + a typer command"
SERVING_FLOOR = "ref: + serving gRPC"
TYPER_COMMAND = """import asyncio, grpc, sys, typer
app = typer.Typer()
@app.command()
def main(socket: str = "") -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        server.add_insecure_port("unix://" + socket)
        await server.start()
        await server.wait_for_termination()
    asyncio.run(serve()) if socket else asyncio.run(asyncio.Event().wait())
app()
"""
"""The least a `gpuchain <agent>` can weigh: typer 0.29 runs every option through a pydantic
TypeAdapter, so any typer command imports pydantic; with ``--socket`` it also serves gRPC."""
NODE = "bench-node"
TICK = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident set size of a live process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def kube_api(root: Path) -> Iterator[tuple[Path, Any]]:
    """kmock's Kubernetes emulator on loopback with this node in it; yields a kubeconfig and a client."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from kube.kmock_server import VERBS, kmock_server

    from gpuchain.kube import LiveCluster

    with kmock_server() as (url, emulator):
        # The DRA plugin's ResourceSlices, for a node agent that publishes them to this API.
        emulator.resources["resource.k8s.io/v1/resourceslices"] = {"namespaced": False, "verbs": set(VERBS)}
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
            f"clusters: [{{name: bench, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: bench, user: {}}]\n"
            "contexts: [{name: bench, context: {cluster: bench, user: bench}}]\n"
        )
        client = LiveCluster.from_url(url)
        client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}}})
        yield kubeconfig, client


def agent_command(agent: str, root: Path, busy: bool, port: int, python: str = sys.executable) -> list[str]:
    """The agent's real command line: busy (1 s intervals) for phase 1, defaults for phase 2; run by ``python``."""
    d = root / agent
    d.mkdir(parents=True, exist_ok=True)
    common = [python, "-m", "gpuchain", agent, "--backend", "sim"]
    every = ["1"] if busy else []
    if agent == "device-plugin":
        return [*common, "--socket-dir", str(d)]
    if agent == "exporter":
        interval = ["--collect-interval", *every] if busy else []
        sock = ["--pod-resources-socket", str(d / "none.sock")]
        return [*common, "--address", "127.0.0.1", "--port", str(port), *interval, *sock]
    if agent == "gfd":
        interval = ["--sleep-interval", "1s"] if busy else []
        return [*common, "--output-file", str(d / "gfd"), *interval]
    if agent == "dra-plugin":
        dirs = ["--registry-dir", str(d / "reg"), "--plugin-dir", str(d / "plugin"), "--cdi-dir", str(d / "cdi")]
        interval = ["--resync-seconds", *every] if busy else []
        return [*common, "--cluster", "memory", "--node-name", NODE, *dirs, "--state-dir", str(d / "state"), *interval]
    if agent == "gpu-health":
        interval = ["--resync", "1s"] if busy else []
        return [*common, "--node", NODE, "--pod-resources-socket", str(d / "none.sock"), *interval]
    if agent == "mig-manager":
        return [*common, "--node", NODE]
    raise ValueError(agent)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    rss: list[tuple[float, float]] = field(default_factory=list)

    def alive(self) -> bool:
        return self.popen.poll() is None


def start(root: Path, kubeconfig: Path, busy: bool, ports: dict[str, int], python: str) -> list[Proc]:
    """The references and the six agents, each a process of its own run by ``python``."""
    env = tree_env({**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"})
    procs = []
    floor = [python, "-c", "import grpc, time\nwhile True: time.sleep(3600)"]
    typer_cmd = [python, "-c", TYPER_COMMAND]
    serving = [*typer_cmd, "--socket", str(root / f"ref-{'busy' if busy else 'idle'}.sock")]
    references = [(FLOOR, floor), (TYPER_FLOOR, typer_cmd), (SERVING_FLOOR, serving)]
    for name, cmd in [*references, *[(a, agent_command(a, root, busy, ports[a], python)) for a in AGENTS]]:
        slug = "".join(c if c.isalnum() else "-" for c in name.split(" python")[0])
        log = root / f"{slug}-{'busy' if busy else 'idle'}.log"
        with log.open("wb") as out:
            procs.append(Proc(name, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env), log))
    return procs


def stop(procs: list[Proc]) -> None:
    stop_processes(*(p.popen for p in procs))


def check_alive(procs: list[Proc]) -> None:
    dead = [p for p in procs if not p.alive()]
    if dead:
        tails = "\n".join(f"--- {p.name} (exit {p.popen.returncode}):\n{p.log.read_text()[-1500:]}" for p in dead)
        raise RuntimeError(f"agent(s) exited during the bench:\n{tails}")


class Kubelet:
    """The device plugin's kubelet side: a ListAndWatch stream and GetPreferredAllocation/Allocate calls."""

    def __init__(self, socket_dir: Path) -> None:
        self.socket_dir = socket_dir
        self.stop = threading.Event()
        self.calls = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # the bench fails on it (check), not a thread dying quietly
            self.error = exc

    @classmethod
    def on_one_loop(cls, socket_dirs: list[Path]) -> list[Kubelet]:
        """Kubelets for several plugins on one thread and one event loop (gRPC's asyncio poller
        serves the first loop of a process; a second loop's calls end in 'Event loop is closed')."""
        kubelets = [cls(d) for d in socket_dirs]

        async def one(kubelet: Kubelet) -> None:
            try:
                await kubelet._run()
            except BaseException as exc:
                kubelet.error = exc

        async def every() -> None:
            await asyncio.gather(*(one(k) for k in kubelets))

        thread = threading.Thread(target=lambda: asyncio.run(every()), daemon=True)
        for kubelet in kubelets:
            kubelet.thread = thread
        return kubelets

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the kubelet side failed: {self.error!r}")

    def finish(self) -> None:
        """Stop calling and wait for the call in flight, before the plugin goes away."""
        self.stop.set()
        self.thread.join(30)
        self.check()

    async def _run(self) -> None:
        import grpc

        from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
        from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

        sockets: list[Path] = []
        while not sockets and not self.stop.is_set():
            sockets = [s for s in self.socket_dir.glob("*.sock") if s.name != "kubelet.sock"]
            await asyncio.sleep(0.2)
        async with grpc.aio.insecure_channel(f"unix://{sockets[0]}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            law = stub.ListAndWatch(pb.Empty())
            first = await law.read()
            ids = [d.ID for d in first.devices]
            while not self.stop.is_set():
                for i in range(10):
                    req = pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)
                    await stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[req]))
                    alloc = pb.ContainerAllocateRequest(devices_ids=[ids[(self.calls + i) % len(ids)]])
                    await stub.Allocate(pb.AllocateRequest(container_requests=[alloc]))
                self.calls += 10
                await asyncio.sleep(1.0)
            law.cancel()


def activity(root: Path, kubeconfig: Path, client: Any, args: argparse.Namespace) -> list[Proc]:
    """Phase 1: the agents at work for ``--duration`` seconds, RSS sampled throughout."""
    from gpuchain.kube import NODE as NODE_KIND

    ports = {a: free_port() for a in AGENTS}
    procs = start(root, kubeconfig, busy=True, ports=ports, python=args.python)
    kubelet = Kubelet(root / "device-plugin")
    kubelet.thread.start()
    layouts = ["all-1g.10gb", "all-disabled"]
    began = time.monotonic()
    flips = scrapes = 0
    try:
        while (now := time.monotonic() - began) < args.duration:
            check_alive(procs)
            kubelet.check()
            if now > flips * 15:
                label = {"nvidia.com/mig.config": layouts[flips % 2]}
                client.patch(NODE_KIND, name=NODE, patch={"metadata": {"labels": label}})
                flips += 1
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports['exporter']}/metrics", timeout=5) as r:
                    r.read()
                scrapes += 1
            except OSError:
                if scrapes or now > 60:  # it answered before, or never came up
                    raise
            if now >= len(procs[0].rss) * args.sample:
                for p in procs:
                    p.rss.append((now, rss_mib(p.popen.pid)))
            time.sleep(1.0)
        now = time.monotonic() - began
        for p in procs:
            p.rss.append((now, rss_mib(p.popen.pid)))
        check_alive(procs)
        kubelet.finish()
    finally:
        kubelet.stop.set()
        stop(procs)
    state = client.get(NODE_KIND, name=NODE)["metadata"]["labels"].get("nvidia.com/mig.config.state")
    print(
        f"activity: {args.duration:.0f} s; kubelet calls {kubelet.calls * 2}, scrapes {scrapes}, "
        f"MIG layout flips {flips} (last state {state})",
        file=sys.stderr,
    )
    return procs


def idle_cpu_percent(procs: list[Proc], settle: float, window: float) -> dict[str, float]:
    """% of a core each process used over ``window`` seconds, after ``settle`` seconds of start-up
    (CPU seconds from /proc); the processes are stopped afterwards. Shared by every idle phase so
    the node agent and the separate agents are measured the same way."""
    try:
        time.sleep(settle)
        check_alive(procs)
        before = {p.name: cpu_seconds(p.popen.pid) for p in procs}
        t0 = time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - t0
        check_alive(procs)
        return {p.name: 100 * (cpu_seconds(p.popen.pid) - before[p.name]) / elapsed for p in procs}
    finally:
        stop(procs)


def idle(root: Path, kubeconfig: Path, args: argparse.Namespace) -> dict[str, float]:
    """Phase 2: fresh processes, default intervals, no requests; % of a core over ``--idle`` s."""
    procs = start(root, kubeconfig, busy=False, ports={a: free_port() for a in AGENTS}, python=args.python)
    return idle_cpu_percent(procs, args.settle, args.idle)


@dataclass
class Row:
    agent: str
    rss_end_mib: float
    ratio_to_floor: float
    growth_last_window_mib: float
    rss_samples: list[tuple[float, float]]
    idle_cpu_percent: float


def report(procs: list[Proc], cpu: dict[str, float], window: float) -> list[Row]:
    """End RSS against the floor's, and growth since the sample that opens the last ``window`` s."""
    rows = []
    floor = procs[0].rss[-1][1]
    for p in procs:
        end_t, end = p.rss[-1]
        base = next((v for t, v in reversed(p.rss) if t <= end_t - window), p.rss[0][1])
        rows.append(Row(p.name, end, end / floor, end - base, p.rss, cpu[p.name]))
    return rows


def print_rows(rows: list[Row], args: argparse.Namespace) -> None:
    floor = rows[0]
    print("Node agents, real `gpuchain <agent>` processes on a simulated H100 node (same run as the floor)")
    print(f"activity {args.duration:.0f} s, RSS sampled every {args.sample:.0f} s; idle CPU over {args.idle:.0f} s")
    print(f"every process run by {args.python}")
    print()
    growth = f"growth last {args.flat_window:.0f} s"
    print(f"{'process':<32}{'RSS end MiB':>12}{'x floor':>9}{growth:>20}{'idle CPU %':>12}")
    for r in rows:
        print(
            f"{r.agent:<32}{r.rss_end_mib:>12.1f}{r.ratio_to_floor:>9.2f}"
            f"{r.growth_last_window_mib:>+16.1f} MiB{r.idle_cpu_percent:>12.2f}"
        )
    print()
    agents = [r for r in rows if r.agent in AGENTS]
    ratio = max(r.ratio_to_floor for r in agents)
    growth_mib = max(r.growth_last_window_mib for r in agents)
    cpu = max(r.idle_cpu_percent for r in agents)
    print("goals:")
    verdict = "ok" if ratio <= 1.3 else "MISSED"
    print(f"  RSS <= 1.3x the floor ({floor.rss_end_mib:.1f} MiB): worst {ratio:.2f}x  {verdict}")
    verdict = "ok" if growth_mib <= 1.0 else "MISSED"
    print(f"  flat over the last {args.flat_window:.0f} s (<= 1 MiB growth): worst {growth_mib:+.1f} MiB  {verdict}")
    print(f"  idle CPU <= 1% of a core: worst {cpu:.2f}%  {'ok' if cpu <= 1 else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of activity (default 300)")
    ap.add_argument("--flat-window", type=float, default=180.0, help="the window RSS must be flat over (default 180)")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measurement (default 60)")
    ap.add_argument("--settle", type=float, default=15.0, help="start-up seconds before the idle window")
    add_python_option(ap)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    args.python = python_of(args)
    args.flat_window = min(args.flat_window, args.duration)
    root = Path(tempfile.mkdtemp(prefix="gcag-", dir="/tmp"))
    try:
        with kube_api(root) as (kubeconfig, client):
            procs = activity(root, kubeconfig, client, args)
            cpu = idle(root, kubeconfig, args)
        rows = report(procs, cpu, args.flat_window)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        json.dump([asdict(r) for r in rows], sys.stdout, indent=2)
        print()
    else:
        print_rows(rows, args)


if __name__ == "__main__":
    main()
