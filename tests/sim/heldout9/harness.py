"""The ninth held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout8 cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's and heldout3's, reused; this set adds one
edit its reports need: ``create`` puts an object onto the cluster as the report shows it (a DRA driver's
ResourceSlice, which no scenario renders, or a device plugin pod on a node the stack's DaemonSet would
not place one on), then the usual recount runs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim.heldout import harness as base
from sim.heldout3 import harness as third

import gpuchain.dra.kinds  # noqa: F401  (registers resource.k8s.io/v1 ResourceSlice with the kube port)
from gpuchain.kube import MemoryCluster


def _apply(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    if edit["do"] == "create":
        cluster.create(copy.deepcopy(edit["object"]))
    else:
        third._apply(cluster, edit)


def load(path: Path) -> base.Case:
    """A held-out file of this set, built with its edits and its DaemonSets recounted."""
    case = base.load(path, apply=_apply)
    third._recount(case.cluster)
    return case


#: The set: this module's loader over the third set's edits.
SET = base.HeldOutSet(Path(__file__).parent, load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
