"""The nineteenth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout18 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (an Event a node-problem monitor posts is an object ``create`` puts on the
cluster; an exporter DaemonSet of another chart is ``add-daemonset``; a DaemonSet's template or status is
``daemonset``), so its loader is heldout9's (``create`` for objects no scenario renders, the third set's edits,
then the recount)."""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout9 import harness as ninth

#: The set: heldout9's loader over this directory's cases.
SET = base.HeldOutSet(Path(__file__).parent, ninth.load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results
load = SET.load

if __name__ == "__main__":
    SET.main()
