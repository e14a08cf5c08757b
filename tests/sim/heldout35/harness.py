"""The thirty-fifth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout34 cite (heldout36 was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (sandbox failures for a missing or broken runtime and pods waiting to be scheduled are
``pod``; a node's capacity, kubelet version, not-ready taint and cordon are ``node``; a DaemonSet's RuntimeClass is
``daemonset``; a plugin DaemonSet never deployed is ``delete-daemonset``; a second vendor's plugin is ``add-daemonset``;
a RuntimeClass and the pods a user created are ``create``), so its loader is heldout9's."""

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
