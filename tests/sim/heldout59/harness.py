"""The fifty-ninth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout58 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (Volcano's device plugins - HAMi's volcano-vgpu-device-plugin and volcano-sh's gpu-share
plugin - with their pods, the Volcano scheduler and the workloads it binds, the nvidia RuntimeClass and GKE's COS driver
installer are ``create``d objects; the NVIDIA plugin they replace is ``delete-daemonset``; a node's capacity, labels
and kubelet version are ``node``; pods' states, logs and Events are ``pod``), and none runs the GPU Operator, so no
ClusterPolicy status is written: its loader is heldout9's (``create`` over heldout3's edits, then the recount)."""

from __future__ import annotations

from pathlib import Path

from sim.heldout import harness as base
from sim.heldout9 import harness as ninth

#: The set: heldout9's loader (heldout3's edits and ``create``) over this directory's cases.
SET = base.HeldOutSet(Path(__file__).parent, ninth.load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results
load = SET.load

if __name__ == "__main__":
    SET.main()
