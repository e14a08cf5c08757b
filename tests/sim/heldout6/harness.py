"""The sixth held-out set for the doctor (issue 26, item 5): 20 cluster states from public reports that
neither tests/sim/SOURCES.md nor tests/sim/heldout .. heldout5 cite, written and given their expected answers
by someone who had not read the doctor's checks, before the doctor was run on them.

The file format, the edits, the per-DaemonSet recount and the scoring rule are those of tests/sim/heldout
and tests/sim/heldout3 (their harnesses are reused, not copied): a case is loaded with heldout3's edit
function, whose ``policy``, ``daemonset`` and ``add-pod`` edits hand everything else to heldout's.
"""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout3 import harness as third

#: The set: the third set's loader, whose edits cover every case here.
SET = base.HeldOutSet(Path(__file__).parent, third.load)
HERE, load, cases, frozen, results = SET.here, SET.load, SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
