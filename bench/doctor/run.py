"""Doctor cost on a 10,000-GPU-node simulated cluster, against baselines measured in the same run.

Measured, with API calls counted by the cluster (MemoryCluster: in-process, so times are the
doctor's own CPU cost plus copying objects out of the store, no network):
- ``gpuchain doctor`` end to end (its public entry point ``run_doctor``): gather (list calls) +
  diagnose, median of ``--rounds``; goals: < 5 s and <= 10 API calls;
- baseline 1, the listing alone: the very API reads one doctor run made (recorded on its first
  run, then replayed with no diagnosis: the floor any list-based doctor pays), so "diagnose
  overhead" is doctor / listing. Doctor and listing alternate round by round, so load from
  other processes hits both alike;
- baseline 2, the per-node way (what the chapter's four commands do per node): get the node and
  list its pods with ``spec.nodeName=<node>`` for every GPU node, timed on ``--sample`` nodes and
  scaled to all of them (printed as such).

The cluster: ``--nodes`` H100 nodes (default 10,000), of which 20 on a kernel without a driver build, 10 with a leftover
time-slicing label, 10 with a GPU off the bus, plus workloads; the doctor must name all three.

    .venv/bin/python -m bench.doctor.run [--nodes 10000] [--rounds 5] [--sample 50]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from gpuchain.doctor import run_doctor
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.sim import build, parse_scenario, render

GROUP_LIMIT = 5000
"""The most nodes one scenario group may hold; a bigger cluster is several groups."""


def unique_pod_name(ds_name: str, node: str) -> str:
    """The simulator's DaemonSet pod name with 10 hash characters instead of 5.

    Five hex characters of a node-name hash collide (AlreadyExists) past about a thousand
    nodes, where the real DaemonSet controller would retry with a fresh random suffix; the
    doctor reads pods by owner and node, not by suffix.
    """
    return f"{ds_name}-{hashlib.sha1(node.encode()).hexdigest()[:10]}"


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
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, spent in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return times


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def recorded_reads(cluster: MemoryCluster, run: Callable[[], object]) -> list[Call]:
    """The API reads (get, list, logs) ``run`` makes, in order, with their arguments."""
    calls: list[Call] = []
    originals = {verb: getattr(cluster, verb) for verb in ("get", "list", "logs")}

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


def per_node(cluster: MemoryCluster, names: list[str]) -> None:
    """The per-node way: one get and one filtered pod list per node."""
    for name in names:
        cluster.get(NODE, name)
        cluster.list(POD, field_selector=f"spec.nodeName={name}")


def main() -> None:
    """Build, measure, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample", type=int, default=50)
    args = parser.parse_args()

    render.pod_name = unique_pod_name  # type: ignore[assignment]
    sim = build(parse_scenario(scenario_text(args.nodes)))
    cluster = sim.cluster
    pods = cluster.count(POD)
    print(f"cluster: {args.nodes} GPU nodes, {pods} pods, built in {sim.build_seconds:.2f} s (not measured below)")

    cluster.calls.reset()
    reads = recorded_reads(cluster, lambda: run_doctor(cluster, reader=sim.read_log))
    calls = cluster.calls.total
    report = run_doctor(cluster, reader=sim.read_log)
    found = sorted(g.id for g in report.groups())
    doctor_t, listing_t = alternated(
        [lambda: run_doctor(cluster, reader=sim.read_log), lambda: replay(cluster, reads)], args.rounds
    )
    doctor_s, listing_s = statistics.median(doctor_t), statistics.median(listing_t)
    names = [f"gpu-{i}" for i in range(min(args.sample, args.nodes - 40))]
    cluster.calls.reset()
    sample_s = median_seconds(lambda: per_node(cluster, names), 1)
    sample_calls = cluster.calls.total
    per_node_s = sample_s * args.nodes / len(names)
    per_node_calls = sample_calls * args.nodes // len(names)

    print(f"findings: {', '.join(found)}")
    print()
    print(f"{'':38} {'seconds':>9} {'API calls':>10} {'vs listing':>11}")
    print(f"{'doctor (gather + diagnose)':38} {doctor_s:9.3f} {calls:10d} {doctor_s / listing_s:10.2f}x")
    print(f"{'baseline: the same API reads alone':38} {listing_s:9.3f} {len(reads):10d} {1.0:10.2f}x")
    print(
        f"{'baseline: per node (scaled from ' + str(len(names)) + ')':38} {per_node_s:9.3f} {per_node_calls:10d} "
        f"{per_node_s / listing_s:10.2f}x"
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
