"""One tree's live doctor in a process of its own, run on request: `bench.doctor.live --baseline`.

Two trees' ``gpuchain`` cannot share one interpreter, so each runs in a worker started with its
``src`` first on ``PYTHONPATH`` (`bench.agents.interpreter.tree_env`). The worker imports only what
every tree since issue 26 has (``run_doctor``, ``LiveCluster.from_url``), reads one line per run
from stdin, and answers one JSON line: its own wall and CPU seconds for ``run_doctor`` (so the
pipe's time is in no figure) and the findings, for the bench to check that both trees agree.

It times ``run_doctor`` as the tree's ``gpuchain doctor`` runs it: where ``run_doctor`` takes
``keep``, the console command keeps the snapshot to the end and leaves it to the OS
(`gpuchain.common.fastexit`), never freeing it, so the worker frees it after the timer and reports
that time apart (``kept_free``, 0 for a tree whose ``run_doctor`` frees it on return, inside the
timer, as its command did).

    python -m bench.doctor.worker URL     # then "run" lines on stdin
"""

from __future__ import annotations

import inspect
import json
import sys
import time

from gpuchain.doctor import run_doctor
from gpuchain.kube import LiveCluster


def main() -> None:
    """Answer each line on stdin with one timed ``run_doctor`` on the cluster at argv[1]."""
    cluster = LiveCluster.from_url(sys.argv[1])
    keeps = "keep" in inspect.signature(run_doctor).parameters
    for _ in sys.stdin:
        kept: list[object] = []
        wall, cpu = time.perf_counter(), time.process_time()
        report = run_doctor(cluster, keep=kept.append) if keeps else run_doctor(cluster)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        freeing = time.perf_counter()
        kept.clear()
        kept_free = time.perf_counter() - freeing if keeps else 0.0
        found = sorted([g.id, sorted(g.nodes)] for g in report.groups())
        del report
        print(json.dumps({"wall": wall, "cpu": cpu, "kept_free": kept_free, "findings": found}), flush=True)


if __name__ == "__main__":
    main()
