"""The thirty-seventh held-out set for the doctor (issue 26, item 5): reports that neither tests/sim/SOURCES.md nor
heldout .. heldout36 cite (another set was written beside it), written blind to the doctor and frozen before it was run
on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's and heldout9's, reused: this set's reports
need only one edit those sets lack (validator and workload pods are ``add-pod``, ``create`` and ``pod``; an operand never
deployed is ``delete-daemonset``; a node's capacity, labels, taints and kubelet version are ``node``; a DaemonSet's
image and tolerations are ``daemonset``); the one it adds, ``policy-status``, writes the ClusterPolicy's status as the
operator of the report's release left it (``notReady``, without the conditions later releases add); the rest is heldout9's
loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.heldout import harness as base
from sim.heldout3 import harness as third
from sim.heldout9 import harness as ninth

from gpuchain.kube import MemoryCluster
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY


def _apply(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    if edit["do"] == "policy-status":
        for policy in cluster.list(NVIDIA_CLUSTER_POLICY):
            cluster.patch_status(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], status=edit["status"])
    else:
        ninth._apply(cluster, edit)


def load(path: Path) -> base.Case:
    """A held-out file of this set, built with its edits and its DaemonSets recounted."""
    case = base.load(path, apply=_apply)
    third._recount(case.cluster)
    return case


#: The set: this module's loader over heldout9's edits and ``policy-status``.
SET = base.HeldOutSet(Path(__file__).parent, load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
