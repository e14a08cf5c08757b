"""The live doctor end to end (HTTP, decoding, diagnosis) on recorded list responses, against fetching them alone.

`bench.doctor.run` measures the doctor on the in-memory cluster, where nothing is decoded; this
measures what a live ``gpuchain doctor`` pays on a cluster of ``--nodes`` GPU nodes (the same
simulated cluster, about 7.6 pods a node: 10,000 nodes give some 76,000 pods), with the list
responses a kube-apiserver would send (managedFields, defaults, node images: see
`bench.doctor.replay`) replayed over HTTP on loopback by a server in its own process:

- baseline, the replay alone: a plain HTTP client (httpx, as lightkube uses) fetches the very
  requests one doctor run made and reads their bytes, decoding nothing: what any client pays;
- before: the doctor as it was before issue 26: gather on `LiveCluster` reading each list whole
  through lightkube (one request a list, ``json.loads``, every field), then diagnose, with Python's
  cyclic collector running as usual;
- after: ``run_doctor`` on `LiveCluster` as it is (``list_readonly``: pages of 500, each next page
  read and inflated while this one is decoded, msgspec, no managedFields nor node images; the collector
  paused for the run);
- the diagnosis alone, on the snapshot "after" gathered (the doctor's own time), collector paused.

All four alternate round by round, so load from other processes hits all alike; the first run of
each way records the responses (not measured); what the bench itself keeps through the rounds is
frozen out of the cyclic collector (``gc.freeze``), as `bench.doctor.run` does. Both ways must find
the same; the goal is "after" under 5 s at 10,000 nodes. Container logs are not read
(``reader=None``): the replay has none, and a live doctor reads at most eight.

``--baseline SRC``: another tree's ``src`` (``git archive main src | tar -x -C /tmp/base``). Then
"before" is that tree's ``run_doctor`` and "after" this tree's, each in a worker process of its own
(`bench.doctor.worker`) reporting its own wall and CPU seconds, alternated in the same rounds: a
change's before and after, measured in one run. Both must find the same. Each is timed as that
tree's ``gpuchain doctor`` runs it: a tree whose console command leaves the snapshot to the OS at
exit (``run_doctor``'s ``keep``, `gpuchain.common.fastexit`) has it freed after the timer, and the
bench prints that time apart; a tree before that frees it inside ``run_doctor``, in its time.

    .venv/bin/python -m bench.doctor.live [--nodes 1000] [--rounds 3] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from bench.agents.interpreter import SRC, tree_env
from bench.doctor.run import alternated_times, medians
from gpuchain.common.gcpause import collector_paused
from gpuchain.doctor import run_doctor
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.model import Report
from gpuchain.doctor.snapshot import gather, timed_gather
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube import LiveCluster
from gpuchain.kube.kinds import Kind
from gpuchain.kube.objects import Obj


class WholeLists(LiveCluster):
    """The read before issue 26: ``list_readonly`` is ``list`` (lightkube, one request, every field)."""

    def list_readonly(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return self.list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)


def doctor_before(cluster: WholeLists) -> Report:
    """``run_doctor`` as it was before issue 26 (gather, then diagnose; no collector pause)."""
    return diagnose(timed_gather(cluster)[0])


def diagnosis_alone(snapshot: Snapshot) -> Report:
    """The doctor's own time: ``diagnose`` as ``run_doctor`` runs it."""
    with collector_paused():
        return diagnose(snapshot)


def start_replay(nodes: int) -> tuple[subprocess.Popen[str], str]:
    """The replay server in its own process, and its URL once it has built the cluster."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.doctor.replay", "--nodes", str(nodes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    if not line.startswith("replaying on "):
        server.kill()
        raise SystemExit(f"the replay server did not start: {line!r}")
    return server, line.split()[-1]


def served(http: httpx2.Client) -> list[str]:
    """The list requests the replay server answered since the last time it was asked."""
    return list(json.loads(http.get("/_replay/requests").content))


def fetch(http: httpx2.Client, targets: list[str]) -> int:
    """GET each target and read its body, decoding nothing; the bytes read."""
    return sum(len(http.get(target).content) for target in targets)


def findings(report: Any) -> list[list[Any]]:
    """The report's findings as [id, nodes], to compare the two ways (as `bench.doctor.worker` sends them)."""
    return sorted([g.id, sorted(g.nodes)] for g in report.groups())


class Worker:
    """A `bench.doctor.worker` process: one tree's ``run_doctor`` on the replay, on request."""

    def __init__(self, url: str, tree: Path | None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.doctor.worker", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=tree_env(dict(os.environ), tree or SRC),
        )
        self.spent: list[tuple[float, float]] = []
        #: Seconds freeing each run's snapshot took after the timer (0 where the tree frees it in run_doctor).
        self.kept_free: list[float] = []

    def run(self) -> list[list[Any]]:
        """One run; its own (wall, CPU) seconds go to ``spent``; the findings."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("a doctor worker died (its error is above)")
        answer = json.loads(line)
        self.spent.append((answer["wall"], answer["cpu"]))
        self.kept_free.append(float(answer.get("kept_free", 0.0)))
        return list(answer["findings"])

    def close(self) -> None:
        """End the worker."""
        self.process.kill()
        self.process.wait()


def compare_trees(url: str, baseline: Path, rounds: int, http: httpx2.Client, snapshot: Snapshot) -> None:
    """``--baseline``: the other tree's doctor and this tree's, each in its own worker, alternated
    with the replay alone and the diagnosis alone; prints the rows and the ratio."""
    before, after = Worker(url, baseline), Worker(url, None)
    try:
        served(http)
        found_before = before.run()  # the first run of each: what it asks, not measured
        before_targets = served(http)
        found_after = after.run()
        targets = served(http)
        before.spent.clear()
        after.spent.clear()
        before.kept_free.clear()
        after.kept_free.clear()
        print(f"findings: {', '.join(sorted({i for i, _ in found_after}))}")
        print(f"same findings in both trees: {'yes' if found_before == found_after else 'NO'}")
        gc.collect()
        gc.freeze()
        load_before = os.getloadavg()
        ways: list[Callable[[], object]] = [
            lambda: fetch(http, targets),
            before.run,
            after.run,
            lambda: diagnosis_alone(snapshot),
        ]
        local = [medians(t) for t in alternated_times(ways, rounds)]
        load_after = os.getloadavg()
        rows = [
            ("baseline: the replay alone (bytes, no decoding)", *local[0], len(targets)),
            (f"before: {baseline}'s doctor", *medians(before.spent), len(before_targets)),
            ("after: this tree's doctor", *medians(after.spent), len(targets)),
            ("the diagnosis alone (this tree, in the bench)", *local[3], 0),
        ]
    finally:
        before.close()
        after.close()
    print(f"load average (1 min) before / after the rounds: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print(f"median of {rounds} rounds; each doctor's wall and CPU are its own process's")
    for label, worker in (("before", before), ("after", after)):
        if any(worker.kept_free):
            freed = sorted(worker.kept_free)[len(worker.kept_free) // 2]
            print(f"{label}: freeing the snapshot, left to the OS by its command, {freed:.3f} s (not in its time)")
    print()
    print(f"{'':46} {'wall s':>8} {'CPU s':>8} {'requests':>9} {'vs replay':>10}")
    for label, wall, cpu, requests in rows:
        print(f"{label:46} {wall:8.3f} {cpu:8.3f} {requests:9d} {wall / rows[0][1]:9.2f}x")
    print()
    before_s, after_s = rows[1][1], rows[2][1]
    print(f"after / before: {after_s / before_s:.2f}x the time; CPU {rows[2][2] / rows[1][2]:.2f}x")
    print(f"goal < 5 s end to end: {'met' if after_s < 5.0 else 'MISSED'} ({after_s:.3f} s)")


def main() -> None:
    """Start the replay, record, measure, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another tree's src: its doctor is 'before'")
    args = parser.parse_args()

    started = time.perf_counter()
    server, url = start_replay(args.nodes)
    try:
        http = httpx2.Client(base_url=url, timeout=600)
        if args.baseline:
            snapshot = gather(LiveCluster.from_url(url))
            print(f"cluster: {args.nodes} GPU nodes, {len(snapshot.nodes)} nodes, {len(snapshot.pods)} pods; "
                  f"built in {time.perf_counter() - started:.0f} s (not measured)")  # fmt: skip
            compare_trees(url, args.baseline, args.rounds, http, snapshot)
            return
        before_cluster, after_cluster = WholeLists.from_url(url), LiveCluster.from_url(url)
        before_report = doctor_before(before_cluster)  # recording, not measured
        before_targets = served(http)
        after_report = run_doctor(after_cluster)
        after_targets = served(http)
        snapshot = gather(after_cluster)
        served(http)
        nbytes = fetch(http, before_targets)
        print(
            f"cluster: {args.nodes} GPU nodes, {after_report.cluster_nodes} nodes, "
            f"{len(snapshot.pods)} pods; {nbytes / 1e6:.0f} MB of list responses; "
            f"built and recorded in {time.perf_counter() - started:.0f} s (not measured)"
        )
        same = findings(before_report) == findings(after_report)
        print(f"findings: {', '.join(sorted({i for i, _ in findings(after_report)}))}")
        print(f"same findings before and after: {'yes' if same else 'NO'}")
        del before_report, after_report
        # The snapshot the diagnosis row reads lives through the rounds: frozen out of the cyclic
        # collector, so the way that runs it (before) does not pay for walking the bench's objects.
        gc.collect()
        gc.freeze()
        load_before = os.getloadavg()
        ways: list[Callable[[], object]] = [
            lambda: fetch(http, before_targets),
            lambda: doctor_before(before_cluster),
            lambda: run_doctor(after_cluster),
            lambda: diagnosis_alone(snapshot),
        ]
        times = [medians(t) for t in alternated_times(ways, args.rounds)]
        load_after = os.getloadavg()
    finally:
        server.kill()
        server.wait()
    (base_s, base_cpu), (before_s, before_cpu), (after_s, after_cpu), (own_s, own_cpu) = times
    print(f"load average (1 min) before / after the rounds: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print(f"median of {args.rounds} rounds; CPU is this process's (the replay server runs in its own)")
    print()
    print(f"{'':46} {'wall s':>8} {'CPU s':>8} {'requests':>9} {'vs replay':>10}")
    rows = [
        ("baseline: the replay alone (bytes, no decoding)", base_s, base_cpu, len(before_targets)),
        ("before: doctor, whole lists, lightkube, json", before_s, before_cpu, len(before_targets)),
        ("after: pages read ahead, msgspec, less, no GC", after_s, after_cpu, len(after_targets)),
        ("the diagnosis alone (after's snapshot)", own_s, own_cpu, 0),
    ]
    for label, wall, cpu, requests in rows:
        print(f"{label:46} {wall:8.3f} {cpu:8.3f} {requests:9d} {wall / base_s:9.2f}x")
    print()
    print(f"after / before: {after_s / before_s:.2f}x the time ({before_s / after_s:.1f}x faster)")
    print(f"reading and decoding on top of the replay: before {before_s - own_s - base_s:.3f} s, "
          f"after {after_s - own_s - base_s:.3f} s")  # fmt: skip
    print(f"goal < 5 s end to end: {'met' if after_s < 5.0 else 'MISSED'} ({after_s:.3f} s)")


if __name__ == "__main__":
    main()
