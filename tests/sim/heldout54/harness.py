"""The fifty-fourth held-out set for the doctor (issue 26, item 5): non-English public pages that neither
tests/sim/SOURCES.md nor heldout .. heldout53 cite (heldout53 was written beside it), written blind to the doctor and
frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's pages need no edit those sets lack (a dcgm-exporter release and kube-prometheus' node-exporter, and on a KubeEdge
edge node KubeSphere's node-exporter and a Jetson exporter, are ``add-daemonset``; a node's labels and kubelet version
are ``node``), so its loader is heldout37's, the loader heldout51 reuses, which keeps ``create`` and ``policy-status``
at hand for cases added later."""

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
