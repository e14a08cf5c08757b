"""The fifty-third held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout52 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's reports need no edit those sets lack (Harvester's own driver runtime, its PCI device controller and KubeVirt's
handler, a standalone DCGM exporter, the GPU Operator's kata manager and the pods and Deployments around them are
``add-daemonset`` or ``create``d objects; a precompiled driver DaemonSet is heldout3's ``rename-daemonset`` and
``daemonset``; operand states and logs are ``pod``; node capacity, labels and kubelet versions are ``node``), and one of
them (the vm-passthrough node's sandbox operands) comes from the simulator's own ``workload`` setting, so its loader is
heldout37's, the latest of them, as heldout51's is."""

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
