"""PodDisruptionBudget arithmetic, as the disruption controller computes it (pure).

MemoryCluster's Eviction API uses it; remediation and driver upgrades can use it to predict
whether an eviction will pass before trying.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpuchain.kube.objects import Obj, is_ready, labels_of
from gpuchain.kube.selectors import match_label_selector_object

#: Pods in these phases may always be evicted: they are not counted as healthy anyway.
PDB_EXEMPT_PHASES = frozenset({"Pending", "Succeeded", "Failed"})


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString: an int, or "N%" of ``total`` rounded up (as the API rounds both fields)."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def is_healthy(pod: Obj) -> bool:
    """Running, not being deleted, and Ready=True, as the disruption controller counts (IsPodReady).

    A pod that reports no Ready condition is not healthy: the real controller counts it out, and
    the API server then refuses to evict any pod the budget covers (checked on kube-apiserver in
    tests/kube/test_kube_contract.py).
    """
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return is_ready(pod)


def selects(pdb: Obj, pod: Obj) -> bool:
    """Does the budget's selector cover this pod (same namespace, labels match)?"""
    same_ns = pdb.get("metadata", {}).get("namespace") == pod.get("metadata", {}).get("namespace")
    selector = (pdb.get("spec") or {}).get("selector")
    return same_ns and match_label_selector_object(selector, labels_of(pod))


def disruptions_allowed(pdb: Obj, pods: Iterable[Obj]) -> int:
    """How many more covered pods may be evicted now: healthy minus the required healthy count."""
    spec = pdb.get("spec") or {}
    covered = [p for p in pods if selects(pdb, p)]
    expected = len(covered)
    healthy = sum(1 for p in covered if is_healthy(p))
    if spec.get("minAvailable") is not None:
        required = _scaled(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        required = expected - _scaled(spec["maxUnavailable"], expected)
    else:
        required = expected
    return max(0, healthy - required)


def blocking_budget(pod: Obj, *, pdbs: Iterable[Obj], pods: Iterable[Obj]) -> Obj | None:
    """The first budget that forbids evicting ``pod`` now, or None if the eviction may proceed."""
    if (pod.get("status") or {}).get("phase") in PDB_EXEMPT_PHASES:
        return None
    pod_list = list(pods)
    for pdb in pdbs:
        if selects(pdb, pod) and disruptions_allowed(pdb, pod_list) <= 0:
            return pdb
    return None
