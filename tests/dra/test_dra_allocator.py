"""The DRA driver publishes a node's GPUs only while its Node gives them to DRA (``kube.allocator``):
the label ``gpuchain.io/gpu.allocator=dra`` and no device plugin GPUs in the Node's capacity."""

from __future__ import annotations

from pathlib import Path

import pytest
from dra.conftest import NODE, Allocate

from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.dra.slices import slice_name
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import (
    ALLOCATOR_LABEL,
    DEVICE_PLUGIN,
    DRA,
    allocator_of,
    device_plugin_announces,
    dra_may_publish,
)
from gpuchain.kube.kinds import NODE as NODE_KIND
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj


def node(labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": labels or {}},
        "status": {"capacity": capacity or {}},
    }


def test_only_the_dra_value_hands_the_gpus_to_dra() -> None:
    assert allocator_of(node({ALLOCATOR_LABEL: "dra"})) == DRA
    assert allocator_of(node({ALLOCATOR_LABEL: "device-plugin"})) == DEVICE_PLUGIN
    assert allocator_of(node({ALLOCATOR_LABEL: "DRA "})) == DEVICE_PLUGIN  # a typo never gives them to both
    assert allocator_of(node({ALLOCATOR_LABEL: "device-plugin"}), unlabelled=DRA) == DEVICE_PLUGIN
    assert allocator_of(node(), unlabelled=DRA) == DRA
    assert allocator_of(node()) == DEVICE_PLUGIN
    assert allocator_of(None) == DEVICE_PLUGIN


def test_dra_waits_while_a_device_plugin_announces_gpus() -> None:
    busy = node({ALLOCATOR_LABEL: "dra"}, {"nvidia.com/gpu": "8", "cpu": "64", "nvidia.com/mig-1g.10gb": "0"})
    assert device_plugin_announces(busy) == {"nvidia.com/gpu": 8}
    why = dra_may_publish(busy)
    assert why is not None and "nvidia.com/gpu=8" in why
    assert dra_may_publish(node({ALLOCATOR_LABEL: "dra"}, {"nvidia.com/gpu": "0"})) is None
    all_unhealthy = node({ALLOCATOR_LABEL: "dra"}, {"nvidia.com/gpu": "8"})
    all_unhealthy["status"]["allocatable"] = {"nvidia.com/gpu": "0"}  # the plugin holds them until they recover
    assert dra_may_publish(all_unhealthy) is not None
    unlabelled = dra_may_publish(node())
    assert unlabelled is not None and f"{ALLOCATOR_LABEL}=dra" in unlabelled  # says the fix


@pytest.fixture
def strict(h100_sim: SimBackend, cluster: MemoryCluster, short_dir: Path) -> DraDriver:
    """A driver as the chart runs it beside a device plugin: unlabelled nodes are the device plugin's."""
    root = short_dir
    config = DriverConfig(node=NODE, cdi_dir=root / "cdi", state_dir=root / "state", dev_root=root / "dev")
    return DraDriver(h100_sim, cluster=cluster, config=config)


def published(cluster: MemoryCluster) -> int:
    return len(cluster.get(RESOURCE_SLICE, name=slice_name(NODE))["spec"]["devices"])


def test_an_unlabelled_node_is_the_device_plugins(strict: DraDriver, cluster: MemoryCluster) -> None:
    cluster.create(node())
    assert strict.publish().devices == ()
    assert strict.withheld is not None and ALLOCATOR_LABEL in strict.withheld


def test_the_label_hands_the_node_over_and_back(strict: DraDriver, cluster: MemoryCluster) -> None:
    cluster.create(node({ALLOCATOR_LABEL: "device-plugin"}, {"nvidia.com/gpu": "8"}))
    assert strict.publish().devices == ()
    labelled = cluster.patch(NODE_KIND, name=NODE, patch={"metadata": {"labels": {ALLOCATOR_LABEL: "dra"}}})
    assert strict.node_changed(labelled) is None  # the device plugin has not let go yet
    assert published(cluster) == 0
    released = cluster.patch_status(NODE_KIND, name=NODE, status={"capacity": {"nvidia.com/gpu": "0"}})
    after = strict.node_changed(released)
    assert after is not None and len(after.devices) == 8 and published(cluster) == 8
    back = cluster.patch(NODE_KIND, name=NODE, patch={"metadata": {"labels": {ALLOCATOR_LABEL: "device-plugin"}}})
    assert strict.node_changed(back) is not None and published(cluster) == 0


def test_no_claim_is_prepared_on_gpus_that_are_not_dras(
    strict: DraDriver, cluster: MemoryCluster, allocate: Allocate
) -> None:
    cluster.create(node({ALLOCATOR_LABEL: "dra"}))
    assert len(strict.publish().devices) == 8
    cluster.patch(NODE_KIND, name=NODE, patch={"metadata": {"labels": {ALLOCATOR_LABEL: "device-plugin"}}})
    strict.node_changed(cluster.get(NODE_KIND, name=NODE))
    ref = allocate("late", NODE, ["gpu-0"])  # allocated from the slice before it was withdrawn
    with pytest.raises(PrepareError, match="belong to the device plugin"):
        strict.prepare(ref)
