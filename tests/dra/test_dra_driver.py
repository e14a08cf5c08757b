"""The plugin's decisions against an in-memory cluster: publish, health, MIG re-layout, prepare, restart."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from dra.fakeclock import QUIET, Clock
from fakes.driver_root import driver_dev

from gpuchain.dra import cdi, slices
from gpuchain.dra.checkpoint import CheckpointError
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster

DriverFactory = Callable[[SimBackend], DraDriver]
Allocate = Callable[[str, str, list[str]], ClaimRef]


def _live(cluster: MemoryCluster, node: str) -> dict[str, object]:
    return cluster.get(RESOURCE_SLICE, name=slices.slice_name(node))


def _names(obj: dict[str, object]) -> list[str]:
    return [d["name"] for d in obj["spec"]["devices"]]  # type: ignore[index]


def test_publish_creates_the_slice_once_and_is_idempotent(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster
) -> None:
    cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100-node"}})
    driver = make_driver(h100_sim)
    first = driver.publish()
    assert (first.generation, first.changed, len(first.devices)) == (1, True, 8)
    writes = cluster.calls.writes
    again = driver.publish()
    assert (again.generation, again.changed) == (1, False)
    assert cluster.calls.writes == writes
    live = _live(cluster, "h100-node")
    assert live["metadata"]["ownerReferences"][0]["uid"] == cluster.get(NODE, name="h100-node")["metadata"]["uid"]  # type: ignore[index]


def test_xid_withdraws_the_device_with_a_new_generation(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster, clock: Clock
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    assert driver.on_event(h100_sim.inject_xid(5, xid=13)) is None  # application error: nothing changes
    published = driver.on_event(h100_sim.inject_xid(5, xid=48))
    assert published is not None and published.generation == 2
    live = _live(cluster, "h100-node")
    assert "gpu-5" not in _names(live)
    assert live["spec"]["pool"]["generation"] == 2  # type: ignore[index]
    assert driver.on_event(h100_sim.recover_gpu(5)) is None  # back only after the quiet period
    clock.advance(QUIET - 0.1)
    assert driver.finish_recoveries() is None
    clock.advance(0.1)
    recovered = driver.finish_recoveries()
    assert recovered is not None and recovered.generation == 3 and "gpu-5" in recovered.devices


def test_mig_relayout_bumps_the_generation(
    mig_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster
) -> None:
    driver = make_driver(mig_sim)
    before = driver.publish()
    mig_sim.set_mig_layout(6, {"3g.40gb": 2})
    after = driver.publish()
    assert after.generation == before.generation + 1
    assert [n for n in after.devices if n.startswith("gpu-6")] == ["gpu-6-mig-3g40gb-1-0", "gpu-6-mig-3g40gb-2-0"]
    mig_sim.set_mig_layout(6, None)
    assert "gpu-6" in driver.publish().devices


def test_restarted_plugin_continues_the_generation(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster
) -> None:
    make_driver(h100_sim).publish()
    make_driver(h100_sim).on_event(h100_sim.inject_xid(0, xid=79))
    restarted = make_driver(h100_sim)  # forgot the unhealthy GPU: it is published again, one generation on
    assert restarted.publish().generation == 3


def test_claim_prepared_and_unprepared_twice(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster, allocate: Allocate, short_dir: Path
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    ref = allocate("train", "h100-node", ["gpu-2", "gpu-3"])
    first = driver.prepare(ref)
    assert [d.device for d in first.devices] == ["gpu-2", "gpu-3"]
    assert first.devices[0].cdi_ids == (f"gpu.gpuchain.io/claim={ref.uid}-gpu-2",)
    assert driver.prepare(ref) == first
    spec = json.loads(cdi.spec_path(short_dir / "cdi", ref.uid).read_text())
    assert spec["kind"] == "gpu.gpuchain.io/claim"
    uuids = f"{h100_sim.inventory().gpu(2).uuid},{h100_sim.inventory().gpu(3).uuid}"
    assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={uuids}"]
    # The driver's /dev is under its root (not the node's /dev): the runtime finds each node there.
    root = driver.config.dev_root
    assert [d["containerEdits"]["deviceNodes"] for d in spec["devices"]] == [
        [{"path": "/dev/nvidia2", "hostPath": f"{root}/dev/nvidia2"}],
        [{"path": "/dev/nvidia3", "hostPath": f"{root}/dev/nvidia3"}],
    ]
    assert driver.unprepare(ref) is True
    assert driver.unprepare(ref) is False
    assert not cdi.spec_path(short_dir / "cdi", ref.uid).exists()
    assert driver.checkpoint.get(ref.uid) is None


def test_restart_keeps_prepared_claims(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster, allocate: Allocate, short_dir: Path
) -> None:
    ref = allocate("train", "h100-node", ["gpu-1"])
    prepared = make_driver(h100_sim).prepare(ref)
    cluster.delete(
        RESOURCE_CLAIM, name=ref.name, namespace=ref.namespace
    )  # even with the claim gone from the API, the answer is remembered
    restarted = make_driver(h100_sim)
    assert restarted.prepare(ref) == prepared
    assert restarted.unprepare(ref) is True
    assert make_driver(h100_sim).checkpoint.claims() == []


def test_prepare_refuses_bad_claims_and_leaves_nothing_behind(
    h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster, allocate: Allocate, short_dir: Path
) -> None:
    driver = make_driver(h100_sim)
    with pytest.raises(PrepareError, match="does not exist"):
        driver.prepare(ClaimRef("default", "u-1", "missing"))
    ref = allocate("elsewhere", "other-node", ["gpu-0"])
    with pytest.raises(PrepareError, match="pool 'other-node'"):
        driver.prepare(ref)
    ref = allocate("ghost", "h100-node", ["gpu-9"])
    with pytest.raises(PrepareError, match="'gpu-9' is not on node h100-node"):
        driver.prepare(ref)
    driver.on_event(h100_sim.inject_xid(4, xid=48))
    ref = allocate("sick", "h100-node", ["gpu-4"])
    with pytest.raises(PrepareError, match="unhealthy"):
        driver.prepare(ref)
    stale = ClaimRef("default", "not-the-uid", "sick")
    with pytest.raises(PrepareError, match="recreated"):
        driver.prepare(stale)
    assert not (short_dir / "cdi").exists() or list((short_dir / "cdi").iterdir()) == []
    assert driver.checkpoint.claims() == []


def test_mig_claim_gets_the_parent_device_node(
    mig_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster, allocate: Allocate
) -> None:
    driver = make_driver(mig_sim)
    published = driver.publish()
    name = next(n for n in published.devices if n.startswith("gpu-4-mig-1g10gb"))
    ref = allocate("slice", "h100-mig-node", [name])
    prepared = driver.prepare(ref)
    spec = json.loads(cdi.spec_path(driver.config.cdi_dir, ref.uid).read_text())
    assert prepared.devices[0].device == name
    assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == ["/dev/nvidia4"]
    assert spec["containerEdits"]["env"][0].startswith("NVIDIA_VISIBLE_DEVICES=MIG-")


def test_corrupt_checkpoint_is_named(h100_sim: SimBackend, make_driver: DriverFactory, short_dir: Path) -> None:
    (short_dir / "state").mkdir()
    (short_dir / "state" / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="checkpoint.json: unreadable checkpoint"):
        make_driver(h100_sim)


def test_lost_gpu_is_withdrawn_once_and_returns_after_recovery(
    h100_sim: SimBackend, make_driver: DriverFactory, clock: Clock
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    generations = [p.generation for e in h100_sim.lose_gpu(3) if (p := driver.on_event(e)) is not None]
    assert generations == [2]  # XID 79 withdraws it; the GPU_LOST that follows changes nothing more
    assert "gpu-3" not in driver.publish().devices
    assert driver.on_event(h100_sim.recover_gpu(3)) is None
    clock.advance(QUIET)
    back = driver.finish_recoveries()
    assert back is not None and back.generation == 3 and "gpu-3" in back.devices


def test_prepare_after_a_reboot_rewrites_the_lost_cdi_spec(
    h100_sim: SimBackend, make_driver: DriverFactory, allocate: Allocate, short_dir: Path
) -> None:
    ref = allocate("train", "h100-node", ["gpu-2"])
    prepared = make_driver(h100_sim).prepare(ref)
    path = cdi.spec_path(short_dir / "cdi", ref.uid)
    before = path.read_text()
    shutil.rmtree(short_dir / "cdi")  # /var/run is a tmpfs: a reboot empties it, the checkpoint stays
    assert make_driver(h100_sim).prepare(ref) == prepared
    assert path.read_text() == before


def test_broken_event_stream_withdraws_every_gpu_until_a_new_subscription_stays_up(
    h100_sim: SimBackend, make_driver: DriverFactory, clock: Clock
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    driver.on_event(h100_sim.inject_xid(2, xid=48))
    failed = driver.stream_failed()
    assert failed is not None and failed.devices == ()
    assert driver.stream_subscribed() is None  # not vouched for before the quiet period
    clock.advance(QUIET - 0.1)
    assert driver.finish_recoveries() is None
    clock.advance(0.1)
    back = driver.finish_recoveries()
    assert back is not None and len(back.devices) == 7 and "gpu-2" not in back.devices  # the real fault stays


def test_cdi_spec_has_modeset_only_where_the_driver_created_it(
    h100_sim: SimBackend, make_driver: DriverFactory, allocate: Allocate, short_dir: Path
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    root = driver.config.dev_root
    always = [
        {"path": p, "hostPath": f"{root}{p}"} for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    ]
    without = allocate("a", "h100-node", ["gpu-0"])
    driver.prepare(without)
    assert (
        json.loads(cdi.spec_path(short_dir / "cdi", without.uid).read_text())["containerEdits"]["deviceNodes"] == always
    )
    driver_dev(driver.config.dev_root, "/dev/nvidia-modeset")
    with_modeset = allocate("b", "h100-node", ["gpu-1"])
    driver.prepare(with_modeset)
    spec = json.loads(cdi.spec_path(short_dir / "cdi", with_modeset.uid).read_text())
    assert spec["containerEdits"]["deviceNodes"] == [
        *always,
        {"path": "/dev/nvidia-modeset", "hostPath": f"{root}/dev/nvidia-modeset"},
    ]


def test_a_spec_left_by_a_crash_before_the_checkpoint_is_removed_at_start(
    h100_sim: SimBackend, make_driver: DriverFactory, allocate: Allocate, short_dir: Path
) -> None:
    """A crash between writing a claim's spec and recording the claim leaves a spec the kubelet will
    never unprepare (it got no success): the next start removes it and keeps the recorded ones."""
    kept = allocate("train", "h100-node", ["gpu-1"])
    make_driver(h100_sim).prepare(kept)
    orphan = cdi.spec_path(short_dir / "cdi", "0000-orphan")
    orphan.write_text(cdi.spec_path(short_dir / "cdi", kept.uid).read_text())
    unrelated = short_dir / "cdi" / "vendor-other.json"
    unrelated.write_text("{}")
    make_driver(h100_sim)
    assert not orphan.exists()
    assert cdi.spec_path(short_dir / "cdi", kept.uid).exists() and unrelated.exists()
