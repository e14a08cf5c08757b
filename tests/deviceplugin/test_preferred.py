"""GetPreferredAllocation: NVLink / NUMA aware for whole GPUs, packed MIG, distributed or packed replicas."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.flags import AllocationPolicy
from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.deviceplugin.preferred import PreferenceError, preferred_allocation
from gpuchain.deviceplugin.resources import Resource, map_resources
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology

PAIRS = """
node: pairs
interconnect: pcie
gpus:
  - model: A100-80GB
    count: 4
    numaNodes: [0, 0, 1, 1]
links:
  - {gpus: [0, 3], level: SYS, nvlinks: 12}
  - {gpus: [1, 2], level: SYS, nvlinks: 12}
"""


def _res(sim: SimBackend, text: str = "") -> Resource:
    return map_resources(sim.inventory(), parse_config(text))[0]


def test_nvlink_peers_win_over_numa() -> None:
    sim = SimBackend(load_yaml_model(Topology, text=PAIRS))
    res = _res(sim)
    ids = [d.id for d in res.devices]
    got = preferred_allocation(res, inventory=sim.inventory(), available=ids, must_include=[], size=2)
    assert sorted(got) == sorted([ids[0], ids[3]])


def test_must_include_comes_first_and_picks_its_peer() -> None:
    sim = SimBackend(load_yaml_model(Topology, text=PAIRS))
    res = _res(sim)
    ids = [d.id for d in res.devices]
    assert preferred_allocation(res, inventory=sim.inventory(), available=ids, must_include=[ids[1]], size=2) == [
        ids[1],
        ids[2],
    ]


def test_same_numa_node_when_links_are_equal(h100_sim: SimBackend) -> None:
    res = _res(h100_sim)
    ids = [d.id for d in res.devices]
    available = [ids[0], ids[4], ids[5], ids[2]]
    got = preferred_allocation(res, inventory=h100_sim.inventory(), available=available, must_include=[], size=2)
    assert sorted(got) in (sorted([ids[0], ids[2]]), sorted([ids[4], ids[5]]))


def test_four_of_eight_stay_on_one_numa_node(h100_sim: SimBackend) -> None:
    res = _res(h100_sim)
    got = preferred_allocation(
        res, inventory=h100_sim.inventory(), available=[d.id for d in res.devices], must_include=[], size=4
    )
    assert len({res.device(i).numa_node for i in got if res.device(i)}) == 1  # type: ignore[union-attr]


def test_mig_devices_pack_onto_one_parent(mig_sim: SimBackend) -> None:
    res = next(
        r
        for r in map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))
        if r.name.endswith("1g.10gb")
    )
    got = preferred_allocation(
        res, inventory=mig_sim.inventory(), available=[d.id for d in res.devices], must_include=[], size=5
    )
    assert len({res.device(i).gpu_uuid for i in got}) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("policy", "distinct"), [(AllocationPolicy.DISTRIBUTED, 3), (AllocationPolicy.PACKED, 1)])
def test_replica_policies(h100_sim: SimBackend, policy: AllocationPolicy, distinct: int) -> None:
    res = _res(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    ids = [d.id for d in res.devices]
    got = preferred_allocation(
        res, inventory=h100_sim.inventory(), available=ids, must_include=[], size=3, policy=policy
    )
    assert len({i.split("::")[0] for i in got}) == distinct


def test_distributed_avoids_gpus_already_in_use(h100_sim: SimBackend) -> None:
    res = _res(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}")
    ids = [d.id for d in res.devices]
    busy = {ids[0], ids[2]}
    available = [i for i in ids if i not in busy]
    got = preferred_allocation(res, inventory=h100_sim.inventory(), available=available, must_include=[], size=1)
    assert got[0].split("::")[0] not in {ids[0].split("::")[0], ids[2].split("::")[0]}


def test_packed_fills_the_busiest_gpu(h100_sim: SimBackend) -> None:
    res = _res(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    ids = [d.id for d in res.devices]
    available = [i for i in ids if i != ids[5]]
    got = preferred_allocation(
        res,
        inventory=h100_sim.inventory(),
        available=available,
        must_include=[],
        size=1,
        policy=AllocationPolicy.PACKED,
    )
    assert got[0].split("::")[0] == ids[5].split("::")[0]


@pytest.mark.parametrize(
    ("available", "must", "size", "message"),
    [
        (["GPU-x"], [], 1, "unknown device id"),
        ([0], [1], 2, "not among the available"),
        ([0, 1], [0, 1], 1, "smaller than"),
        ([0], [], 2, "only 1 are available"),
    ],
)
def test_errors(h100_sim: SimBackend, available: list[object], must: list[int], size: int, message: str) -> None:
    res = _res(h100_sim)
    ids = [d.id for d in res.devices]
    avail = [ids[a] if isinstance(a, int) else str(a) for a in available]
    with pytest.raises(PreferenceError, match=message):
        preferred_allocation(
            res, inventory=h100_sim.inventory(), available=avail, must_include=[ids[m] for m in must], size=size
        )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), replicas=st.sampled_from([1, 3]), packed=st.booleans())
def test_answer_is_a_subset_of_available_with_must_include_first(
    data: st.DataObject, replicas: int, packed: bool
) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    text = f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: {replicas}}}]}}}}" if replicas > 1 else ""
    res = _res(sim, text)
    ids = [d.id for d in res.devices]
    available = data.draw(st.lists(st.sampled_from(ids), min_size=1, unique=True))
    must = data.draw(st.lists(st.sampled_from(available), unique=True))
    size = data.draw(st.integers(min_value=max(1, len(must)), max_value=len(available)))
    policy = AllocationPolicy.PACKED if packed else AllocationPolicy.DISTRIBUTED
    got = preferred_allocation(
        res, inventory=sim.inventory(), available=available, must_include=must, size=size, policy=policy
    )
    assert len(got) == size == len(set(got))
    assert set(got) <= set(available)
    assert got[: len(must)] == must
