"""The fifty-fifth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout54 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's reports need no edit those sets lack (a standalone dcgm-exporter DaemonSet and its pods on GKE are ``create``d
objects; pod states and log lines are ``pod``; a node's labels, capacity and kubelet version are ``node``; a GPU
Operator's policy is ``policy`` and its ClusterPolicy status is heldout37's ``policy-status``), so its loader is
heldout37's (heldout9's edits, ``create`` among them, and ``policy-status``)."""

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
