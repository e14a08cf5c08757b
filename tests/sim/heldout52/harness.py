"""The fifty-second held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout51 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's pages need no edit those sets lack (a device plugin DaemonSet as its own manifest or Helm chart renders it, its
pods, a RuntimeClass, the namespace and config map a chart creates and the workload pods the pages run are ``create``d
objects after ``delete-daemonset`` removes the simulator's plugin; another release's DaemonSet, such as AWS's EFA
plugin, is ``add-daemonset``; a node's capacity, labels and kubelet version are ``node``; pod states, logs and Events
are ``pod``), so its loader is heldout37's, the latest loader, which hands every edit it does not add to heldout9's
and through it to heldout3's and heldout's."""

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
