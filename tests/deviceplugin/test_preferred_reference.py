"""GetPreferredAllocation keeps its answers: the current implementation against the one it replaced.

``preferred_reference`` is the earlier, O(size x ids) implementation kept unchanged as the oracle
(gpuchain commit f3c8606, src/gpuchain/deviceplugin/preferred.py). For every policy, whole GPUs
(exhaustive and greedy search), MIG devices and replicas, with must-include ids, offered ids in
any order and sizes that cannot be met, both must give the same ids or the same error.
"""

from __future__ import annotations

from functools import cache

import pytest
from deviceplugin import preferred_reference as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.flags import AllocationPolicy
from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.deviceplugin.preferred import PreferenceError, preferred_allocation
from gpuchain.deviceplugin.resources import Resource, map_resources
from gpuchain.gpu.model import Inventory
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology

WIDE = """
node: wide
interconnect: pcie
gpus:
  - model: A100-80GB
    count: 20
    numaNodes: [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
links:
  - {gpus: [0, 7], level: SYS, nvlinks: 12}
  - {gpus: [3, 12], level: SYS, nvlinks: 4}
  - {gpus: [5, 6], level: PIX, nvlinks: 2}
"""
"""20 PCIe GPUs: choosing 8 or more of them is past the exhaustive limit, so the greedy search runs."""

NODES = ["h100-80gb-x8", "h100-80gb-x8-mig-mixed", "a100-40gb-x8", "l4-x2", "wide"]
CONFIGS = [
    "",
    "flags: {migStrategy: mixed}",
    "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}",
    "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 8}]}}",
    "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}",
]


@cache
def _resources(node: str, config: str) -> tuple[Inventory, tuple[Resource, ...]]:
    sim = SimBackend(load_yaml_model(Topology, text=WIDE)) if node == "wide" else SimBackend.from_preset(node)
    inventory = sim.inventory()
    try:
        return inventory, tuple(map_resources(inventory, parse_config(config)))
    except ValueError:
        return inventory, ()  # a config that does not fit this node: nothing to compare


def _answer(fn: object, resource: object, **kwargs: object) -> tuple[str, object]:
    try:
        return "ids", fn(resource, **kwargs)  # type: ignore[operator]
    except PreferenceError as exc:
        return "error", str(exc)
    except reference.PreferenceError as exc:
        return "error", str(exc)


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    node=st.sampled_from(NODES),
    config=st.sampled_from(CONFIGS),
    policy=st.sampled_from(list(AllocationPolicy)),
)
def test_same_answers_as_the_reference(data: st.DataObject, node: str, config: str, policy: AllocationPolicy) -> None:
    inventory, resources = _resources(node, config)
    if not resources:
        return
    resource = data.draw(st.sampled_from(resources))
    ids = [d.id for d in resource.devices]
    available = data.draw(st.lists(st.sampled_from(ids), unique=True).flatmap(st.permutations))
    if data.draw(st.booleans()) and available:
        must = data.draw(st.lists(st.sampled_from(available), unique=True, max_size=4))
    else:
        must = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=2))  # may be unavailable
    if data.draw(st.integers(0, 20)) == 0:
        available = [*available, "GPU-not-on-this-node"]
    size = data.draw(st.integers(min_value=0, max_value=len(available) + 1))
    kwargs = {"inventory": inventory, "available": available, "must_include": must, "size": size, "policy": policy}
    assert _answer(preferred_allocation, resource, **kwargs) == _answer(
        reference.preferred_allocation, resource, **kwargs
    )


def test_the_reference_is_exercised_on_every_path() -> None:
    """The node and config lists reach every branch: replicas, MIG, exhaustive and greedy GPUs."""
    kinds = set()
    for node in NODES:
        for config in CONFIGS:
            for resource in _resources(node, config)[1]:
                kinds.add("replicas" if resource.shared else "mig" if resource.mig_profile else "gpus")
    assert kinds == {"replicas", "mig", "gpus"}
    inventory, (gpus,) = _resources("wide", "")
    ids = [d.id for d in gpus.devices]
    assert preferred_allocation(
        gpus, inventory=inventory, available=ids, must_include=[], size=10
    ) == reference.preferred_allocation(gpus, inventory, ids, [], 10)


def test_repeated_available_ids_are_refused() -> None:
    """The kubelet offers each id once; the previous implementation could answer one id twice."""
    inventory, resources = _resources("h100-80gb-x8", CONFIGS[2])
    ids = [d.id for d in resources[0].devices]
    with pytest.raises(PreferenceError, match="repeat"):
        preferred_allocation(
            resources[0], inventory=inventory, available=[ids[0], ids[0], ids[1]], must_include=[], size=3
        )
