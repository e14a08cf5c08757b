"""The fifth held-out set for the doctor (issue 26, item 5): 20 cluster states from public reports that
neither tests/sim/SOURCES.md nor tests/sim/heldout, heldout2, heldout3 or heldout4 cite, written and given
their expected answers by someone who had not read the doctor's checks, before the doctor was run on them.

The file format, the edits, the per-DaemonSet recount and the scoring rule are those of tests/sim/heldout
and tests/sim/heldout3 (their harnesses are reused, not copied): a case is loaded with heldout3's edit
function, whose ``policy``, ``daemonset`` and ``add-pod`` edits hand everything else to heldout's.
"""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout3 import harness as third

HERE = Path(__file__).parent


def load(path: Path) -> base.Case:
    """A held-out file of this set, built with its edits (the third set's, which cover every edit here)."""
    case = base.load(path, apply=third._apply)
    third._recount(case.cluster)
    return case


def cases() -> list[Path]:
    return base.cases(HERE)


def frozen() -> dict[str, str]:
    return base.frozen(HERE)


def results() -> list[base.Result]:
    """Every case of this set, loaded and scored against its frozen expectation."""
    return [base.score(load(p)) for p in cases()]


if __name__ == "__main__":
    print(base.table(results()))
