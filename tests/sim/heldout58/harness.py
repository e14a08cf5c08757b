"""The fifty-eighth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout56 cite (other sets were written beside it), written blind to the doctor and frozen before it was
run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: this
set's reports need no edit those sets lack (the operand pods of a node whose runtime has no ``nvidia`` handler and
their FailedCreatePodSandBox Events are ``pod``; a node's runtime, kubelet version and GPU capacity are ``node`` or the
scenario's own node facts; the ClusterPolicy status the operator of the report's release wrote is heldout37's
``policy-status``), and heldout37's loader is the newest of them that heldout51 and heldout56 reused, so this set's
loader is heldout37's, as theirs is."""

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
