"""Doctor cost on a 1,000-GPU-node simulated cluster, against baselines measured in the same run.

Measured, with API calls counted by the cluster (MemoryCluster: in-process, so times are the
doctor's own CPU cost plus copying objects out of the store, no network):
- ``gpuchain doctor`` end to end: gather (list calls) + diagnose, median of ``--rounds``;
  goals: < 3 s and <= 10 API calls;
- baseline 1, the listing alone: the same list calls with no diagnosis (the floor any
  list-based doctor pays), so "diagnose overhead" is doctor / listing;
- baseline 2, the per-node way (what the chapter's four commands do per node): get the node and
  list its pods with ``spec.nodeName=<node>`` for every GPU node, timed on ``--sample`` nodes and
  scaled to all of them (printed as such).

The cluster: 1,000 H100 nodes, of which 20 on a kernel without a driver build, 10 with a leftover
time-slicing label, 10 with a GPU off the bus, plus workloads; the doctor must name all three.

    .venv/bin/python -m bench.doctor.run [--nodes 1000] [--rounds 5] [--sample 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from gpuchain.doctor import run_doctor
from gpuchain.doctor.snapshot import gather
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.sim import build, parse_scenario


def scenario_text(nodes: int) -> str:
    """A big mixed cluster: mostly healthy, three kinds of trouble."""
    broken = 20 + 10 + 10
    return f"""
name: bench-{nodes}
driverBuilds: [5.15.0-105-generic]
devicePluginConfigs:
  default: {{}}
  shared-2: {{sharing: {{timeSlicing: {{resources: [{{name: nvidia.com/gpu, replicas: 2}}]}}}}}}
nodes:
  - {{name: gpu, count: {nodes - broken}}}
  - {{name: newkernel, count: 20, kernel: 6.8.0-51-generic}}
  - {{name: shared, count: 10, devicePluginConfig: shared-2}}
  - {{name: lost, count: 10, lostGpus: [3]}}
workloads:
  - {{name: train, count: {nodes // 2}, gpus: 8}}
  - {{name: infer, count: 40, gpus: 1}}
"""


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    """Median wall time of ``rounds`` calls."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_node(cluster: MemoryCluster, names: list[str]) -> None:
    """The per-node way: one get and one filtered pod list per node."""
    for name in names:
        cluster.get(NODE, name)
        cluster.list(POD, field_selector=f"spec.nodeName={name}")


def main() -> None:
    """Build, measure, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample", type=int, default=50)
    args = parser.parse_args()

    sim = build(parse_scenario(scenario_text(args.nodes)))
    cluster = sim.cluster
    pods = cluster.count(POD)
    print(f"cluster: {args.nodes} GPU nodes, {pods} pods, built in {sim.build_seconds:.2f} s (not measured below)")

    cluster.calls.reset()
    report = run_doctor(cluster, reader=sim.read_log)
    calls = cluster.calls.total
    found = sorted(g.id for g in report.groups())
    doctor_s = median_seconds(lambda: run_doctor(cluster, reader=sim.read_log), args.rounds)
    listing_s = median_seconds(lambda: gather(cluster), args.rounds)
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
    print(f"{'baseline: the list calls alone':38} {listing_s:9.3f} {calls:10d} {1.0:10.2f}x")
    print(
        f"{'baseline: per node (scaled from ' + str(len(names)) + ')':38} {per_node_s:9.3f} {per_node_calls:10d} "
        f"{per_node_s / listing_s:10.2f}x"
    )
    print()
    print(f"diagnosis on top of the listing: {doctor_s - listing_s:.3f} s for {report.gpu_nodes} nodes")
    print(f"per-node way / doctor: {per_node_s / doctor_s:.1f}x the time, {per_node_calls / calls:.0f}x the calls")
    ok_time, ok_calls = doctor_s < 3.0, calls <= 10
    print(
        f"goal < 3 s: {'met' if ok_time else 'MISSED'} ({doctor_s:.3f} s); goal <= 10 API calls: "
        f"{'met' if ok_calls else 'MISSED'} ({calls})"
    )
    expected = {"driver.kernel-mismatch", "device-plugin.time-slicing", "gpu.lost"}
    print(f"named every planted fault: {'yes' if expected <= set(found) else 'NO'}")


if __name__ == "__main__":
    main()
