"""The thirtieth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout28 cite (heldout29 was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (a pod's states, restarts, logs and Events - a vGPU plugin that finds no NVML, a
workload admitted before its plugin re-registered, operands that runc will not start - are ``pod``; a node's
capacity, labels, node image and kubelet version are ``node``; a DaemonSet's image, runtimeClassName, affinity and
counts are ``daemonset``; HAMi's plugin is the plugin DaemonSet renamed (``rename-daemonset``); a host-service plugin
is ``delete-daemonset``; a plugin pod placed on one node only is ``create``), so its loader is heldout9's."""

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
