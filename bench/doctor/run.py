"""Doctor cost on a 10,000-GPU-node simulated cluster, against baselines measured in the same run.

Measured, with API calls counted by the cluster (MemoryCluster: in-process, no network):
- ``gpuchain doctor`` end to end (its public entry point ``run_doctor``): gather (list calls) +
  diagnose, median of ``--rounds`` in wall and in CPU seconds; goals: < 5 s and <= 10 API calls;
- baseline 1, the listing alone: the very API reads one doctor run made (recorded on its first
  run, then replayed with no diagnosis: the floor any list-based doctor pays here), so
  "diagnose overhead" is doctor / listing;
- baseline 2, what a live client pays on top to decode those lists: ``json.loads`` of each
  list's body as an API server sends it (serialised once before the rounds, not timed), the
  part of a live run the in-memory cluster does not show (`bench.doctor.live` measures a live
  doctor itself, over HTTP, on responses shaped as a kube-apiserver's);
- baseline 3, the per-node way: get the node and list its pods with ``spec.nodeName=<node>``
  for every GPU node, timed on ``--sample`` nodes and scaled to all of them (printed as such).

The doctor and baselines 1 and 2 alternate round by round, so load from other processes hits all
alike. Building the cluster is set-up, not measured; after it the built objects are frozen out of
Python's cyclic collector (``gc.freeze``): on a real cluster they live in the API server's
process, and a client's collector never walks them. What the doctor and the decoding allocate is
collected as usual.

The cluster: ``--nodes`` H100 nodes (default 10,000), of which 20 on a kernel without a driver
build, 10 with a leftover time-slicing label, 10 with a GPU off the bus, plus workloads; the
doctor must name all three.

    .venv/bin/python -m bench.doctor.run [--nodes 10000] [--rounds 5] [--sample 50]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from gpuchain.doctor import run_doctor
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.sim import build, parse_scenario

GROUP_LIMIT = 5000
"""The most nodes one scenario group may hold; a bigger cluster is several groups."""


def scenario_text(nodes: int) -> str:
    """A big mixed cluster: mostly healthy, three kinds of trouble."""
    broken = 20 + 10 + 10
    healthy = nodes - broken
    sizes = [min(GROUP_LIMIT, healthy - start) for start in range(0, healthy, GROUP_LIMIT)]
    groups = "\n".join(
        f"  - {{name: {'gpu' + chr(ord('a') + i - 1) if i else 'gpu'}, count: {n}}}" for i, n in enumerate(sizes)
    )
    return f"""
name: bench-{nodes}
driverBuilds: [5.15.0-105-generic]
devicePluginConfigs:
  default: {{}}
  shared-2: {{sharing: {{timeSlicing: {{resources: [{{name: nvidia.com/gpu, replicas: 2}}]}}}}}}
nodes:
{groups}
  - {{name: newkernel, count: 20, kernel: 6.8.0-51-generic}}
  - {{name: shared, count: 10, devicePluginConfig: shared-2}}
  - {{name: lost, count: 10, lostGpus: [3]}}
workloads:
  - {{name: train, count: {nodes // 2}, gpus: 8}}
  - {{name: infer, count: 40, gpus: 1}}
"""


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    """Median wall time of ``rounds`` calls."""
    return statistics.median(alternated([fn], rounds)[0])


def alternated(fns: list[Callable[[], object]], rounds: int) -> list[list[float]]:
    """Wall times of each function, called in turn within every round."""
    return [[wall for wall, _ in spent] for spent in alternated_times(fns, rounds)]


def alternated_times(fns: list[Callable[[], object]], rounds: int) -> list[list[tuple[float, float]]]:
    """(wall, CPU) seconds of each function, called in turn within every round."""
    times: list[list[tuple[float, float]]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, spent in zip(fns, times, strict=True):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            spent.append((time.perf_counter() - wall, time.process_time() - cpu))
    return times


def medians(times: list[tuple[float, float]]) -> tuple[float, float]:
    """Median wall and median CPU seconds."""
    return statistics.median(w for w, _ in times), statistics.median(c for _, c in times)


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def recorded_reads(cluster: MemoryCluster, run: Callable[[], object]) -> list[Call]:
    """The API reads (get, list, logs) ``run`` makes, in order, with their arguments."""
    calls: list[Call] = []
    originals = {verb: getattr(cluster, verb) for verb in ("get", "list", "list_readonly", "logs")}

    def recorder(verb: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append((verb, args, kwargs))
            return originals[verb](*args, **kwargs)

        return call

    for verb in originals:
        setattr(cluster, verb, recorder(verb))
    try:
        run()
    finally:
        for verb in originals:
            delattr(cluster, verb)
    return calls


def replay(cluster: MemoryCluster, calls: list[Call]) -> None:
    """The same reads again, and nothing else."""
    for verb, args, kwargs in calls:
        getattr(cluster, verb)(*args, **kwargs)


def list_bodies(cluster: MemoryCluster, calls: list[Call]) -> list[str]:
    """The JSON bodies an API server would send for the recorded list calls (``{"items": [...]}``)."""
    return [
        json.dumps({"kind": "List", "apiVersion": "v1", "items": getattr(cluster, verb)(*args, **kwargs)})
        for verb, args, kwargs in calls
        if verb.startswith("list")
    ]


def decode(bodies: list[str]) -> None:
    """What a live client does with each list response before any diagnosis: parse it."""
    for body in bodies:
        json.loads(body)


def per_node(cluster: MemoryCluster, names: list[str]) -> None:
    """The per-node way: one get and one filtered pod list per node."""
    for name in names:
        cluster.get(NODE, name=name)
        cluster.list(POD, field_selector=f"spec.nodeName={name}")


def main() -> None:
    """Build, measure, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample", type=int, default=50)
    args = parser.parse_args()

    sim = build(parse_scenario(scenario_text(args.nodes)))
    cluster = sim.cluster
    pods = cluster.count(POD)
    print(f"cluster: {args.nodes} GPU nodes, {pods} pods, built in {sim.build_seconds:.2f} s (not measured below)")
    gc.collect()
    gc.freeze()

    cluster.calls.reset()
    reads = recorded_reads(cluster, lambda: run_doctor(cluster, reader=sim.read_log))
    calls = cluster.calls.total
    report = run_doctor(cluster, reader=sim.read_log)
    found = sorted(g.id for g in report.groups())
    bodies = list_bodies(cluster, reads)
    load_before = os.getloadavg()
    doctor_t, listing_t, decode_t = alternated_times(
        [
            lambda: run_doctor(cluster, reader=sim.read_log),
            lambda: replay(cluster, reads),
            lambda: decode(bodies),
        ],
        args.rounds,
    )
    load_after = os.getloadavg()
    (doctor_s, doctor_cpu), (listing_s, listing_cpu) = medians(doctor_t), medians(listing_t)
    decode_s, decode_cpu = medians(decode_t)
    names = [f"gpu-{i}" for i in range(min(args.sample, args.nodes - 40))]
    cluster.calls.reset()
    sample_s = median_seconds(lambda: per_node(cluster, names), 1)
    sample_calls = cluster.calls.total
    per_node_s = sample_s * args.nodes / len(names)
    per_node_calls = sample_calls * args.nodes // len(names)

    print(f"findings: {', '.join(found)}")
    print(f"load average (1 min) before / after the rounds: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print()
    print(f"{'':40} {'wall s':>8} {'CPU s':>8} {'API calls':>10} {'vs listing':>11}")
    print(
        f"{'doctor (gather + diagnose)':40} {doctor_s:8.3f} {doctor_cpu:8.3f} {calls:10d} {doctor_s / listing_s:10.2f}x"
    )
    print(
        f"{'baseline: the same API reads alone':40} {listing_s:8.3f} {listing_cpu:8.3f} {len(reads):10d} {1.0:10.2f}x"
    )
    print(
        f"{'baseline: decoding their JSON (live)':40} {decode_s:8.3f} {decode_cpu:8.3f} {len(bodies):10d} "
        f"{decode_s / listing_s:10.2f}x"
    )
    print(
        f"{'baseline: per node (scaled from ' + str(len(names)) + ')':40} {per_node_s:8.3f} {'':8} "
        f"{per_node_calls:10d} {per_node_s / listing_s:10.2f}x"
    )
    print()
    print(f"diagnosis on top of the listing: {doctor_s - listing_s:.3f} s for {report.gpu_nodes} nodes")
    print(f"per-node way / doctor: {per_node_s / doctor_s:.1f}x the time, {per_node_calls / calls:.0f}x the calls")
    ok_time, ok_calls = doctor_s < 5.0, calls <= 10
    print(
        f"goal < 5 s: {'met' if ok_time else 'MISSED'} ({doctor_s:.3f} s); goal <= 10 API calls: "
        f"{'met' if ok_calls else 'MISSED'} ({calls})"
    )
    expected = {"driver.kernel-mismatch", "device-plugin.time-slicing", "gpu.lost"}
    print(f"named every planted fault: {'yes' if expected <= set(found) else 'NO'}")


if __name__ == "__main__":
    main()
