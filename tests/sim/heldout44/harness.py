"""The forty-fourth held-out set for the doctor (issue 26, item 5): reports from the trackers of Kubernetes
distributions, clouds and provisioning tools that neither tests/sim/SOURCES.md nor heldout .. heldout42 cite
(heldout43 and heldout45 were written beside it), written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (an add-on's DaemonSet and its pods, their states, logs and Events are ``add-daemonset``,
``daemonset`` and ``pod``; a Deployment's plugin pod, workload pods and namespaces are ``create``; a node's capacity,
labels, taints and kubelet version are ``node``), so its loader is heldout9's."""

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
