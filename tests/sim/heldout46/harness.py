"""The forty-sixth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout45 cite (heldout47 and heldout48 were written beside it), written blind to the doctor and frozen
before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a pod that asks for no GPU yet sees them all is the workload's ``visibleDevices``; a GPU
that fell off the bus or never came up at probe is the node group's ``lostGpus``; a node cordoned and tainted by a
health controller or by an administrator's drain is the ``node`` edit; a health monitor's DaemonSet, its log and the
Events it writes are ``add-daemonset``, ``pod`` and ``create``; finished Job pods are ``create``), so its loader is
heldout9's."""

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
