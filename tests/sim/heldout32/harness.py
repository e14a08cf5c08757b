"""The thirty-second held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout31 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (a pod's states, restarts, logs and Events - crash loops on NVML, sandbox
failures for a missing runtime handler, an init container waiting on the driver root - are ``pod``; a node's
capacity, labels, architecture and kubelet version are ``node``; a DaemonSet's image, env and runtimeClassName are
``daemonset``; a host-service or never-deployed plugin is ``delete-daemonset``; the DRA driver's kubelet plugin is
``add-daemonset``; a claim-using pod is ``create``), so its loader is heldout9's."""

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
