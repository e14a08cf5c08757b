"""Smoke test of ``bench.doctor.live --baseline``: a two-node cluster replayed over HTTP, a baseline tree's
doctor (here this tree's own ``src``) and this tree's, each in a worker process of its own, alternated with
the replay alone and the diagnosis alone; every row is printed and both trees find the same. No timing is
asserted: the figures are the bench's to report (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROWS = ("baseline: the replay alone", "before: ", "after: this tree's doctor", "the diagnosis alone")


def test_both_trees_doctors_run_in_their_workers_and_find_the_same() -> None:
    bench = [sys.executable, "-m", "bench.doctor.live", "--nodes", "2", "--rounds", "1"]
    done = subprocess.run(
        [*bench, "--baseline", str(REPO / "src")], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "same findings in both trees: yes" in lines
    assert all(any(line.startswith(row) for line in lines) for row in ROWS), done.stdout
