"""The sixty-first held-out set for the doctor (issue 26, item 5): the clouds' and distributions' documentation of GPUs
on Kubernetes (AKS' GPU pages, RKE2's GPU Operator page) that neither tests/sim/SOURCES.md nor heldout .. heldout60
cite, written blind to the doctor and frozen before it was run on them.

The format, edits, recount and scoring are tests/sim/heldout's, heldout3's, heldout9's and heldout37's, reused: the
pages need operand and workload pods (``pod``, ``create``), a device plugin DaemonSet AKS runs as a systemd service
instead, or one limited to some node pools (``delete-daemonset``, ``add-daemonset``), and a node's capacity, labels and
kubelet version (``node``), all of which heldout37's loader (the one heldout51 reuses) has. The one thing it lacks is
a node condition other than Ready: AKS' Node Problem Detector publishes its GPU health checks (GPUMissing,
UnhealthyNvidiaDevicePlugin, UnhealthyNvidiaDCGMServices) as node conditions, so this set adds one edit,
``node-conditions``, which writes the given conditions into the node's status (replacing one of the same type) the way
NPD's condition updates land; everything else is heldout37's loader."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim.heldout import harness as base
from sim.heldout3 import harness as third
from sim.heldout37 import harness as thirty_seventh

from gpuchain.kube import NODE, MemoryCluster


def _apply(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    if edit["do"] == "node-conditions":
        node = cluster.get(NODE, name=edit["node"])
        conditions = copy.deepcopy((node.get("status") or {}).get("conditions") or [])
        for cond in edit["conditions"]:
            conditions = [c for c in conditions if c.get("type") != cond["type"]] + [dict(cond)]
        cluster.patch_status(NODE, name=edit["node"], status={"conditions": conditions})
    else:
        thirty_seventh._apply(cluster, edit)


def load(path: Path) -> base.Case:
    """A held-out file of this set, built with its edits and its DaemonSets recounted."""
    case = base.load(path, apply=_apply)
    third._recount(case.cluster)
    return case


#: The set: heldout37's loader (heldout9's edits and ``policy-status``) plus ``node-conditions``, over this directory.
SET = base.HeldOutSet(Path(__file__).parent, load)
HERE, cases, frozen, results = SET.here, SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
