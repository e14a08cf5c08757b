"""The twenty-eighth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout26 cite (heldout27 was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's
reports need no edit those sets lack (a pod's states, restarts, logs and Events - a plugin whose registration went
stale, sandbox failures for a missing runtime handler, crash loops of a DRA kubelet plugin - are ``pod``; a node's
capacity, labels, taints, cordon and kubelet version are ``node``; a DaemonSet's image, env, runtimeClassName and
counts are ``daemonset``; a host-service plugin is ``delete-daemonset``; NFD, GFD, NVSentinel and DRA DaemonSets are
``add-daemonset``; a pod the kubelet rejected at admission, a Deployment, a node Event and a pod waiting on a node
selector or a claim are ``create``), so its loader is heldout9's."""

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
