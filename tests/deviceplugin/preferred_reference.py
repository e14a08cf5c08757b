"""GetPreferredAllocation: which of the available ids the kubelet should pick.

Whole GPUs: the set with the best links between its members (NVLink lanes first, then the
closest PCIe common ancestor, then the same NUMA node), so a 4-GPU job lands on GPUs that talk
fast. MIG devices: packed onto as few parent GPUs as possible. Replicas of shared GPUs: spread
over the least used GPUs (``distributed``) or stacked onto the most used ones (``packed``).
Must-include ids always come first.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

from gpuchain.api.config.v1.flags import AllocationPolicy
from gpuchain.deviceplugin.resources import AnnouncedDevice, Resource
from gpuchain.gpu.model import Inventory, TopologyLevel

EXHAUSTIVE_LIMIT = 20_000
"""Above this many candidate sets the search for whole GPUs turns greedy."""


class PreferenceError(ValueError):
    """The request cannot be satisfied from the ids offered; the message says which and why."""


def preferred_allocation(
    resource: Resource,
    inventory: Inventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED,
) -> list[str]:
    """``size`` ids from ``available`` (must-include ids first), best placement first."""
    known = {d.id: d for d in resource.devices}
    for device_id in [*available, *must_include]:
        if device_id not in known:
            raise PreferenceError(f"unknown device id {device_id!r} for {resource.name}")
    missing = [i for i in must_include if i not in available]
    if missing:
        raise PreferenceError(f"must-include ids {missing} are not among the available ids")
    if size < len(must_include):
        raise PreferenceError(f"allocation size {size} is smaller than the {len(must_include)} must-include ids")
    if size > len(available):
        raise PreferenceError(f"asked for {size} devices of {resource.name} but only {len(available)} are available")
    chosen = list(dict.fromkeys(must_include))
    pool = [known[i] for i in available if i not in chosen]
    need = size - len(chosen)
    if need == 0:
        return chosen
    if resource.shared:
        return chosen + _replicas(resource, available, [known[i] for i in chosen], pool, need, policy)
    if any(d.mig_uuid for d in pool):
        return chosen + _packed_mig([known[i] for i in chosen], pool, need)
    return chosen + _best_gpus(inventory, [known[i] for i in chosen], pool, need)


def _pair_score(inventory: Inventory, a: AnnouncedDevice, b: AnnouncedDevice) -> float:
    link = inventory.link(a.gpu_index, b.gpu_index)
    score = 0.0
    if link is not None:
        score += link.nvlinks * 100 + (TopologyLevel.SYSTEM - link.level)
    if a.numa_node is not None and a.numa_node == b.numa_node:
        score += 10
    return score


def _set_score(inventory: Inventory, devices: Sequence[AnnouncedDevice]) -> float:
    return sum(_pair_score(inventory, a, b) for a, b in itertools.combinations(devices, 2))


def _best_gpus(
    inventory: Inventory, chosen: list[AnnouncedDevice], pool: list[AnnouncedDevice], need: int
) -> list[str]:
    if math.comb(len(pool), need) <= EXHAUSTIVE_LIMIT:
        best = max(
            itertools.combinations(pool, need),
            key=lambda combo: (_set_score(inventory, chosen + list(combo)), [-d.gpu_index for d in combo]),
        )
        return [d.id for d in best]
    picked: list[AnnouncedDevice] = []
    remaining = list(pool)
    for _ in range(need):
        nxt = max(remaining, key=lambda d: (sum(_pair_score(inventory, d, o) for o in chosen + picked), -d.gpu_index))
        picked.append(nxt)
        remaining.remove(nxt)
    return [d.id for d in picked]


def _packed_mig(chosen: list[AnnouncedDevice], pool: list[AnnouncedDevice], need: int) -> list[str]:
    """MIG devices: parents already used first, then parents with the most free devices."""
    used_parents = {d.gpu_uuid for d in chosen}
    free = Counter(d.gpu_uuid for d in pool)
    ordered = sorted(pool, key=lambda d: (d.gpu_uuid not in used_parents, -free[d.gpu_uuid], d.gpu_index, d.id))
    return [d.id for d in ordered[:need]]


def _replicas(
    resource: Resource,
    available: Sequence[str],
    chosen: list[AnnouncedDevice],
    pool: list[AnnouncedDevice],
    need: int,
    policy: AllocationPolicy,
) -> list[str]:
    """Greedy by replicas in use per unit: fewest first (distributed) or most first (packed)."""
    free = set(available)
    used = Counter(d.unit_uuid for d in resource.devices if d.id not in free)
    for d in chosen:
        used[d.unit_uuid] += 1
    order = {u: i for i, u in enumerate(resource.unit_uuids)}
    remaining = list(pool)
    picked: list[str] = []
    sign = 1 if policy is AllocationPolicy.DISTRIBUTED else -1
    for _ in range(need):
        nxt = min(remaining, key=lambda d: (sign * used[d.unit_uuid], order[d.unit_uuid], d.replica or 0))
        picked.append(nxt.id)
        used[nxt.unit_uuid] += 1
        remaining.remove(nxt)
    return picked
