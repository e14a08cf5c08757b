"""The thirty-third held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout32 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (operands waiting in their validation init containers, sandbox failures for a
runtime handler containerd never loaded and workloads losing NVML are ``pod``; a ClusterPolicy host path is
``policy``; node capacity, labels and kubelet versions are ``node``; a plugin moved to its chart's namespace is
``rename-daemonset`` and ``daemonset``; a DCGM exporter chart is ``add-daemonset``; running GPU pods are ``create``),
so its loader is heldout9's."""

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
