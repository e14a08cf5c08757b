"""The fortieth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout39 cite (heldout41 and heldout42 were written beside it), written blind to the doctor and frozen
before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a time-slicing config whose per-resource ``rename`` the plugin ignores is
``devicePluginConfigs`` with the node's capacity and the plugin's log set by ``node`` and ``pod``; a GPU held by a
native sidecar, a pending pod asking for a resource no node advertises and a finished Job's pod are ``create``; the
device-plugin validator's failed pod is heldout3's ``add-pod``; a cordoned node is ``node``), so its loader is
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
