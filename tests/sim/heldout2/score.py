"""Print the doctor's score on the second held-out set (tests/sim/heldout2) as SCORE.md's table.

Run from the repository root: ``PYTHONPATH=tests .venv/bin/python tests/sim/heldout2/score.py``; put
another checkout's ``src`` first on PYTHONPATH to score that commit's doctor with this harness.
"""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness

HERE = Path(__file__).parent

if __name__ == "__main__":
    print(harness.table([harness.score(harness.load(p)) for p in harness.cases(HERE)]))
