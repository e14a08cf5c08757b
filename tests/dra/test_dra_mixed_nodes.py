"""Random claims, releases and faults on mixed nodes: no GPU or MIG device is ever handed out twice,
and none is left held once everything is released (issue 30 item 5).

Each drawn run is a cluster of nodes (H100s, six GPUs in MIG mode, two whole) of every kind the
chart, the operator or a mistake produce: the device plugin alone, the DRA driver alone (labelled,
or serving unlabelled nodes), and both deployed on one node, unlabelled or labelled either way, or
in the configuration the chart and the operator refuse (the DRA driver serving unlabelled nodes
beside a device plugin that registered first). On it: device plugin pods, DRA claims allocated by a
scheduler from the live slices and prepared later by the kubelet, releases, XIDs, the repair loop
taking a GPU and giving it back, DRA plugin restarts, and nodes relabelled once drained (the
handover the docs ask for: pods running on a GPU keep it).

The parts are gpuchain's own: the DRA side is ``DraDriver`` (slice, health, checkpoint, CDI specs
on disk) fed every change of its Node as its watch would; the device plugin side is what the plugin
serves (``served_resources``) under its health rules (``HealthState``), and a kubelet that hands out
the healthy devices the plugin serves and records what it announces in the Node's capacity. The
scheduler is ``claims.first_fit`` over the live slices, skipping devices other claims hold.

After every step: each physical unit (a whole GPU, a MIG device) is held by at most one pod, no
GPU is held whole while one of its MIG devices is, and no GPU is announced by both sides at once.
At the end everything is released: no claim is left in a checkpoint, no claim spec in a CDI
directory, no device with the kubelet (0 MIG slices leaked).

CI draws a few hundred runs (the ``ci`` profile's fixed draws). For many more, off CI:
``GPUCHAIN_EXPLORE_EXAMPLES=10000 .venv/bin/python -m pytest --hypothesis-profile=explore
tests/dra/test_dra_mixed_nodes.py``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.plugin import served_resources
from gpuchain.deviceplugin.resources import AnnouncedDevice, Resource
from gpuchain.dra import cdi
from gpuchain.dra.claims import allocation_status, attribute, first_fit, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.dra.slices import slice_name
from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import HealthEvent, Inventory
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DEVICE_PLUGIN, DRA, Allocator, allocator_of
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj

PRESET = "h100-80gb-x8-mig-mixed"
CONFIG = parse_config("flags: {migStrategy: mixed}")
QUIET = 5.0

#: kind -> (the allocator label, or None; device plugin deployed; DRA driver deployed; whom the DRA
#: driver gives unlabelled nodes)
KINDS: dict[str, tuple[str | None, bool, bool, Allocator]] = {
    "device-plugin": (None, True, False, DEVICE_PLUGIN),
    "dra": (DRA, False, True, DEVICE_PLUGIN),
    "dra-unlabelled": (None, False, True, DRA),  # the chart's dra.nodes=all, devicePlugin off
    "both-unlabelled": (None, True, True, DEVICE_PLUGIN),  # both deployed by mistake
    "both-labelled-dra": (DRA, True, True, DEVICE_PLUGIN),
    "both-labelled-device-plugin": (DEVICE_PLUGIN, True, True, DEVICE_PLUGIN),
    "both-refused": (None, True, True, DRA),  # what the chart and the operator refuse; the plugin was up first
}

EXAMPLES = max(300, settings.default.max_examples)
"""A few hundred under CI's fixed draws; the explore profile's GPUCHAIN_EXPLORE_EXAMPLES otherwise."""


@dataclass
class Pod:
    """A device plugin pod: the device the kubelet gave it."""

    node: str
    resource: str
    device: AnnouncedDevice


@dataclass
class Claim:
    """A DRA claim the scheduler allocated; ``prepared`` once the kubelet prepared it (its pod runs)."""

    node: str
    ref: ClaimRef
    prepared: bool = False


@dataclass
class SimNode:
    """One node: its GPUs, its device plugin's health and kubelet allocations, its DRA driver."""

    name: str
    kind: str
    backend: SimBackend
    root: Path
    dp_health: HealthState | None
    driver: DraDriver | None = None
    allocated: dict[str, str] = field(default_factory=dict)  #: device plugin id -> pod name

    @property
    def inventory(self) -> Inventory:
        return self.backend.inventory()


class World:
    """The cluster of one drawn run, and the checks over it."""

    def __init__(self, kinds: list[str], root: Path) -> None:
        self.cluster = MemoryCluster()
        self.clock = 0.0
        self.nodes: list[SimNode] = []
        self.pods: dict[str, Pod] = {}
        self.claims: dict[str, Claim] = {}
        self.serial = 0
        for i, kind in enumerate(kinds):
            label, dp, _, _ = KINDS[kind]
            name = f"node-{i}"
            labels = {ALLOCATOR_LABEL: label} if label else {}
            self.cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
            health = HealthState(policy=CONFIG.health.policy({}), quiet_seconds=QUIET) if dp else None
            self.nodes.append(SimNode(name, kind, SimBackend.from_preset(PRESET, node=name), root / name, health))
        for node in self.nodes:  # the device plugins register first, then the DRA drivers start
            self.announce(node)
        for node in self.nodes:
            if KINDS[node.kind][2]:
                self.start_driver(node)

    def now(self) -> float:
        return self.clock

    def node_obj(self, node: SimNode) -> Obj:
        return self.cluster.get(NODE, name=node.name)

    # ---- the device plugin and its kubelet --------------------------------------------------------

    def served(self, node: SimNode) -> list[Resource]:
        if node.dp_health is None:
            return []
        handed = allocator_of(self.node_obj(node)) == DRA
        return served_resources(node.inventory, config=CONFIG, handed_to_dra=handed)[0]

    def announce(self, node: SimNode) -> None:
        """The kubelet's capacity for what the plugin serves now; the DRA driver sees the Node change."""
        before = node_gpu_resources(self.node_obj(node))
        capacity = {name: "0" for name in before} | {r.name: str(len(r.devices)) for r in self.served(node)}
        updated = self.cluster.patch_status(NODE, name=node.name, status={"capacity": capacity})
        if node.driver is not None:
            node.driver.node_changed(updated)

    def dp_pod(self, node: SimNode, pick: int) -> None:
        """A pod asking one device of one of the plugin's resources: the kubelet gives a healthy free one."""
        resources = self.served(node)
        if not resources or node.dp_health is None:
            return
        res = resources[pick % len(resources)]
        free = [d for d in res.devices if d.id not in node.allocated and node.dp_health.healthy(d.gpu_uuid, d.mig_uuid)]
        if not free:
            return  # Pending: Insufficient <resource>
        self.serial += 1
        name = f"pod-{self.serial}"
        node.allocated[free[0].id] = name
        self.pods[name] = Pod(node.name, res.name, free[0])

    # ---- the DRA driver and the scheduler ---------------------------------------------------------

    def start_driver(self, node: SimNode) -> None:
        """A (new) DRA plugin process over the node's directories, publishing at start."""
        config = DriverConfig(
            node=node.name,
            cdi_dir=node.root / "cdi",
            state_dir=node.root / "state",
            recovery_quiet_seconds=QUIET,
            dev_root=node.root / "dev",
            unlabelled=KINDS[node.kind][3],
        )
        node.driver = DraDriver(node.backend, cluster=self.cluster, config=config, clock=self.now)
        node.driver.publish()

    def schedule(self, node: SimNode, mig: bool) -> None:
        """The scheduler allocates one device of the wanted type from the node's live slice."""
        live = self.cluster.get_or_none(RESOURCE_SLICE, name=slice_name(node.name))
        if live is None:
            return
        taken = [
            str(r["device"])
            for c in self.cluster.list(RESOURCE_CLAIM, namespace="default")
            for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
            if r["pool"] == node.name
        ]
        want = "mig" if mig else "gpu"
        try:
            (device,) = first_fit(live, count=1, predicate=lambda d: attribute(d, "type") == want, taken=taken)
        except LookupError:
            return  # Pending
        self.serial += 1
        name = f"claim-{self.serial}"
        created = self.cluster.create(resource_claim(name, namespace="default"))
        self.cluster.patch_status(
            RESOURCE_CLAIM, name=name, status=allocation_status(node.name, [("gpu", device)]), namespace="default"
        )
        self.claims[name] = Claim(node.name, ClaimRef("default", created["metadata"]["uid"], name))

    def prepare(self, pick: int) -> None:
        """The kubelet prepares an allocated claim; one the driver refuses is deleted (its pod never ran)."""
        waiting = sorted(n for n, c in self.claims.items() if not c.prepared)
        if not waiting:
            return
        name = waiting[pick % len(waiting)]
        claim = self.claims[name]
        driver = self.node(claim.node).driver
        try:
            if driver is None:
                raise PrepareError("no DRA plugin on the node")
            driver.prepare(claim.ref)
        except PrepareError:
            self.cluster.delete(RESOURCE_CLAIM, name=name, namespace="default")
            del self.claims[name]
            return
        claim.prepared = True

    # ---- releases, faults, handovers --------------------------------------------------------------

    def node(self, name: str) -> SimNode:
        return next(n for n in self.nodes if n.name == name)

    def release(self, pick: int) -> None:
        """A pod ends: its device goes back to the kubelet, or its claim is unprepared and deleted."""
        holders = sorted(self.pods) + sorted(self.claims)
        if not holders:
            return
        name = holders[pick % len(holders)]
        if name in self.pods:
            pod = self.pods.pop(name)
            del self.node(pod.node).allocated[pod.device.id]
            return
        claim = self.claims.pop(name)
        driver = self.node(claim.node).driver
        if claim.prepared:
            assert driver is not None
            driver.unprepare(claim.ref)
        self.cluster.delete(RESOURCE_CLAIM, name=name, namespace="default")

    def health_event(self, node: SimNode, event: HealthEvent) -> None:
        if node.dp_health is not None:
            node.dp_health.apply(event, self.now())
        if node.driver is not None:
            node.driver.on_event(event)

    def xid(self, node: SimNode, gpu: int, on_mig: bool, code: int) -> None:
        target = node.inventory.gpu(gpu)
        device: int | str = target.mig_devices[0].uuid if on_mig and target.mig_devices else gpu
        self.health_event(node, node.backend.inject_xid(device, xid=code, message="drawn fault"))

    def repair(self, node: SimNode, gpu: int) -> None:
        """The repair loop takes the GPU (drained, reset, burned in) and gives it back."""
        uuid = node.inventory.gpu(gpu).uuid
        for quarantine in (frozenset({uuid}), frozenset()):
            if node.dp_health is not None:
                node.dp_health.quarantine(quarantine, self.now())
            if node.driver is not None:
                node.driver.set_quarantined(quarantine)

    def wait(self, seconds: float) -> None:
        """Time passes: recoveries whose quiet period is over come back on both sides."""
        self.clock += seconds
        for node in self.nodes:
            if node.dp_health is not None:
                node.dp_health.due(self.now())
            if node.driver is not None:
                node.driver.finish_recoveries()

    def relabel(self, node: SimNode, value: str | None) -> None:
        """Hand a drained node over (no pod runs on its GPUs): both sides follow their Node."""
        if any(p.node == node.name for p in self.pods.values()):
            return
        if any(c.node == node.name and c.prepared for c in self.claims.values()):
            return
        self.cluster.patch(NODE, name=node.name, patch={"metadata": {"labels": {ALLOCATOR_LABEL: value}}})
        self.announce(node)

    # ---- the checks -------------------------------------------------------------------------------

    def held_units(self) -> list[tuple[str, str, bool]]:
        """(node, unit UUID, is a MIG device) for every device a running pod holds."""
        held = [(p.node, p.device.unit_uuid, p.device.mig_uuid is not None) for p in self.pods.values()]
        for node in self.nodes:
            if node.driver is None:
                continue
            migs = {m.uuid for g in node.inventory.gpus for m in g.mig_devices}
            for prepared in node.driver.checkpoint.claims():
                held += [(node.name, d.uuid, d.uuid in migs) for d in prepared.devices]
        return held

    def check_nothing_twice(self) -> None:
        held = self.held_units()
        twice = [unit for unit, n in Counter(u for _, u, _ in held).items() if n > 1]
        assert not twice, f"held twice: {twice}"
        for node in self.nodes:
            units = {u for n, u, _ in held if n == node.name}
            for gpu in node.inventory.gpus:
                whole = gpu.uuid in units
                parts = [m.uuid for m in gpu.mig_devices if m.uuid in units]
                assert not (whole and parts), f"{node.name} GPU {gpu.index} held whole and as MIG {parts}"
            announced_by_dp = {d.gpu_uuid for r in self.served(node) for d in r.devices}
            live = self.cluster.get_or_none(RESOURCE_SLICE, name=slice_name(node.name))
            published = {
                str(attribute(d, "parentUUID") or attribute(d, "uuid"))
                for d in (live or {}).get("spec", {}).get("devices", [])
            }
            both = announced_by_dp & published
            assert not both, f"{node.name} ({node.kind}): GPUs announced by both sides: {sorted(both)}"

    def release_everything(self) -> None:
        while self.pods or self.claims:
            self.release(0)

    def check_nothing_left(self) -> None:
        for node in self.nodes:
            assert not node.allocated, f"{node.name}: the kubelet still hands out {sorted(node.allocated)}"
            if node.driver is not None:
                left = [c.name for c in node.driver.checkpoint.claims()]
                assert not left, f"{node.name}: claims still prepared: {left}"
                specs = cdi.spec_claims(node.root / "cdi")
                assert not specs, f"{node.name}: claim specs left: {sorted(specs)}"
        assert self.held_units() == []  # 0 MIG slices leaked, 0 GPUs


node_index = st.integers(min_value=0, max_value=7)
STEP = st.one_of(
    st.tuples(st.just("dp-pod"), node_index, st.integers(0, 7)),
    st.tuples(st.just("claim"), node_index, st.booleans()),
    st.tuples(st.just("prepare"), st.integers(0, 63)),
    st.tuples(st.just("release"), st.integers(0, 63)),
    st.tuples(st.just("xid"), node_index, st.integers(0, 7), st.booleans(), st.sampled_from([48, 79, 94])),
    st.tuples(st.just("repair"), node_index, st.integers(0, 7)),
    st.tuples(st.just("wait"), st.sampled_from([1.0, QUIET + 1])),
    st.tuples(st.just("restart-dra"), node_index),
    st.tuples(st.just("relabel"), node_index, st.sampled_from([None, DRA, DEVICE_PLUGIN])),
)


def run(world: World, steps: list[tuple[Any, ...]]) -> None:
    for step in steps:
        op, args = step[0], step[1:]
        node = world.nodes[int(args[0]) % len(world.nodes)] if op not in ("prepare", "release", "wait") else None
        if op == "dp-pod" and node is not None:
            world.dp_pod(node, int(args[1]))
        elif op == "claim" and node is not None:
            world.schedule(node, bool(args[1]))
        elif op == "prepare":
            world.prepare(int(args[0]))
        elif op == "release":
            world.release(int(args[0]))
        elif op == "xid" and node is not None:
            world.xid(node, int(args[1]), bool(args[2]), int(args[3]))
        elif op == "repair" and node is not None:
            world.repair(node, int(args[1]))
        elif op == "wait":
            world.wait(float(args[0]))
        elif op == "restart-dra" and node is not None and node.driver is not None:
            world.start_driver(node)
        elif op == "relabel" and node is not None:
            world.relabel(node, args[1] if isinstance(args[1], str) else None)
        world.check_nothing_twice()


@settings(max_examples=EXAMPLES)
# A claim allocated before its node went back to the device plugin, whose GPU a device plugin pod then
# got: the driver must refuse to prepare it (kept as an explicit case: random draws rarely line it up).
@example(
    kinds=["both-labelled-dra"],
    steps=[("claim", 0, False), ("relabel", 0, DEVICE_PLUGIN), ("dp-pod", 0, 0), ("prepare", 0)],
)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=4),
    steps=st.lists(STEP, max_size=40),
)
def test_no_device_is_handed_out_twice_and_none_is_left_held(kinds: list[str], steps: list[tuple[Any, ...]]) -> None:
    # one per drawn example, so not the per-test short_dir fixture
    root = Path(tempfile.mkdtemp(prefix="dra-mix-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        world = World(kinds, root)
        world.check_nothing_twice()
        run(world, steps)
        world.release_everything()
        world.check_nothing_left()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_every_kind_of_node_serves_from_one_side(short_dir: Path) -> None:
    """The drawn runs start from these: which side announces each kind's GPUs before anything happens."""
    world = World(sorted(KINDS), short_dir)
    sides = {}
    for node in world.nodes:
        live = world.cluster.get_or_none(RESOURCE_SLICE, name=slice_name(node.name))
        dra = bool(live and live["spec"]["devices"])
        sides[node.kind] = ("dra" if dra else "") + (
            "device-plugin" if any(r.devices for r in world.served(node)) else ""
        )
    assert sides == {
        "both-labelled-device-plugin": "device-plugin",
        "both-labelled-dra": "dra",
        "both-refused": "device-plugin",
        "both-unlabelled": "device-plugin",
        "device-plugin": "device-plugin",
        "dra": "dra",
        "dra-unlabelled": "dra",
    }
