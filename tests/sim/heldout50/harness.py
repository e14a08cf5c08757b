"""The fiftieth held-out set for the doctor: forum, Q&A and one-cluster pages that neither tests/sim/SOURCES.md nor
heldout .. heldout48 cite (heldout49 was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's clusters
need no edit those sets lack (a node's capacity, labels and kubelet version are ``node``; time-sliced replicas per node
are ``devicePluginConfigs``; workloads, Pending pods and the scheduler's and autoscaler's Events are ``workloads`` and
``create``), so its loader is heldout9's."""

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
