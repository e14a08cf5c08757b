"""The sixtieth held-out set for the doctor (issue 26, item 5): NVIDIA's own documentation beyond its troubleshooting
pages (the GPU Operator's installation pages, the Container Toolkit's install and CDI pages) that neither
tests/sim/SOURCES.md nor heldout .. heldout59 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's pages need no edit those sets lack (the device plugin's and workloads' states, logs and Events are ``pod``; a
sample pod no controller owns is ``create``d; a node whose plugin registered nothing is ``node``; an operator whose
driver component is off is the scenario's ``policy``), so its loader is heldout37's, the one heldout51 and heldout57
reuse (heldout9's ``create`` with the recount after the edits)."""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout37 import harness as thirty_seventh

#: The set: heldout37's loader (heldout9's edits and ``policy-status``) over this directory's cases.
SET = base.HeldOutSet(Path(__file__).parent, thirty_seventh.load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results
load = SET.load

if __name__ == "__main__":
    SET.main()
