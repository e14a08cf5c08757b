"""The fifty-first held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout50 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's reports need no edit those sets lack (HAMi's device plugin and scheduler, Koordinator's koordlet, the pods they
run and an nvidia RuntimeClass are ``create``d objects or ``add-daemonset``; the NVIDIA plugin HAMi replaces is
``delete-daemonset``; a GPU Operator whose device plugin is off, or whose toolkit points at MicroK8s' containerd, is
``policy``; a node's capacity, labels and kubelet version are ``node``; the ClusterPolicy status of an operator whose
device plugin is off while HAMi's serves the GPU is heldout37's ``policy-status``), so its loader is heldout37's."""

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
