"""The twenty-ninth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout28 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (a driver container the runtime cannot create, a sandbox device plugin's crash
loop and a sidecar waiting on a validation are ``pod``; a driver pod with its GDS sidecar, a KubeVirt VM's launcher
pod and its namespace are ``create``; a vGPU node's taint and labels are ``node``; a DaemonSet's tolerations, image
and scheduled count are ``daemonset``; a standalone KubeVirt device plugin is ``add-daemonset``), so its loader is
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
