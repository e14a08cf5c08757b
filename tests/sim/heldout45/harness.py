"""The forty-fifth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout42 cite (heldout43 and heldout44 were written beside it), written blind to the doctor and frozen
before it was run on them. Its share is NVIDIA's own pull requests that fix a cluster state users hit, and public
descriptions of working clusters.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a host whose containerd never loaded the nvidia runtime is the node group's
``runtimeConfigured: false``; a second Helm release of the device plugin on one node is ``rename-daemonset`` with
``nodes``; a statically deployed exporter is ``add-daemonset``; failing workloads, sandbox errors and quota refusals
are ``create`` and ``pod`` with their Events), so its loader is heldout9's."""

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
