"""The eighth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md
nor heldout .. heldout7 cite, written blind to the doctor and frozen before it was run on them. Its harness
is heldout7's: the format, edits, recount and scoring of tests/sim/heldout and heldout3, reused."""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout3 import harness as third

#: The set: the third set's loader, whose edits cover every case here.
SET = base.HeldOutSet(Path(__file__).parent, third.load)
HERE, load, cases, frozen, results = SET.here, SET.load, SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
