"""The third held-out set for the doctor (issue 26, item 5): 20+ cluster states from public reports that
neither tests/sim/SOURCES.md nor tests/sim/heldout or tests/sim/heldout2 cite, written and given their expected answers by
someone who had not read the doctor's checks, before the doctor was run on them.

The file format, the edits and the scoring rule are tests/sim/heldout's (its harness is reused, not
copied); this module only adds the edits those reports need and the first set did not:

- ``policy``: merge ``spec`` into NVIDIA's ClusterPolicy as the report shows it (keys the simulator's
  policy schema refuses, e.g. ``driver.rdma``, or env lists of operands), and render the operand DaemonSets'
  templates from the merged policy again, as NVIDIA's operator reconciles them (`gpuchain.sim.nvidia_operands`), so
  a dump without the policy shows the edit where a real cluster's DaemonSets would;
- ``daemonset``: merge ``spec`` / ``status`` into a DaemonSet (an affinity a chart ships, counts the
  controller reports) and, with ``dropPods``, remove its pods: a DaemonSet that places none;
- ``add-pod``: a pod no DaemonSet owns (the CUDA validator pod the validator starts), running on
  ``node`` with the named ``init`` and ``containers``; a later ``pod`` edit (``daemonset:`` its name's
  prefix) gives them the reported states.

After the edits every DaemonSet's ready counts are recounted from its pods, as its controller would.

Scoring (``score``/``table`` of tests/sim/heldout): a fault case is right when every expected node has an
error finding (root, or cluster-wide) on the expected link and no root error finding on another link; the
fix is right when each such finding's fix op is one of ``ops`` (if given) and its text or action matches
one of ``match`` (regexes, case-insensitive), frozen with the expectation. A healthy case is right when
the doctor reports no error finding at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.heldout import harness as base

from gpuchain.doctor.stacks.gpu_operator import DAEMONSETS, DRIVER_PREFIX, PRECOMPILED_PREFIX
from gpuchain.kube import DAEMONSET, POD, MemoryCluster
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.nvidia_operands import nvidia_rendered

HERE = Path(__file__).parent


def _apply(cluster: MemoryCluster, edit: dict[str, Any]) -> None:
    what = edit["do"]
    if what == "policy":
        for policy in cluster.list(NVIDIA_CLUSTER_POLICY):
            cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch={"spec": edit["spec"]})
            _reconcile(cluster, cluster.get(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"])["spec"])
    elif what == "daemonset":
        ns, name = edit["namespace"], edit["name"]
        if "spec" in edit:
            cluster.patch(DAEMONSET, name=name, patch={"spec": edit["spec"]}, namespace=ns)
        if edit.get("dropPods"):
            for pod in base._pods(cluster, name, None, ns):
                cluster.delete(POD, name=pod["metadata"]["name"], namespace=ns)
        if "status" in edit:
            cluster.patch_status(DAEMONSET, name=name, status=edit["status"], namespace=ns)
    elif what == "add-pod":
        cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": edit["name"], "namespace": edit["namespace"], "labels": edit.get("labels", {})},
                "spec": {
                    "nodeName": edit["node"],
                    "initContainers": [{"name": c, "image": edit.get("image", "")} for c in edit.get("init", [])],
                    "containers": [{"name": c, "image": edit.get("image", "")} for c in edit["containers"]],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "initContainerStatuses": [
                        {"name": c, "ready": True, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}
                        for c in edit.get("init", [])
                    ],
                    "containerStatuses": [
                        {"name": c, "ready": True, "restartCount": 0, "state": {"running": {}}}
                        for c in edit["containers"]
                    ],
                },
            }
        )
    else:
        base._apply(cluster, edit)


#: NVIDIA's operand DaemonSet name -> its state (the driver's precompiled and NVIDIADriver sets by their prefixes).
_STATES = {name: state for state, name in DAEMONSETS.items()}


def _reconcile(cluster: MemoryCluster, spec: dict[str, Any]) -> None:
    """Each NVIDIA operand DaemonSet's template rendered from the ClusterPolicy ``spec`` again; its pods stay as the
    edits made them (the case's reported states), and its controller has observed the new template."""
    for ds in cluster.list(DAEMONSET):
        name = str(ds["metadata"]["name"])
        state = _STATES.get(name) or ("driver" if name.startswith((PRECOMPILED_PREFIX, DRIVER_PREFIX)) else None)
        if state is None:
            continue
        rendered = nvidia_rendered(ds, state=state, spec=spec)
        if rendered["spec"]["template"] == ds["spec"]["template"]:
            continue
        ns = ds["metadata"]["namespace"]
        cluster.patch(DAEMONSET, name=name, patch={"spec": {"template": rendered["spec"]["template"]}}, namespace=ns)
        generation = cluster.get(DAEMONSET, name=name, namespace=ns)["metadata"].get("generation")
        if generation is not None:
            cluster.patch_status(DAEMONSET, name=name, status={"observedGeneration": generation}, namespace=ns)


def _recount(cluster: MemoryCluster) -> None:
    """Each DaemonSet's ready and available counts as its controller reports them once the edits have
    changed its pods' states (a dump shows READY 0/1 for a crash-looping operand, not the built 1/1)."""
    for ds in cluster.list(DAEMONSET):
        ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        pods = [
            p
            for p in cluster.list(POD, namespace=ns)
            if name in [o.get("name") for o in p["metadata"].get("ownerReferences") or []]
        ]
        desired = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        ready = sum(1 for p in pods if p["spec"].get("nodeName") and base._ready(p))
        status = {"numberReady": ready, "numberAvailable": ready, "numberUnavailable": max(desired - ready, 0)}
        cluster.patch_status(DAEMONSET, name=name, status=status, namespace=ns)


def load(path: Path) -> base.Case:
    """A held-out file of this set, built with its edits."""
    case = base.load(path, apply=_apply)
    _recount(case.cluster)
    return case


SET = base.HeldOutSet(HERE, load)
cases, frozen, results = SET.cases, SET.frozen, SET.results

if __name__ == "__main__":
    SET.main()
