"""The forty-ninth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout48 cite (heldout50 was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (an inference or media pod and its log are ``create`` and ``pod``; a GPU Operator whose
toolkit does not make nvidia containerd's default runtime is ``policy``; a node's capacity, labels and kubelet version
are ``node``; a model server kept at zero replicas is a ``create``d Deployment), so its loader is heldout9's."""

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
