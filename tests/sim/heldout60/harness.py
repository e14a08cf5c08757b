"""The fifty-seventh held-out set for the doctor (issue 26, item 5): vendors' troubleshooting pages and READMEs that
neither tests/sim/SOURCES.md nor heldout .. heldout56 cite, written blind to the doctor and frozen before it was run on
them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's pages need no edit those sets lack (operand, validator and workload pods' states, logs and Events are ``pod``;
pods no DaemonSet or simulated workload owns - a Pending job, a Failed pod refused at admission - are ``create``d; GPUs
the kubelet counts as unhealthy, a node whose driver never came up and its labels are ``node``; a vGPU guest driver,
a time-slicing config or a legacy-mode toolkit is the scenario's ``policy``), so its loader is heldout37's, the one
heldout51 reuses (heldout9's ``create`` with the recount after the edits)."""

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
