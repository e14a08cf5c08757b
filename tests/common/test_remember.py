"""`remembered` answers each object once inside `answers_remembered`, and works every answer out outside it."""

from __future__ import annotations

from typing import Any

from gpuchain.common.remember import answers_remembered, remembered
from gpuchain.kube.gpu_resources import node_gpu_resources

calls: list[str] = []


@remembered
def _capacity_of(node: dict[str, Any]) -> int:
    calls.append(node["name"])
    return int(node["gpus"])


def test_answers_are_by_object_once_in_the_block_and_fresh_outside_it() -> None:
    calls.clear()
    node, twin = {"name": "a", "gpus": 8}, {"name": "b", "gpus": 8}
    with answers_remembered():
        assert [_capacity_of(node), _capacity_of(node), _capacity_of(twin)] == [8, 8, 8]
        node["gpus"] = 4  # a snapshot's objects do not change while it is read: the first answer holds
        assert _capacity_of(node) == 8
        with answers_remembered():  # nested: the outer block's answers hold
            assert _capacity_of(node) == 8
    assert calls == ["a", "b"]
    assert _capacity_of(node) == 4 and _capacity_of(node) == 4
    assert calls == ["a", "b", "a", "a"]
    with answers_remembered():  # a new block remembers nothing of the last one
        assert _capacity_of(node) == 4
    assert calls == ["a", "b", "a", "a", "a"]


def test_a_remembered_dict_is_copied_for_each_caller() -> None:
    node = {"status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}}
    with answers_remembered():
        first = node_gpu_resources(node)
        first["nvidia.com/gpu"] = 0  # a caller that changes its answer changes no other caller's
        assert node_gpu_resources(node) == {"nvidia.com/gpu": 8}
        assert node_gpu_resources(node, "allocatable") == {"nvidia.com/gpu": 7}
