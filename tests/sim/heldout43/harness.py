"""The forty-third held-out set for the doctor (issue 26, item 5): reports from the trackers of ML platforms and
serving stacks that run GPU workloads on Kubernetes, that neither tests/sim/SOURCES.md nor heldout .. heldout42 cite
(heldout44 and heldout45 were written beside it), written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a serving pod whose RuntimeClass handler the node's CRI rejects, a pipeline step no node
can take, a suspended Job and a LeaderWorkerSet group are ``create`` objects and ``pod`` states; a node's driver
version, capacity, labels, taints and kubelet version are the node group's fields and ``node``), so its loader is
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
