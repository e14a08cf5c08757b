"""GetPreferredAllocation: which of the available ids the kubelet should pick.

Whole GPUs: the set with the best links between its members (NVLink lanes first, then the
closest PCIe common ancestor, then the same NUMA node), so a 4-GPU job lands on GPUs that talk
fast. MIG devices: packed onto as few parent GPUs as possible. Replicas of shared GPUs: spread
over the least used GPUs (``distributed``) or stacked onto the most used ones (``packed``).
Must-include ids always come first.

Every step is O(ids log ids) or better, as the call is on the pod start path and a shared node
announces thousands of replica ids (8 GPUs x 256). Whole GPUs are the exception by nature: the
best linked set is searched exhaustively while that is at most ``EXHAUSTIVE_LIMIT`` candidate
sets, then greedily in O(GPUs x size), over a node's handful of GPUs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuchain.api.config.v1.flags import AllocationPolicy
from gpuchain.deviceplugin.resources import AnnouncedDevice, Resource
from gpuchain.gpu.model import Inventory, TopologyLevel

EXHAUSTIVE_LIMIT = 20_000
"""Above this many candidate sets the search for whole GPUs turns greedy."""


class PreferenceError(ValueError):
    """The request cannot be satisfied from the ids offered; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class _Index:
    """What every call needs about a resource, built once per Resource instead of once per call."""

    resource: Resource
    by_id: dict[str, AnnouncedDevice]
    shared: bool
    rank: dict[str, int]
    """Unit UUID -> its position in announcement order."""
    units: dict[str, tuple[AnnouncedDevice, ...]]
    """Unit UUID -> its devices by replica number (announcement order among equals)."""
    unit_ids: dict[str, frozenset[str]]
    """Unit UUID -> its device ids: a unit's offered count is one C-level set intersection."""
    position: dict[str, int]
    """Device id -> its place in the resource."""
    pairs: dict[int, tuple[Inventory, list[list[float]]]] = field(default_factory=dict)
    """Pair scores between the resource's devices, for the inventory they were scored on."""

    def pair_scores(self, inventory: Inventory) -> list[list[float]]:
        """Every pair's link score (whole-GPU resources: a handful of devices), once per inventory."""
        found = self.pairs.get(id(inventory))
        if found is None or found[0] is not inventory:
            devices = self.resource.devices
            found = (inventory, [[_pair_score(inventory, a, b) for b in devices] for a in devices])
            self.pairs.clear()
            self.pairs[id(inventory)] = found
        return found[1]

    @classmethod
    def of(cls, resource: Resource) -> _Index:
        units: dict[str, list[AnnouncedDevice]] = {}
        for d in sorted(resource.devices, key=lambda d: d.replica or 0):
            units.setdefault(d.unit_uuid, []).append(d)
        return cls(
            resource=resource,
            by_id={d.id: d for d in resource.devices},
            shared=resource.shared,
            rank={u: i for i, u in enumerate(resource.unit_uuids)},
            units={u: tuple(ds) for u, ds in units.items()},
            unit_ids={u: frozenset(d.id for d in ds) for u, ds in units.items()},
            position={d.id: i for i, d in enumerate(resource.devices)},
        )


_INDEXES: dict[int, _Index] = {}
_INDEX_LIMIT = 16
"""Resources indexed at once: a plugin serves a handful; a reload builds new ones."""


def _index(resource: Resource) -> _Index:
    """The resource's index, cached by identity (the entry holds the resource, so ids cannot be reused)."""
    found = _INDEXES.get(id(resource))
    if found is None or found.resource is not resource:
        found = _Index.of(resource)
        if len(_INDEXES) >= _INDEX_LIMIT:
            _INDEXES.clear()
        _INDEXES[id(resource)] = found
    return found


def preferred_allocation(
    resource: Resource,
    *,
    inventory: Inventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED,
) -> list[str]:
    """``size`` ids from ``available`` (must-include ids first), best placement first."""
    index = _index(resource)
    known = index.by_id
    offered = set(available)
    if not (offered.issubset(known) and known.keys() >= set(must_include)):
        unknown = next(i for i in itertools.chain(available, must_include) if i not in known)
        raise PreferenceError(f"unknown device id {unknown!r} for {resource.name}")
    if len(offered) != len(available):
        raise PreferenceError(f"the available ids of {resource.name} repeat: each must be offered once")
    missing = [i for i in must_include if i not in offered]
    if missing:
        raise PreferenceError(f"must-include ids {missing} are not among the available ids")
    if size < len(must_include):
        raise PreferenceError(f"allocation size {size} is smaller than the {len(must_include)} must-include ids")
    if size > len(available):
        raise PreferenceError(f"asked for {size} devices of {resource.name} but only {len(available)} are available")
    chosen = list(dict.fromkeys(must_include))
    need = size - len(chosen)
    if need == 0:
        return chosen
    if index.shared:
        return chosen + _replicas(index, offered, [known[i] for i in chosen], need, policy)
    taken = set(chosen)
    pool = [known[i] for i in available if i not in taken]
    if any(d.mig_uuid for d in pool):
        return chosen + _packed_mig([known[i] for i in chosen], pool, need)
    return chosen + _best_gpus(index.pair_scores(inventory), index.position, [known[i] for i in chosen], pool, need)


def _pair_score(inventory: Inventory, a: AnnouncedDevice, b: AnnouncedDevice) -> float:
    link = inventory.link(a.gpu_index, b.gpu_index)
    score = 0.0
    if link is not None:
        score += link.nvlinks * 100 + (TopologyLevel.SYSTEM - link.level)
    if a.numa_node is not None and a.numa_node == b.numa_node:
        score += 10
    return score


def _best_gpus(
    scores: list[list[float]],
    position: dict[str, int],
    chosen: list[AnnouncedDevice],
    pool: list[AnnouncedDevice],
    need: int,
) -> list[str]:
    """The best linked set, from the resource's pair scores (looked up, never recomputed)."""
    at = [position[d.id] for d in chosen + pool]
    pair = [[scores[a][b] for b in at] for a in at]
    base = list(range(len(chosen)))
    first = len(chosen)
    if math.comb(len(pool), need) <= EXHAUSTIVE_LIMIT:

        def key(combo: tuple[int, ...]) -> tuple[float, list[int]]:
            members = base + [first + i for i in combo]
            score = sum(pair[a][b] for a, b in itertools.combinations(members, 2))
            return score, [-pool[i].gpu_index for i in combo]

        best = max(itertools.combinations(range(len(pool)), need), key=key)
        return [pool[i].id for i in best]
    # Greedy: each step takes the device best linked to everything taken so far; its score
    # grows by one pair per step instead of being summed again.
    score: list[float] = [sum(pair[first + i][c] for c in base) for i in range(len(pool))]
    left = list(range(len(pool)))  # in the offered order, which breaks ties as before
    picked: list[AnnouncedDevice] = []
    for _ in range(need):
        top = max(left, key=lambda i: (score[i], -pool[i].gpu_index))
        picked.append(pool[top])
        left.remove(top)
        for i in left:
            score[i] += pair[first + i][first + top]
    return [d.id for d in picked]


def _packed_mig(chosen: list[AnnouncedDevice], pool: list[AnnouncedDevice], need: int) -> list[str]:
    """MIG devices: parents already used first, then parents with the most free devices."""
    used_parents = {d.gpu_uuid for d in chosen}
    free = Counter(d.gpu_uuid for d in pool)
    ordered = sorted(pool, key=lambda d: (d.gpu_uuid not in used_parents, -free[d.gpu_uuid], d.gpu_index, d.id))
    return [d.id for d in ordered[:need]]


def _replicas(
    index: _Index,
    offered: set[str],
    chosen: list[AnnouncedDevice],
    need: int,
    policy: AllocationPolicy,
) -> list[str]:
    """Greedy by replicas in use per unit: fewest first (distributed) or most first (packed).

    Each pick takes the unit that ranks first by (replicas in use, unit order) and its free
    replica with the lowest number. A heap of units makes a pick O(log units); each unit's
    replicas are walked once, in order, skipping those not free.
    """
    free_in = {u: n for u, ids in index.unit_ids.items() if (n := len(offered.intersection(ids)))}
    chosen_in: Counter[str] = Counter(d.unit_uuid for d in chosen)
    used = {u: len(ds) - free_in.get(u, 0) + chosen_in[u] for u, ds in index.units.items()}
    left = {u: n - chosen_in[u] for u, n in free_in.items()}
    taken = {d.id for d in chosen}
    sign = 1 if policy is AllocationPolicy.DISTRIBUTED else -1
    heap = [(sign * used[u], index.rank[u], u) for u, n in left.items() if n > 0]
    heapq.heapify(heap)
    walked = dict.fromkeys(left, 0)
    picked: list[str] = []
    for _ in range(need):
        _, rank, unit = heapq.heappop(heap)
        devices = index.units[unit]
        at = walked[unit]
        while devices[at].id not in offered or devices[at].id in taken:
            at += 1
        picked.append(devices[at].id)
        walked[unit] = at + 1
        used[unit] += 1
        left[unit] -= 1
        if left[unit]:
            heapq.heappush(heap, (sign * used[unit], rank, unit))
    return picked
