"""The forty-eighth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout45 cite (heldout46 and heldout47 were written beside it), written blind to the doctor and frozen
before it was run on them. Its share is web pages in languages other than English (Chinese, Korean, German).

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's pages
need no edit those sets lack (inference pods that ask for no GPU yet see every GPU are the scenario's ``workloads``
with ``visibleDevices``; their crash loops are ``pod``; taints, labels, capacity and kubelet versions are ``node``;
a device plugin's tolerations are ``daemonset``; quotas, priority classes and hand-placed pods are ``create``; MIG
layouts and time-slicing are the node group's ``mig`` and ``devicePluginConfig``), so its loader is heldout9's."""

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
