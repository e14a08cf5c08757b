"""`gpuchain device-plugin` against NVIDIA's device plugin, as ratios gpuchain / NVIDIA.

Run (as root, after scripts/build-peers): .venv/bin/python -m bench.deviceplugin.nvidia [--quick] [--json]

The baseline is NVIDIA's own plugin, k8s-device-plugin v0.18.0 on go-nvml's DGX A100 mock
(tests/peers/nvidia-plugin), the same eight A100-SXM4-40GB as gpuchain's `a100-40gb-x8` preset
(tests/peers/dgxa100.py matches the two). Both plugins are started the same way, as processes in
the same private mount namespace set-up (NVIDIA's plugin needs it; gpuchain's goes through it too,
so neither pays for it alone), with the same config file, registering with the same Python
kubelet double (gpuchain.kubelet.peer) in this process. Rounds alternate the two (which goes first
alternates too), so load from other processes hits both alike. Per round and plugin:

- start-up until registered: process start to the plugin's Register call arriving;
- first ListAndWatch: process start to its first device list arriving (the node's capacity);
- Allocate: ``--calls`` calls, one device each, cycling over the ids, as the kubelet makes them;
- GetPreferredAllocation: ``--calls`` calls, every id offered, ``PREFERRED_SIZE`` asked for;
- RSS after those calls (VmRSS), and idle CPU: CPU seconds over ``--idle`` seconds with only the
  ListAndWatch stream open, as a percentage of one core.

Start-up, first ListAndWatch, RSS and idle CPU are medians over the rounds; the call latencies are
percentiles over every call of every round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.agents.run import cpu_seconds, rss_mib
from bench.procs import stop
from bench.stats import percentile
from gpuchain.kubelet.peer import KubeletPeer
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from peers.binaries import peer_path
from peers.dgxa100 import PLUGIN, PRESET, nvidia_env, on_dgxa100

SCENARIOS = {
    "8 GPUs": ("version: v1\n", {"nvidia.com/gpu": 8}),
    "8 x 16 replicas": (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 16\n",
        {"nvidia.com/gpu": 128},
    ),
}
"""Config file both plugins read, and the capacity it gives."""
PREFERRED_SIZE = 4
IMPLS = ("nvidia", "gpuchain")


@dataclass
class Samples:
    """One plugin's measurements in one scenario, over every round."""

    startup_ms: list[float] = field(default_factory=list)
    first_list_ms: list[float] = field(default_factory=list)
    allocate_ms: list[float] = field(default_factory=list)
    preferred_ms: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    idle_cpu_percent: list[float] = field(default_factory=list)


class _TimedKubelet(KubeletPeer):
    """The kubelet double, noting when the Register call arrives."""

    registered_at: float | None = None

    async def register(self, request: pb.RegisterRequest) -> None:
        if self.registered_at is None:
            self.registered_at = time.perf_counter()
        await super().register(request)


def _argv(impl: str, config: Path, socket_dir: Path, workdir: Path) -> list[str]:
    if impl == "nvidia":
        plugin = [
            str(peer_path(PLUGIN)),
            "--config-file",
            str(config),
            "--kubelet-socket",
            f"{socket_dir}/kubelet.sock",
        ]
    else:
        plugin = [sys.executable, "-m", "gpuchain", "device-plugin", "--backend", "sim", "--preset", PRESET]
        plugin += ["--config", str(config), "--socket-dir", str(socket_dir)]
    return on_dgxa100(plugin, workdir, socket_dir)


def _env(impl: str) -> dict[str, str]:
    if impl == "nvidia":
        return nvidia_env()
    return {k: v for k, v in os.environ.items() if not k.startswith("DP_")}


async def _one(impl: str, config_text: str, capacity: dict[str, int], args: argparse.Namespace, out: Samples) -> None:
    """Start one plugin, measure it, stop it."""
    workdir = Path(tempfile.mkdtemp(prefix="gcbn-", dir="/tmp"))  # short: unix socket paths
    socket_dir = workdir / "dp"
    config = workdir / "config.yaml"
    config.write_text(config_text)
    kubelet = _TimedKubelet(socket_dir)
    await kubelet.start()
    first: list[float] = []
    kubelet.listeners.append(lambda u: first.append(u.at) if u.capacity and not first else None)
    argv = _argv(impl, config, socket_dir, workdir)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=_env(impl), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            await kubelet.wait_for(lambda: kubelet.capacity() == capacity or proc.poll() is not None, timeout=60)
        except TimeoutError:
            raise RuntimeError(f"{impl}'s plugin did not register {capacity}: {kubelet.capacity()}") from None
        if proc.poll() is not None:
            raise RuntimeError(f"{impl}'s plugin exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        assert kubelet.registered_at is not None and first
        out.startup_ms.append((kubelet.registered_at - started) * 1000)
        out.first_list_ms.append((first[0] - started) * 1000)
        resource, ep = next(iter(kubelet.endpoints.items()))
        ids = sorted(ep.devices)
        for i in range(args.calls):
            request = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
            )
            t0 = time.perf_counter()
            await ep.stub.Allocate(request, timeout=10)
            out.allocate_ms.append((time.perf_counter() - t0) * 1000)
        preferred = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=PREFERRED_SIZE)
            ]
        )
        for _ in range(args.calls):
            t0 = time.perf_counter()
            answer = await ep.stub.GetPreferredAllocation(preferred, timeout=10)
            out.preferred_ms.append((time.perf_counter() - t0) * 1000)
            assert len(answer.container_responses[0].deviceIDs) == PREFERRED_SIZE, resource
        out.rss_mib.append(rss_mib(proc.pid))
        before, t0 = cpu_seconds(proc.pid), time.monotonic()
        await asyncio.sleep(args.idle)
        out.idle_cpu_percent.append(100 * (cpu_seconds(proc.pid) - before) / (time.monotonic() - t0))
    finally:
        stop(proc)
        await kubelet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class Row:
    scenario: str
    figure: str
    nvidia: float
    gpuchain: float
    ratio: float | None
    """gpuchain / NVIDIA; None where NVIDIA's figure is 0 (idle CPU below the clock tick)."""


def _rows(scenario: str, by_impl: dict[str, Samples]) -> list[Row]:
    figures = {
        "start-up until registered, ms (median)": lambda s: statistics.median(s.startup_ms),
        "first ListAndWatch, ms (median)": lambda s: statistics.median(s.first_list_ms),
        "Allocate p50, ms": lambda s: percentile(s.allocate_ms, 50),
        "Allocate p99, ms": lambda s: percentile(s.allocate_ms, 99),
        "GetPreferredAllocation p50, ms": lambda s: percentile(s.preferred_ms, 50),
        "GetPreferredAllocation p99, ms": lambda s: percentile(s.preferred_ms, 99),
        "RSS after the calls, MiB (median)": lambda s: statistics.median(s.rss_mib),
        "idle CPU, % of a core (median)": lambda s: statistics.median(s.idle_cpu_percent),
    }
    rows = []
    for figure, get in figures.items():
        nvidia, ours = get(by_impl["nvidia"]), get(by_impl["gpuchain"])
        rows.append(Row(scenario, figure, nvidia, ours, ours / nvidia if nvidia else None))
    return rows


def _print(rows: list[Row], args: argparse.Namespace, load: tuple[float, float]) -> None:
    print("gpuchain device-plugin vs NVIDIA's device plugin v0.18.0 (go-nvml DGX A100 mock), same run, alternated")
    print(f"rounds {args.rounds}, {args.calls} calls per round, idle window {args.idle} s")
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}")
    for scenario in SCENARIOS:
        print()
        print(f"{scenario}:")
        print(f"  {'figure':<40}{'NVIDIA':>10}{'gpuchain':>10}{'ratio':>9}")
        for r in rows:
            if r.scenario == scenario:
                shown = f"{r.ratio:>8.2f}x" if r.ratio is not None else f"{'-':>9}"
                print(f"  {r.figure:<40}{r.nvidia:>10.3f}{r.gpuchain:>10.3f}{shown}")
    main = {r.figure: r.ratio for r in rows if r.scenario == "8 GPUs"}
    print()
    print("goals (issue 27, 8 GPUs):")
    for figure, goal in (
        ("Allocate p50, ms", 1.5),
        ("GetPreferredAllocation p99, ms", 1.5),
        ("start-up until registered, ms (median)", 25.0),
    ):
        ratio = main[figure]
        assert ratio is not None, figure
        print(f"  {figure.split(',')[0]} <= {goal:g}x NVIDIA: {ratio:.2f}x  {'ok' if ratio <= goal else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, 200 calls, 5 s idle (smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per scenario (default 5)")
    parser.add_argument(
        "--calls", type=int, default=None, help="Allocate and GetPreferredAllocation calls per round (default 1000)"
    )
    parser.add_argument("--idle", type=float, default=None, help="idle CPU window in seconds (default 30)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.calls = args.calls or (200 if args.quick else 1000)
    args.idle = args.idle or (5.0 if args.quick else 30.0)
    if os.geteuid() != 0:
        sys.exit("bench.deviceplugin.nvidia: NVIDIA's plugin needs a private mount namespace: run it as root")
    if not peer_path(PLUGIN).is_file():
        sys.exit(f"bench.deviceplugin.nvidia: {peer_path(PLUGIN)} is not built: run scripts/build-peers")
    load_before = os.getloadavg()[0]
    rows: list[Row] = []
    for scenario, (config_text, capacity) in SCENARIOS.items():
        by_impl = {impl: Samples() for impl in IMPLS}
        for round_ in range(args.rounds):
            for impl in IMPLS if round_ % 2 == 0 else reversed(IMPLS):
                asyncio.run(_one(impl, config_text, capacity, args, by_impl[impl]))
        rows += _rows(scenario, by_impl)
    load = (load_before, os.getloadavg()[0])
    if args.json:
        json.dump({"load_average_1m": load, "rows": [asdict(r) for r in rows]}, sys.stdout, indent=2)
        print()
    else:
        _print(rows, args, load)


if __name__ == "__main__":
    main()
