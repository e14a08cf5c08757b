"""The forty-first held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout39 cite (heldout40 and heldout42 were written beside it), written blind to the doctor and frozen
before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a workload pod, KAI's reservation pod, a ConfigMap and their logs and Events are
``create`` and ``pod``; the GPU Operator's CDI mode is a ``policy`` patch; GKE's GPU-node taint, capacity, labels and
kubelet version are ``node``), so its loader is heldout9's."""

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
