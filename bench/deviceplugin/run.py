"""Device plugin benchmark: Allocate, GetPreferredAllocation and XID-to-ListAndWatch, as ratios to bare gRPC.

Run: .venv/bin/python -m bench.deviceplugin.run [--quick] [--json]

The plugin runs in its own process (a real DevicePlugin on a SimBackend). The same gRPC server,
on the same unix socket, also serves a bare service with no logic:

- ``Echo``: an Empty -> Empty unary call: the baseline for Allocate (one device per call) and
  for GetPreferredAllocation (every id offered, ``PREFERRED_SIZE`` asked for, as the kubelet
  asks for a pod's devices);
- ``Ticks``: a stream that sends one Empty per request: the baseline for propagation.

This process plays the kubelet. Both kinds of trigger take the same path: a command over a pipe
to a thread in the plugin process, which injects the XID into the SimBackend (-> health ->
ListAndWatch) or asks the bare stream for one message. Baseline and measured calls alternate, so
load from other processes hits both alike. Scenarios: 8 whole GPUs, 56 MIG devices (8 x 7
1g.10gb, migStrategy single), 8 x 48, 8 x 128 and 8 x 256 time-slicing replicas.

The plugin process's RSS is not reported here: ``bench.agents`` measures the real
``gpuchain device-plugin`` process against a floor instead.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc

from bench.stats import percentile
from gpuchain.agent.runtime import settled
from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.plugin import DevicePlugin
from gpuchain.gpu.sim import SimBackend
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

SCENARIOS: dict[str, tuple[str, str]] = {
    "8 GPUs": ("", "none"),
    "56 MIG devices": ("flags: {migStrategy: single}", "mig"),
    "8 x 48 replicas": ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 48}]}}", "none"),
    "8 x 128 replicas": ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 128}]}}", "none"),
    "8 x 256 replicas": ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 256}]}}", "none"),
}
PREFERRED_SIZE = 4
"""Devices asked for in each GetPreferredAllocation call."""
ECHO = "/gpuchain.bench.Bare/Echo"
TICKS = "/gpuchain.bench.Bare/Ticks"


# ---- plugin process ---------------------------------------------------------------------------


def plugin_process(conn: Connection, socket_dir: str, config_text: str, layout: str) -> None:
    asyncio.run(_plugin_main(conn, socket_dir, config_text, layout))


async def _plugin_main(conn: Connection, socket_dir: str, config_text: str, layout: str) -> None:
    loop = asyncio.get_running_loop()
    tick_queues: list[asyncio.Queue[None]] = []
    done = asyncio.Event()

    async def echo(request: pb.Empty, context: Any) -> pb.Empty:
        return pb.Empty()

    async def ticks(request: pb.Empty, context: Any) -> Any:
        queue: asyncio.Queue[None] = asyncio.Queue()
        tick_queues.append(queue)
        while True:
            await queue.get()
            yield pb.Empty()

    handler = grpc.method_handlers_generic_handler(
        "gpuchain.bench.Bare",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(
                echo, request_deserializer=pb.Empty.FromString, response_serializer=pb.Empty.SerializeToString
            ),
            "Ticks": grpc.unary_stream_rpc_method_handler(
                ticks, request_deserializer=pb.Empty.FromString, response_serializer=pb.Empty.SerializeToString
            ),
        },
    )
    sim = SimBackend.from_preset("h100-80gb-x8")
    if layout == "mig":
        for i in range(8):
            sim.set_mig_layout(i, {"1g.10gb": 7})
    config = parse_config(config_text + "\nhealth: {recoveryQuietSeconds: 0}\n")
    plugin = DevicePlugin(
        sim, config=config, socket_dir=socket_dir, env={}, watch_interval=3600, extra_handlers=[handler]
    )
    await plugin.start()
    settled()  # as `gpuchain device-plugin` does once serving
    res = plugin.resources[0]
    targets = [d.mig_uuid or d.gpu_index for d in res.devices if d.replica in (None, 0)]

    def tick() -> None:
        for q in tick_queues:
            q.put_nowait(None)

    def _gpu_of(target: int | str) -> int | str:
        if isinstance(target, str):
            return next(d.gpu_index for d in res.devices if d.mig_uuid == target)
        return target

    def reader() -> None:
        while True:
            cmd, arg = conn.recv()
            if cmd == "xid":
                sim.inject_xid(targets[arg % len(targets)], xid=79)
            elif cmd == "recover":
                sim.recover_gpu(_gpu_of(targets[arg % len(targets)]))
            elif cmd == "tick":
                loop.call_soon_threadsafe(tick)
            elif cmd == "stop":
                loop.call_soon_threadsafe(done.set)
                return

    threading.Thread(target=reader, daemon=True).start()
    conn.send({"endpoint": res.endpoint, "ids": [d.id for d in res.devices]})
    await done.wait()
    await plugin.stop()


# ---- kubelet side -----------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    devices: int
    allocate_p50_ms: float
    allocate_p99_ms: float
    bare_unary_p50_ms: float
    bare_unary_p99_ms: float
    allocate_ratio_p50: float
    allocate_ratio_p99: float
    preferred_p50_ms: float
    preferred_p99_ms: float
    preferred_bare_p50_ms: float
    preferred_bare_p99_ms: float
    preferred_ratio_p50: float
    preferred_ratio_p99: float
    propagation_p50_ms: float
    propagation_p99_ms: float
    bare_stream_p50_ms: float
    bare_stream_p99_ms: float
    propagation_ratio_p50: float
    propagation_ratio_p99: float


async def _measure(name: str, config_text: str, layout: str, calls: int, events: int) -> Row:
    root = tempfile.mkdtemp(prefix="gcb-", dir="/tmp")
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=plugin_process, args=(child, root, config_text, layout))
    proc.start()
    try:
        info = parent.recv()
        ids: list[str] = info["ids"]
        async with grpc.aio.insecure_channel(f"unix://{root}/{info['endpoint']}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            echo = channel.unary_unary(
                ECHO, request_serializer=pb.Empty.SerializeToString, response_deserializer=pb.Empty.FromString
            )
            ticks = channel.unary_stream(
                TICKS, request_serializer=pb.Empty.SerializeToString, response_deserializer=pb.Empty.FromString
            )
            law = stub.ListAndWatch(pb.Empty())
            first = await law.read()
            assert isinstance(first, pb.ListAndWatchResponse) and len(first.devices) == len(ids)
            tick_stream = ticks(pb.Empty())
            alloc_t: list[float] = []
            bare_t: list[float] = []
            for i in range(calls + calls // 10):
                request = pb.AllocateRequest(
                    container_requests=[pb.ContainerAllocateRequest(devices_ids=[ids[i % len(ids)]])]
                )
                t0 = time.perf_counter()
                await echo(pb.Empty())
                t1 = time.perf_counter()
                await stub.Allocate(request)
                t2 = time.perf_counter()
                if i >= calls // 10:
                    bare_t.append(t1 - t0)
                    alloc_t.append(t2 - t1)
            preferred = pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=PREFERRED_SIZE)
                ]
            )
            pref_t: list[float] = []
            pref_bare_t: list[float] = []
            for i in range(calls + calls // 10):
                t0 = time.perf_counter()
                await echo(pb.Empty())
                t1 = time.perf_counter()
                answer = await stub.GetPreferredAllocation(preferred)
                t2 = time.perf_counter()
                assert len(answer.container_responses[0].deviceIDs) == PREFERRED_SIZE
                if i >= calls // 10:
                    pref_bare_t.append(t1 - t0)
                    pref_t.append(t2 - t1)
            prop_t: list[float] = []
            tick_t: list[float] = []
            for i in range(events + events // 10):
                t0 = time.perf_counter()
                parent.send(("tick", 0))
                await tick_stream.read()
                t1 = time.perf_counter()
                parent.send(("xid", i))
                message = await law.read()
                t2 = time.perf_counter()
                assert isinstance(message, pb.ListAndWatchResponse)
                assert any(d.health == "Unhealthy" for d in message.devices)
                parent.send(("recover", i))
                await law.read()
                if i >= events // 10:
                    tick_t.append(t1 - t0)
                    prop_t.append(t2 - t1)
            law.cancel()
            tick_stream.cancel()
        parent.send(("stop", 0))
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    ms = functools.partial(percentile, scale=1000)
    a50, a99, b50, b99 = ms(alloc_t, 50), ms(alloc_t, 99), ms(bare_t, 50), ms(bare_t, 99)
    p50, p99, s50, s99 = ms(prop_t, 50), ms(prop_t, 99), ms(tick_t, 50), ms(tick_t, 99)
    g50, g99, gb50, gb99 = ms(pref_t, 50), ms(pref_t, 99), ms(pref_bare_t, 50), ms(pref_bare_t, 99)
    return Row(
        name,
        len(ids),
        a50,
        a99,
        b50,
        b99,
        a50 / b50,
        a99 / b99,
        g50,
        g99,
        gb50,
        gb99,
        g50 / gb50,
        g99 / gb99,
        p50,
        p99,
        s50,
        s99,
        p50 / s50,
        p99 / s99,
    )


def _print(rows: list[Row], load: tuple[float, float]) -> None:
    print("Device plugin benchmark (ratios against bare gRPC on the same unix socket, same run)")
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}")
    print()
    head = f"{'scenario':<17}{'ids':>5}  {'Allocate p50/p99 ms':>21}  {'bare p50/p99 ms':>17}  {'ratio p50/p99':>14}"
    print(head)
    for r in rows:
        print(
            f"{r.scenario:<17}{r.devices:>5}  {r.allocate_p50_ms:>9.3f} / {r.allocate_p99_ms:<9.3f}"
            f"  {r.bare_unary_p50_ms:>7.3f} / {r.bare_unary_p99_ms:<7.3f}"
            f"  {r.allocate_ratio_p50:>5.2f} / {r.allocate_ratio_p99:<5.2f}"
        )
    print()
    head = f"{'scenario':<17}{'ids':>5}  {'Preferred p50/p99 ms':>21}  {'bare p50/p99 ms':>17}  {'ratio p50/p99':>14}"
    print(head)
    for r in rows:
        print(
            f"{r.scenario:<17}{r.devices:>5}  {r.preferred_p50_ms:>9.3f} / {r.preferred_p99_ms:<9.3f}"
            f"  {r.preferred_bare_p50_ms:>7.3f} / {r.preferred_bare_p99_ms:<7.3f}"
            f"  {r.preferred_ratio_p50:>5.2f} / {r.preferred_ratio_p99:<5.2f}"
        )
    print(f"(GetPreferredAllocation: every id offered, {PREFERRED_SIZE} asked for)")
    print()
    head = f"{'scenario':<17}{'ids':>5}  {'XID->LaW p50/p99 ms':>21}  {'bare p50/p99 ms':>17}  {'ratio p50/p99':>14}"
    print(head)
    for r in rows:
        print(
            f"{r.scenario:<17}{r.devices:>5}  {r.propagation_p50_ms:>9.3f} / {r.propagation_p99_ms:<9.3f}"
            f"  {r.bare_stream_p50_ms:>7.3f} / {r.bare_stream_p99_ms:<7.3f}"
            f"  {r.propagation_ratio_p50:>5.2f} / {r.propagation_ratio_p99:<5.2f}"
        )
    print()
    worst_alloc = max(r.allocate_ratio_p99 for r in rows)
    big = rows[-1]
    print("goals:")
    print(f"  Allocate p99 <= 2x bare unary call:   worst {worst_alloc:.2f}x  {'ok' if worst_alloc <= 2 else 'MISSED'}")
    ok = "ok" if big.preferred_ratio_p99 <= 2 else "MISSED"
    print(f"  GetPreferredAllocation p99 <= 2x bare at {big.scenario}: {big.preferred_ratio_p99:.2f}x  {ok}")
    ok = "ok" if big.propagation_p99_ms < 10 else "MISSED"
    print(f"  XID -> ListAndWatch p99 < 10 ms at {big.scenario}: {big.propagation_p99_ms:.2f} ms  {ok}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--calls", type=int, default=None, help="Allocate calls per scenario (default 2000)")
    parser.add_argument("--events", type=int, default=None, help="XIDs per scenario (default 300)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--only", default=None, help="run only the scenarios whose name contains this (e.g. '256'); goals need 8 x 256"
    )
    args = parser.parse_args()
    calls = args.calls or (200 if args.quick else 2000)
    events = args.events or (40 if args.quick else 300)
    load_before = os.getloadavg()[0]
    rows = [
        asyncio.run(_measure(name, text, layout, calls, events))
        for name, (text, layout) in SCENARIOS.items()
        if args.only is None or args.only in name
    ]
    load = (load_before, os.getloadavg()[0])
    if args.json:
        json.dump({"load_average_1m": load, "rows": [asdict(r) for r in rows]}, sys.stdout, indent=2)
        print()
    else:
        _print(rows, load)


if __name__ == "__main__":
    main()
