"""MPS control daemons for GPU shares (``dra.mps``): with ``--mps-root`` the DRA plugin runs one per
GPU while shares of part of it are prepared, so the limits Prepare writes hold.

The control program and nvidia-smi are the recording stand-ins of ``fakes.mps`` (the device
plugin's MPS tests use the same). Prepare and Unprepare run on worker threads, as the gRPC service
runs them (``dra.server``), while the daemons are kept on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from dra.build import build_driver, shared_claim
from dra.conftest import NODE
from dra.fakeclock import Clock
from fakes.mps import daemon_pid, daemon_running, record

from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.dra import cdi, mps, slices
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.gpu.mps import MpsControl, MpsRoot
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, encode_quarantine
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import NODE as NODE_KIND
from gpuchain.kube.kinds import POD
from gpuchain.kube.memory import MemoryCluster

DAEMON = 60.0
"""Seconds for a daemon to start, die or come back: each start runs several stand-in programs,
which a loaded 2-core machine runs slowly (as in the device plugin's MPS tests)."""
OPTIONS = ["rw", "nosuid", "nodev", "bind"]


async def _until(check: Callable[[], bool], timeout: float = DAEMON) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s")
        await asyncio.sleep(0.05)


class Plugin:
    """A DRA driver with shares and MPS daemons, its daemons kept on the loop (the plugin serving)."""

    def __init__(self, driver: DraDriver) -> None:
        self.driver = driver
        assert driver.mps is not None
        self.daemons = driver.mps
        driver.mps.interval = 0.1
        driver.mps.start_timeout = 20.0
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.driver.keep_mps())
        await _until(lambda: self.daemons.serving, 10)

    async def stop(self) -> None:
        """The plugin stops (a restart): the daemons are left running."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def kept(self) -> frozenset[str]:
        """The GPUs whose daemon is kept now (its keeper, which nothing outside the daemons reads)."""
        return frozenset(self.daemons._keepers)

    async def prepare(self, ref: ClaimRef) -> Any:
        return await asyncio.to_thread(self.driver.prepare, ref)

    async def unprepare(self, ref: ClaimRef) -> bool:
        return await asyncio.to_thread(self.driver.unprepare, ref)


@pytest.fixture
def make_plugin(
    cluster: MemoryCluster, short_dir: Path, clock: Clock, h100_sim: SimBackend, mps_stand_ins: Path
) -> Callable[..., Plugin]:
    def build(**options: bool) -> Plugin:
        return Plugin(
            build_driver(h100_sim, cluster, short_dir, clock, gpu_shares=True, mps_root=mps_stand_ins, **options)
        )

    return build


@pytest.fixture
async def plugin(make_plugin: Callable[..., Plugin]) -> AsyncIterator[Plugin]:
    p = make_plugin()
    p.driver.publish()
    await p.start()
    yield p
    await p.stop()


def _part(device: str, share: str, memory: str = "20Gi", sms: str | None = None) -> dict[str, Any]:
    consumed = {"memory": memory, **({"multiprocessors": sms} if sms else {})}
    return {"device": device, "shareID": share, "consumedCapacity": consumed}


def _smi(tmp_path: Path) -> list[str]:
    path = tmp_path / "smi"
    return path.read_text().splitlines() if path.exists() else []


def _spec(short_dir: Path, ref: ClaimRef) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(cdi.spec_path(short_dir / "cdi", ref.uid).read_text())
    return spec["containerEdits"]


def _published(cluster: MemoryCluster, name: str) -> dict[str, Any] | None:
    live = cluster.get(RESOURCE_SLICE, name=slices.slice_name(NODE))
    return next((d for d in live["spec"]["devices"] if d["name"] == name), None)


async def test_the_first_share_starts_its_gpus_daemon_and_the_last_unprepare_stops_it(
    plugin: Plugin, cluster: MemoryCluster, short_dir: Path, tmp_path: Path, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    gpu0 = h100_sim.inventory().gpus[0]
    root = mps_stand_ins
    one = shared_claim(cluster, "one", [_part("gpu-0", "s1", "40Gi")], NODE)
    two = shared_claim(cluster, "two", [_part("gpu-0", "s2", "20Gi", "66")], NODE)

    await plugin.prepare(one)
    # NVIDIA's start: compute mode EXCLUSIVE_PROCESS on the GPU, then the daemon seeing that GPU only;
    # no daemon-wide limits (each client brings its own), only the health question after it
    assert _smi(tmp_path) == [f"-i {gpu0.uuid} -c EXCLUSIVE_PROCESS"]
    assert record(root, gpu0.uuid)[0] == "-d"
    assert not [line for line in record(root, gpu0.uuid) if line.startswith("set_")]
    assert (root / gpu0.uuid / "pipe" / "visible").read_text() == gpu0.uuid
    edits = _spec(short_dir, one)
    assert edits["env"] == [
        f"NVIDIA_VISIBLE_DEVICES={gpu0.uuid}",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M",
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
    ]
    assert edits["mounts"] == [  # as NVIDIA's DRA driver mounts them (GetCDIContainerEdits)
        {"hostPath": f"{root}/{gpu0.uuid}/pipe", "containerPath": "/tmp/nvidia-mps", "options": OPTIONS},
        {"hostPath": f"{root}/shm", "containerPath": "/dev/shm", "options": OPTIONS},
    ]
    pid = daemon_pid(root, gpu0.uuid)

    await plugin.prepare(two)  # a second share of the GPU: the same daemon
    assert record(root, gpu0.uuid).count("-d") == 1 and daemon_pid(root, gpu0.uuid) == pid
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in _spec(short_dir, two)["env"]

    assert await plugin.unprepare(one)
    assert daemon_running(pid) and plugin.kept() == {gpu0.uuid}  # a share of the GPU is left
    assert await plugin.unprepare(two)
    assert record(root, gpu0.uuid)[-1] == "quit" and not daemon_running(pid)
    assert _smi(tmp_path)[-1] == f"-i {gpu0.uuid} -c DEFAULT"
    assert not (root / gpu0.uuid / ".started").exists() and plugin.kept() == frozenset()


async def test_news_of_the_node_while_a_prepare_starts_a_daemon_leave_the_loop_free(
    plugin: Plugin, cluster: MemoryCluster, tmp_path: Path, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    """The plugin's Node watch (quarantine, allocator) takes the driver's lock, which a Prepare holds
    while the loop starts its daemon: the watch must not wait for it on the loop, or the daemon
    is never started and the Prepare fails after its start timeout (the plugin frozen meanwhile)."""
    cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}}})
    follower = QuarantineFollower(
        cluster,
        node_name=NODE,
        apply=plugin.driver.set_quarantined,
        retry_seconds=0.1,
        on_node=plugin.driver.node_changed,
    )
    following = asyncio.create_task(follower.follow())
    try:
        await _until(lambda: follower.current is not None, 10)
        gpu0, gpu5 = h100_sim.inventory().gpus[0], h100_sim.inventory().gpus[5]
        pipe = mps_stand_ins / gpu0.uuid / "pipe"
        pipe.mkdir(parents=True)
        (pipe / "hold").touch()  # the daemon's start takes until the file goes
        prepare = asyncio.create_task(plugin.prepare(shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE)))
        await _until(lambda: bool(_smi(tmp_path)))  # Prepare holds the lock, its daemon starting
        quarantine = encode_quarantine([gpu5.uuid])
        cluster.patch(NODE_KIND, name=NODE, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: quarantine}}})
        await asyncio.sleep(0.5)  # the watch sees it
        (pipe / "hold").unlink()
        prepared = await prepare
        assert prepared.devices[0].device == "gpu-0"
        await _until(lambda: gpu5.uuid in plugin.driver.unhealthy, 10)
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def test_a_dead_daemon_makes_its_gpu_unhealthy_refuses_its_shares_and_is_started_again(
    make_plugin: Callable[..., Plugin], cluster: MemoryCluster, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    p = make_plugin(device_taints=True)
    p.driver.publish()
    await p.start()
    try:
        gpu0 = h100_sim.inventory().gpus[0]
        pipe = mps_stand_ins / gpu0.uuid / "pipe"
        await p.prepare(shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE))
        (pipe / "refuse").touch()  # it cannot be started again until the file goes
        os.kill(daemon_pid(mps_stand_ins, gpu0.uuid), signal.SIGKILL)

        await _until(lambda: gpu0.uuid in p.driver.unhealthy)
        await _until(lambda: bool((_published(cluster, "gpu-0") or {}).get("taints")))
        assert (_published(cluster, "gpu-0") or {})["taints"] == [
            {"key": "gpu.gpuchain.io/unhealthy", "value": "mps-daemon-down", "effect": "NoSchedule"}
        ]
        two = shared_claim(cluster, "two", [_part("gpu-0", "s2")], NODE)
        with pytest.raises(PrepareError, match="MPS control daemon of its GPU does not answer"):
            await p.prepare(two)
        assert p.driver.checkpoint.get(two.uid) is None
        other = await p.prepare(
            shared_claim(cluster, "other", [_part("gpu-1", "s3")], NODE)
        )  # another GPU: its own daemon
        assert other.devices[0].device == "gpu-1"

        (pipe / "refuse").unlink()
        await _until(lambda: gpu0.uuid not in p.driver.unhealthy)
        await _until(lambda: (_published(cluster, "gpu-0") or {}).get("taints") == [])
        assert record(mps_stand_ins, gpu0.uuid).count("-d") == 2
        await p.prepare(two)
    finally:
        await p.stop()


async def test_a_daemon_found_dead_is_waited_for_again(
    plugin: Plugin, cluster: MemoryCluster, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    """Once its daemon is found dead, a GPU's daemon is not answering: a Prepare that got past the
    unhealthy check before the driver heard of it waits for the daemon to answer again, rather than
    taking the answer the daemon gave before it died."""
    gpu0 = h100_sim.inventory().gpus[0]
    await plugin.prepare(shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE))
    (mps_stand_ins / gpu0.uuid / "pipe" / "refuse").touch()  # it cannot be started again
    os.kill(daemon_pid(mps_stand_ins, gpu0.uuid), signal.SIGKILL)
    await _until(lambda: gpu0.uuid in plugin.daemons.down)
    plugin.daemons.start_timeout = 0.5
    problem = await asyncio.to_thread(plugin.daemons.wait_up, gpu0.uuid)
    assert problem is not None and "did not answer within 0.5s" in problem


async def test_a_change_that_comes_after_the_plugin_stopped_keeping_the_daemons_is_refused(
    plugin: Plugin, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    """A Prepare's request that reaches the loop after the daemons stopped being kept (the plugin
    stopping) starts no daemon nobody keeps: it is refused."""
    gpu0 = h100_sim.inventory().gpus[0]
    async with plugin.daemons._changes:  # a change under way: the request waits its turn
        asked = asyncio.create_task(asyncio.to_thread(plugin.daemons.want, {gpu0.uuid: 0}))
        await asyncio.sleep(0.5)
        await plugin.stop()
    with pytest.raises(RuntimeError, match="no longer kept"):
        await asked
    await asyncio.sleep(0.5)
    assert plugin.kept() == frozenset() and record(mps_stand_ins, gpu0.uuid) == []


async def test_a_stop_cut_short_is_done_by_the_next_change(
    plugin: Plugin, cluster: MemoryCluster, h100_sim: SimBackend, mps_stand_ins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop cut short (the caller gave up waiting) leaves its daemon kept, so the next change
    stops it, rather than a daemon running that nothing keeps or stops."""
    gpu0 = h100_sim.inventory().gpus[0]
    await plugin.prepare(shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE))
    pid = daemon_pid(mps_stand_ins, gpu0.uuid)
    monkeypatch.setattr(mps, "CALL_TIMEOUT", 1.0)
    (mps_stand_ins / gpu0.uuid / "pipe" / "hold").touch()  # its quit waits
    with pytest.raises(RuntimeError, match="took over 1s"):
        await asyncio.to_thread(plugin.daemons.want, {})
    (mps_stand_ins / gpu0.uuid / "pipe" / "hold").unlink()
    assert daemon_running(pid)
    await asyncio.to_thread(plugin.daemons.want, {})
    assert not daemon_running(pid) and plugin.kept() == frozenset()


async def test_a_health_report_applied_late_leaves_the_gpu_as_its_daemon_is(
    plugin: Plugin, cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    """Each report is applied on a worker thread of its own, so an older one (down) may be applied
    after a newer one (up): the GPUs withdrawn are those whose daemon is down now, whatever order."""
    gpu0 = h100_sim.inventory().gpus[0]
    await plugin.prepare(shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE))
    plugin.daemons.on_health(gpu0.uuid, False)  # the report of a moment ago, its daemon answering again since
    await asyncio.sleep(0.5)
    assert gpu0.uuid not in plugin.daemons.down and gpu0.uuid not in plugin.driver.unhealthy


async def test_a_restarted_plugin_takes_over_the_daemons_its_claims_need_and_stops_the_others(
    make_plugin: Callable[..., Plugin], cluster: MemoryCluster, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    gpus = h100_sim.inventory().gpus
    root = mps_stand_ins
    first = make_plugin()
    first.driver.publish()
    await first.start()
    await first.prepare(shared_claim(cluster, "zero", [_part("gpu-0", "s0")], NODE))
    held = await first.prepare(shared_claim(cluster, "two", [_part("gpu-2", "s2")], NODE))
    await first.stop()
    kept = daemon_pid(root, gpus[0].uuid)
    assert daemon_running(kept)  # a plugin restart leaves the daemons to the claims' containers
    # a crash after a Prepare started GPU 1's daemon, before the claim was recorded: nobody holds it
    await MpsControl(resource=gpus[1].uuid, root=MpsRoot(str(root)), visible_devices=gpus[1].uuid).start(
        [], [gpus[1].uuid]
    )
    orphan = daemon_pid(root, gpus[1].uuid)
    # and GPU 2's daemon died while no plugin ran
    os.kill(daemon_pid(root, gpus[2].uuid), signal.SIGKILL)

    restarted = make_plugin()
    restarted.driver.publish()
    await restarted.start()
    try:
        await _until(lambda: restarted.kept() == {gpus[0].uuid, gpus[2].uuid})
        await _until(lambda: not daemon_running(orphan))
        assert record(root, gpus[1].uuid)[-1] == "quit" and not (root / gpus[1].uuid / ".started").exists()
        await _until(lambda: record(root, gpus[2].uuid).count("-d") == 2)
        await _until(lambda: not restarted.driver.unhealthy)
        assert record(root, gpus[0].uuid).count("-d") == 1 and daemon_pid(root, gpus[0].uuid) == kept  # taken over
        assert await restarted.prepare(ClaimRef("default", held.uid, "two")) == held  # from the checkpoint
    finally:
        await restarted.stop()


async def test_a_claim_with_part_of_a_gpu_holds_nothing_else(plugin: Plugin, cluster: MemoryCluster) -> None:
    """A container talks to one MPS daemon, and there is one per GPU."""
    two_gpus = shared_claim(cluster, "two-gpus", [_part("gpu-0", "a"), _part("gpu-1", "b")], NODE)
    with pytest.raises(PrepareError, match="ask for each shared GPU in a claim of its own"):
        await plugin.prepare(two_gpus)
    beside_whole = shared_claim(cluster, "beside", [_part("gpu-0", "a"), {"device": "gpu-1"}], NODE)
    with pytest.raises(PrepareError, match="beside other devices"):
        await plugin.prepare(beside_whole)
    assert plugin.kept() == frozenset()
    # shares of all of two GPUs' memory are alone on them: no daemon, no limit to enforce
    whole = await plugin.prepare(
        shared_claim(
            cluster, "whole", [{"device": "gpu-0", "shareID": "w0"}, {"device": "gpu-1", "shareID": "w1"}], NODE
        )
    )
    assert len(whole.devices) == 2 and plugin.kept() == frozenset()


async def test_a_daemon_that_will_not_start_fails_the_prepare_and_is_not_kept(
    plugin: Plugin, cluster: MemoryCluster, h100_sim: SimBackend, mps_stand_ins: Path
) -> None:
    gpu0 = h100_sim.inventory().gpus[0]
    pipe = mps_stand_ins / gpu0.uuid / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "refuse").touch()
    plugin.daemons.start_timeout = 3.0
    ref = shared_claim(cluster, "one", [_part("gpu-0", "s1")], NODE)
    with pytest.raises(PrepareError, match="did not answer within 3s .*refusing to start"):
        await plugin.prepare(ref)
    assert plugin.driver.checkpoint.get(ref.uid) is None and plugin.kept() == frozenset()
    assert not cdi.spec_path(plugin.driver.config.cdi_dir, ref.uid).exists()
    assert gpu0.uuid not in plugin.driver.unhealthy  # a first start that fails is that Prepare's error only


def _pod(cluster: MemoryCluster, name: str, containers: dict[str, list[str]], generated: str = "") -> None:
    """A pod whose containers use these claims, reserved for it as the scheduler reserves them; the
    claim ``generated`` comes from a template (named in ``status.resourceClaimStatuses``), the
    others by name."""
    entries = sorted({c for used in containers.values() for c in used})
    spec = {
        "nodeName": NODE,
        "resourceClaims": [
            {"name": f"e-{c}", "resourceClaimTemplateName": "t"}
            if c == generated
            else {"name": f"e-{c}", "resourceClaimName": c}
            for c in entries
        ],
        "containers": [
            {"name": n, "image": "cuda", "resources": {"claims": [{"name": f"e-{c}"} for c in used]}}
            for n, used in containers.items()
        ],
    }
    pod = cluster.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    )
    if generated:
        cluster.patch_status(
            POD,
            name=name,
            status={"resourceClaimStatuses": [{"name": f"e-{generated}", "resourceClaimName": generated}]},
            namespace="default",
        )
    for c in entries:
        live = cluster.get(RESOURCE_CLAIM, name=c, namespace="default")
        reserved = [
            *(live["status"].get("reservedFor") or []),
            {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]},
        ]
        cluster.patch_status(RESOURCE_CLAIM, name=c, status={"reservedFor": reserved}, namespace="default")


async def test_a_container_with_part_of_a_gpu_uses_no_other_claim_of_another_gpu(
    plugin: Plugin, cluster: MemoryCluster, short_dir: Path, h100_sim: SimBackend
) -> None:
    """The kubelet prepares one claim at a time; the plugin finds the containers of the pods the claim
    is reserved for and refuses a container that would need two GPUs' daemons, whichever claim
    comes first. Two containers of one pod may each hold part of a different GPU."""
    one = shared_claim(cluster, "one", [_part("gpu-0", "a")], NODE)
    two = shared_claim(cluster, "two", [_part("gpu-1", "b")], NODE)
    whole = shared_claim(cluster, "whole", [{"device": "gpu-2"}], NODE)
    _pod(cluster, "mixed", {"main": ["one", "two"], "side": ["whole"]}, generated="two")
    refused = r"container 'main' of pod default/mixed also uses claim default/{}, which holds other devices .* a container of its own"
    with pytest.raises(PrepareError, match=refused.format("two")):
        await plugin.prepare(one)
    with pytest.raises(PrepareError, match=refused.format("one")):
        await plugin.prepare(two)
    assert plugin.driver.checkpoint.claims() == [] and plugin.kept() == frozenset()
    assert not cdi.spec_path(short_dir / "cdi", one.uid).exists()
    await plugin.prepare(whole)  # a claim without a share starts no daemon and is not asked about

    beside = shared_claim(cluster, "beside", [_part("gpu-3", "c")], NODE)
    _pod(cluster, "beside-whole", {"main": ["beside", "whole"]})
    with pytest.raises(
        PrepareError, match=r"container 'main' of pod default/beside-whole also uses claim default/whole"
    ):
        await plugin.prepare(beside)

    apart = [shared_claim(cluster, f"apart-{i}", [_part(f"gpu-{i}", f"p{i}")], NODE) for i in (4, 5)]
    same = shared_claim(cluster, "same", [_part("gpu-4", "q")], NODE)
    _pod(cluster, "two-containers", {"a": ["apart-4", "same"], "b": ["apart-5"]})
    for ref in (*apart, same):  # each container reaches one daemon: its GPU's
        await plugin.prepare(ref)
    gpus = h100_sim.inventory().gpus
    assert plugin.kept() == {gpus[4].uuid, gpus[5].uuid}
