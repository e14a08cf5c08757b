"""The forty-seventh held-out set for the doctor (issue 26, item 5): reports from platform, chart and
infrastructure-as-code repositories (aks-engine, Charmed Kubernetes, Canonical's data-science stack) that neither
tests/sim/SOURCES.md nor heldout .. heldout45 cite (heldout46 and heldout48 were written beside it), written blind to
the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need no edit those sets lack (a GPU node with no driver and no GPU stack is stack ``none`` with no ``hostDriver``; a
workload refused by the runtime hook, its events and a plugin that cannot load NVML are ``create`` and ``pod``; a
node's capacity, labels, taints, cordon and kubelet version are ``node``), so its loader is heldout9's."""

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
