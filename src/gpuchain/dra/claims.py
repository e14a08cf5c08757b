"""ResourceClaims as the simulator and tests need them: the claim, and the scheduler's allocation;
and which claims a pod and each of its containers use.

In a cluster the scheduler evaluates the claim's CEL selectors against published slices and
writes ``status.allocation``; the plugin only reads the result. The simulator has no scheduler,
so ``first_fit`` stands in for it with a Python predicate over the published devices. These are
pure functions over plain objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import API_VERSION, DEVICE_CLASS_NAME, DRIVER
from gpuchain.kube.objects import Obj

DevicePredicate = Callable[[Obj], bool]


def resource_claim(name: str, *, namespace: str, request: str = "gpu", count: int = 1, cel: str | None = None) -> Obj:
    """A ResourceClaim asking for ``count`` devices of the gpu.gpuchain.io class (optionally filtered by CEL)."""
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS_NAME, "allocationMode": "ExactCount", "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}},
    }


def allocation_status(pool: str, picks: Sequence[tuple[str, str]]) -> Obj:
    """``status`` of a claim allocated ``picks`` ((request, device) pairs) from ``pool``."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": request, "driver": DRIVER, "pool": pool, "device": device} for request, device in picks
                ]
            }
        }
    }


def attribute(device: Obj, name: str) -> Any:
    """The value of one attribute of a published device (None when absent)."""
    value = device.get("attributes", {}).get(name)
    if not value:
        return None
    return next(iter(value.values()))


def first_fit(resource_slice: Obj, *, count: int, predicate: DevicePredicate, taken: Sequence[str] = ()) -> list[str]:
    """Names of the first ``count`` published devices that satisfy ``predicate`` and are not ``taken``.

    Raises LookupError naming how many matched when there are too few, as a Pending pod would.
    """
    free = [d for d in resource_slice["spec"]["devices"] if d["name"] not in taken and predicate(d)]
    if len(free) < count:
        raise LookupError(f"only {len(free)} free devices match, {count} requested")
    return [str(d["name"]) for d in free[:count]]


def _entries(pod: Obj) -> dict[str, str]:
    """The pod's ``spec.resourceClaims`` entries -> their ResourceClaim: given by name, or generated
    from a template as ``status.resourceClaimStatuses`` names it (left out until it is made)."""
    generated = {
        s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: dict[str, str] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        claim = entry.get("resourceClaimName") or generated.get(entry.get("name"))
        if claim:
            names[str(entry.get("name"))] = str(claim)
    return names


def container_claims(pod: Obj) -> dict[str, frozenset[str]]:
    """The ResourceClaims each container of a pod (init containers included) uses, by container name:
    the ``spec.resourceClaims`` entries its ``resources.claims`` names (``_entries``), and the
    scheduler's claim for extended resources (``status.extendedResourceClaimStatus``: a plain
    ``nvidia.com/gpu`` request served by DRA) where its ``requestMappings`` name the container."""
    spec = pod.get("spec") or {}
    names = _entries(pod)
    used: dict[str, set[str]] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        refs = (container.get("resources") or {}).get("claims") or []
        used[str(container.get("name"))] = {names[r["name"]] for r in refs if r.get("name") in names}
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        for mapping in extended.get("requestMappings") or []:
            used.setdefault(str(mapping.get("containerName")), set()).add(str(extended["resourceClaimName"]))
    return {name: frozenset(claims) for name, claims in used.items()}


def pod_claims(pod: Obj) -> frozenset[str]:
    """Every ResourceClaim a pod uses, which the kubelet prepares for it: those of its containers and
    those of its ``spec.resourceClaims`` that no container names."""
    return frozenset(_entries(pod).values()).union(*container_claims(pod).values())


def allocated(claim: Obj | None, *, where: str, uid: str, node: str) -> tuple[Obj, list[dict[str, Any]]]:
    """The claim the kubelet asks to prepare (``uid``) as the API holds it, and its allocation's
    results for this driver, all from ``node``'s pool; else PrepareError saying why (``where``
    names the claim)."""
    if claim is None:
        raise PrepareError(f"{where} does not exist")
    found = claim.get("metadata", {}).get("uid")
    if found and found != uid:
        raise PrepareError(f"{where} has UID {found}, the kubelet asked for {uid} (the claim was recreated)")
    allocation = claim.get("status", {}).get("allocation")
    if not allocation:
        raise PrepareError(f"{where} is not allocated yet (status.allocation is empty)")
    results = [r for r in allocation.get("devices", {}).get("results", []) if r.get("driver") == DRIVER]
    if not results:
        raise PrepareError(f"{where} has no device of driver {DRIVER} in status.allocation.devices.results")
    for r in results:
        if r.get("pool") != node:
            raise PrepareError(
                f"{where}: device {r.get('device')!r} is allocated from pool {r.get('pool')!r}, "
                f"not this node's pool {node!r}"
            )
    return claim, results
