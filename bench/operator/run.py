"""Operator reconcile cost on a 5,000-GPU-node MemoryCluster, against a per-node baseline in the same run.

Measured, with API calls counted by the cluster:
- first reconcile (empty cluster -> all operands applied) and a no-op reconcile after the
  simulated DaemonSet controller has rolled everything out (goal: 0 writes);
- the same first reconcile at 1/10 of the nodes (goal: the same writes: O(operands), not O(nodes));
- baseline: what the upstream approach writes on the first pass, one node-label patch per GPU node
  (``nvidia.com/gpu.present`` and the seven ``nvidia.com/gpu.deploy.*`` labels), timed the same way;
- time unit: one ``list`` of all nodes, so times print as multiples of a node list; the no-op
  reconcile and the node list alternate round by round.

Goals: first reconcile and no-op reconcile < 10 s each at 5,000 nodes.

    .venv/bin/python -m bench.operator.run [--nodes 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuchain.kube import NODE, POD, MemoryCluster, labels_of, name_of
from gpuchain.operator.operands import GPU_PRESENT, OPERANDS, deploy_label, is_gpu_node
from gpuchain.operator.reconcile import reconcile

# The policy object and the DaemonSet controller are test doubles: they live in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fakes.cluster_policy import cluster_policy
from fakes.operand_simulator import OperandSimulator

NS = "gpu-operator"


def make(nodes: int) -> MemoryCluster:
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"gpu-{i:04d}",
                "labels": {
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                    "nvidia.com/mig.capable": "true" if i % 4 == 0 else "false",
                },
            },
        }
        for i in range(nodes)
    ]
    return MemoryCluster([*objs, cluster_policy()])


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def per_node_labels(cluster: MemoryCluster) -> None:
    """The baseline: label every GPU node for every operand, one patch per node."""
    for node in cluster.list(NODE):
        if is_gpu_node(labels_of(node)):
            labels = {GPU_PRESENT: "true", **{deploy_label(op): "true" for op in OPERANDS}}
            cluster.patch(NODE, name=name_of(node), patch={"metadata": {"labels": labels}})


def first_reconcile(nodes: int) -> tuple[float, dict[str, int], MemoryCluster]:
    cluster = make(nodes)
    seconds = timed(lambda: reconcile(cluster, name="cluster-policy", namespace=NS))
    return seconds, cluster.calls.snapshot(), cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    firsts, baselines, lists = [], [], []
    first_calls: dict[str, int] = {}
    baseline_writes = 0
    for _ in range(args.rounds):
        seconds, first_calls, _ = first_reconcile(args.nodes)
        firsts.append(seconds)
        base = make(args.nodes)
        lists.append(timed(lambda b=base: b.list(NODE)))  # type: ignore[misc]
        base.calls.reset()
        baselines.append(timed(lambda b=base: per_node_labels(b)))  # type: ignore[misc]
        baseline_writes = base.calls.writes
    _, small_calls, _ = first_reconcile(max(1, args.nodes // 10))

    # Roll out completely, then measure the steady state.
    _, _, cluster = first_reconcile(args.nodes)
    sim = OperandSimulator(cluster, NS)
    rollout_start = time.perf_counter()
    for _ in range(5):
        busy = sim.settle()
        result = reconcile(cluster, name="cluster-policy", namespace=NS)
        if not busy and not result.changed:
            break
    rollout = time.perf_counter() - rollout_start
    pods = cluster.count(POD)
    noops = []
    noop_calls: dict[str, int] = {}
    for _ in range(args.rounds):
        cluster.calls.reset()
        noops.append(timed(lambda: reconcile(cluster, name="cluster-policy", namespace=NS)))
        noop_calls = cluster.calls.snapshot()
        lists.append(timed(lambda: cluster.list(NODE)))
    state = result.state

    unit = statistics.median(lists)
    first_w = sum(v for k, v in first_calls.items() if k in ("create", "patch", "delete", "evict"))
    small_w = sum(v for k, v in small_calls.items() if k in ("create", "patch", "delete", "evict"))
    noop_w = sum(v for k, v in noop_calls.items() if k in ("create", "patch", "delete", "evict"))
    print(f"operator reconcile, {args.nodes} GPU nodes, {len(OPERANDS)} operands, median of {args.rounds}")
    print(f"  time unit: list all nodes          {unit * 1e3:8.2f} ms")
    print(
        f"  first reconcile                     {statistics.median(firsts) * 1e3:8.2f} ms"
        f" = {statistics.median(firsts) / unit:6.1f} node lists; calls {first_calls}; writes {first_w}"
    )
    small = max(1, args.nodes // 10)
    print(f"  first reconcile at {small} nodes          writes {small_w} (equal to the above: {small_w == first_w})")
    print(
        f"  baseline per-node labelling         {statistics.median(baselines) * 1e3:8.2f} ms"
        f" = {statistics.median(baselines) / unit:6.1f} node lists; writes {baseline_writes}"
    )
    print(f"  writes ratio first/baseline         {first_w / max(1, baseline_writes):8.4f}")
    print(f"  simulated roll-out to {state:<8}      {rollout:8.2f} s  (controller + kubelets, not the operator)")
    print(
        f"  no-op reconcile                     {statistics.median(noops) * 1e3:8.2f} ms"
        f" = {statistics.median(noops) / unit:6.1f} node lists; calls {noop_calls}; writes {noop_w}"
    )
    print(f"  operand pods                        {pods}")
    first_s, noop_s = statistics.median(firsts), statistics.median(noops)
    print("goals:")
    print(f"  first reconcile < 10 s: {first_s:.2f} s  {'ok' if first_s < 10 else 'MISSED'}")
    print(f"  no-op reconcile < 10 s: {noop_s:.2f} s  {'ok' if noop_s < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
