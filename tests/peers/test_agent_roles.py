"""Each chart role on the real API server, with a token of that role (issue 24 item 3).

Each agent's own code does its job on the real kube-apiserver (v1.37.2) with a token bound to its
pod on gpu-a, through a client that notes every request it makes (``Recording``). What it asked
for is what its role must grant, and the role grants nothing else: the requests the code made
equal the chart's grants to that account, verb for verb, and none was refused. Then one step
beyond its job (one node over, or a verb or resource it does not need) is refused. The chart's
RBAC and admission policies are created as rendered (remediation with the repair loop, DRA and
the MIG manager's evictions on), once for the module.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpuchain.api.config.v1.selection import ConfigKeyError
from gpuchain.common.supervise import cancel_and_wait
from gpuchain.deviceplugin.nodeconfig import NODE_CONFIG_LABEL, REASON_NOT_FOUND, NodeLabelWatch
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.discovery.output import patch_node_labels
from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import CONFIGMAP, EVENT, NODE, POD, ForbiddenError, Kind, KubeError, LiveCluster, kind_of
from gpuchain.kube.allocator import DRA
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import WatchEvent
from gpuchain.mig.agent import Policy as MigPolicy
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager
from gpuchain.remediation.controller import Remediator
from gpuchain.remediation.decide import Policy as RemediationPolicy
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import pod_object
from gpuchain.validator.checks import check_plugin
from peers.apiserver import ApiServer
from peers.test_node_agent_policy import evictions_judged
from peers.test_node_write_policy import COLLECTIONS, NS, _apply, _node, _refusal, _until, pod_bound_kubeconfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

NODE_AGENTS = (
    "gpuchain-device-plugin",
    "gpuchain-gpu-feature-discovery",
    "gpuchain-mig-manager",
    "gpuchain-operator-validator",
    "gpuchain-dra-plugin",
    "gpuchain-gpu-health",
    "gpuchain-dcgm-exporter",  # the operator makes its account; the chart binds nothing to it
)
REMEDIATOR = "gpuchain-remediator"
VALUES = {
    "nodeAgent": {"enabled": False},  # each agent's own account (the node agent's is their union: test_chart_rbac)
    "dra": {"enabled": True},
    "migManagerEviction": True,
    "remediation": {"enabled": True, "repair": {"enabled": True}},
}
Request = tuple[str, str, str]  # (verb, API group, resource[/subresource])


class Recording(LiveCluster):
    """A LiveCluster that notes each request it makes, and each the server refused: what the
    component's code asks of the API server, found by running it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: set[Request] = set()
        self.refused: list[str] = []

    @contextlib.contextmanager
    def _noting(self, verb: str, kind: Kind, sub: str = "") -> Iterator[None]:
        resource = kind.plural + (f"/{sub}" if sub else "")
        self.requests.add((verb, kind.group, resource))
        try:
            yield
        except ForbiddenError as exc:
            self.refused.append(f"{verb} {resource}: {exc}")
            raise

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        with self._noting("get", kind):
            return super().get(kind, name=name, namespace=namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        with self._noting("list", kind):
            return super().list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)

    def create(self, obj: Obj) -> Obj:
        with self._noting("create", kind_of(obj)):
            return super().create(obj)

    def patch(self, kind: Kind, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        with self._noting("patch", kind):
            return super().patch(kind, name=name, patch=patch, namespace=namespace)

    def patch_status(
        self, kind: Kind, name: str, status: Obj, namespace: str | None = None, strategic: bool = False
    ) -> Obj:
        with self._noting("patch", kind, "status"):
            return super().patch_status(kind, name=name, status=status, namespace=namespace, strategic=strategic)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        with self._noting("delete", kind):
            super().delete(kind, name=name, namespace=namespace)

    def evict(self, name: str, namespace: str) -> None:
        with self._noting("create", POD, "eviction"):
            super().evict(name, namespace)

    async def watch(self, kind: Kind, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        with self._noting("watch", kind):
            async for event in super().watch(kind, *args, **kwargs):
                yield event


@dataclass
class World:
    apiserver: ApiServer
    admin: LiveCluster
    kubeconfigs: dict[str, Path]  # each account's, its token bound to its pod
    grants: dict[str, set[Request]]  # what the chart's roles grant each account
    opened: list[Recording] = field(default_factory=list)

    def agent(self, account: str) -> Recording:
        """A fresh recording client with ``account``'s token (closed with the module)."""
        client = Recording.from_kubeconfig(str(self.kubeconfigs[account]))
        assert isinstance(client, Recording)
        self.opened.append(client)
        return client


def _grants(docs: list[dict[str, Any]]) -> dict[str, set[Request]]:
    roles = {(d["kind"], d["metadata"]["name"]): d["rules"] for d in docs if d["kind"] in ("ClusterRole", "Role")}
    grants: dict[str, set[Request]] = {}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        rules = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            grants.setdefault(subject["name"], set()).update(
                (verb, group, resource)
                for rule in rules
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            )
    return grants


@pytest.fixture(scope="module")
def world(kube_apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    apiserver = kube_apiserver
    apiserver.reset()
    docs = render(VALUES)
    for doc in docs:
        if doc["kind"] in COLLECTIONS:
            _apply(apiserver, doc)
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    for name in ("gpu-a", "gpu-b"):
        admin.create(_node(name))
    tmp = tmp_path_factory.mktemp("agent-roles")
    kubeconfigs = {}
    for account in (*NODE_AGENTS, REMEDIATOR):
        kubeconfigs[account] = pod_bound_kubeconfig(apiserver, admin, account, "gpu-a", tmp / account)
    world = World(apiserver, admin, kubeconfigs, _grants(docs))
    try:
        validator = world.agent("gpuchain-operator-validator")
        _until(
            lambda: _refusal(lambda: validator.get(NODE, name="gpu-a")) is None,
            "the chart's RBAC reaches the authorizer",
        )
        gfd = world.agent("gpuchain-gpu-feature-discovery")
        probe = {"metadata": {"labels": {"probe": "x"}}}
        health = world.agent("gpuchain-gpu-health")
        for name, agent in (("gpuchain-node-agent-writes", gfd), ("gpuchain-gpu-health-writes", health)):
            _until(partial(_refuses_gpu_b, agent, probe), f"ValidatingAdmissionPolicy {name} is enforced")
        yield world
    finally:
        for client in (admin, *world.opened):
            client.close()
        apiserver.reset()


def _refuses_gpu_b(agent: Recording, patch: Obj) -> bool:
    return isinstance(_refusal(lambda: agent.patch(NODE, name="gpu-b", patch=patch)), ForbiddenError)


def _did_exactly_its_job(world: World, account: str, agent: Recording) -> None:
    """Nothing the agent asked for was refused, and its role grants exactly what it asked for."""
    assert agent.refused == [], agent.refused
    granted = world.grants.get(account, set())
    assert agent.requests <= granted, f"{account} asked for what its role lacks: {sorted(agent.requests - granted)}"
    assert agent.requests == granted, (
        f"{account}'s role grants what it never asks for: {sorted(granted - agent.requests)}"
    )


def _refused(*steps: Callable[[], object]) -> None:
    for i, step in enumerate(steps):
        err = _refusal(step)
        assert isinstance(err, ForbiddenError), f"step {i} beyond the job: {err!r}"


async def _first(stream: AsyncIterator[Any], agent: Recording, timeout: float = 15.0) -> Any:
    """The first item of ``stream`` (a watch that never ends: a refused one is retried, so the
    agent's first refusal ends the wait), then the stream closed."""
    item = asyncio.ensure_future(anext(stream))
    try:
        async with asyncio.timeout(timeout):
            while not item.done():
                assert not agent.refused, agent.refused
                await asyncio.sleep(0.05)
        return item.result()
    finally:
        item.cancel()
        with contextlib.suppress(BaseException):
            await item
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]


async def _quarantines(
    follower: QuarantineFollower, seen: builtins.list[frozenset[str]]
) -> AsyncIterator[frozenset[str]]:
    """Each quarantine list ``follower`` applies, as a stream (its ``follow`` runs meanwhile)."""
    task = asyncio.create_task(follower.follow())
    try:
        while True:
            if seen:
                yield seen.pop(0)
            assert not task.done(), "the follower ended"
            await asyncio.sleep(0.05)
    finally:
        await cancel_and_wait(task)


def _events_on(world: World, node: str, reason: str) -> builtins.list[Obj]:
    return [
        e
        for e in world.admin.list(EVENT, namespace="default")
        if e["involvedObject"].get("name") == node and e["reason"] == reason
    ]


def _gpu_pod(namespace: str, name: str, node: str) -> Obj:
    """A pod holding one GPU on ``node`` (remediation/scenario.py's, with an image the server asks for
    and no grace period: no kubelet is there to finish a graceful deletion)."""
    pod = pod_object(namespace, name=name, node=node)
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    pod["spec"]["containers"][0]["image"] = "ghcr.io/gpuchain/gpuchain:0.1.0"
    return pod


def _label(world: World, labels: dict[str, Any], node: str = "gpu-a") -> None:
    world.admin.patch(NODE, name=node, patch={"metadata": {"labels": labels}})


def _follows_config_label(world: World, agent: Recording, value: str) -> NodeLabelWatch:
    """As the device plugin and GFD do (deviceplugin/nodeconfig.py): read gpu-a's
    ``nvidia.com/device-plugin.config`` label, then watch it change to ``value``."""
    watch = NodeLabelWatch(agent, node_name="gpu-a", watch_seconds=5)
    label, rv = watch.read()

    async def changed() -> str | None:
        stream = watch.changes(label, rv)
        _label(world, {NODE_CONFIG_LABEL: value})
        return await _first(stream, agent)  # type: ignore[no-any-return]

    try:
        assert asyncio.run(changed()) == value
    finally:
        _label(world, {NODE_CONFIG_LABEL: None})
    return watch


def test_the_device_plugin_follows_its_nodes_config_label_and_warns_on_it(world: World) -> None:
    """deviceplugin/nodeconfig.py: read the Node's config label, watch it, a Warning Event on a bad config."""
    account = "gpuchain-device-plugin"
    plugin = world.agent(account)
    watch = _follows_config_label(world, plugin, "mps")
    watch.report(
        ConfigKeyError("ConfigMap gpu-operator/plugin-configs", field="data", key="mps", available=["default"])
    )
    assert _events_on(world, "gpu-a", REASON_NOT_FOUND)
    _did_exactly_its_job(world, account, plugin)
    _refused(
        lambda: plugin.patch(NODE, name="gpu-a", patch={"metadata": {"labels": {"probe": "x"}}}),
        lambda: plugin.list(POD, namespace=NS),
        lambda: plugin.evict("anything", NS),
    )


def test_gfd_labels_its_node_and_follows_its_config_label(world: World) -> None:
    """discovery/output.py patches the Node's labels; discovery/service.py follows its config label."""
    account = "gpuchain-gpu-feature-discovery"
    gfd = world.agent(account)
    patch_node_labels(
        gfd, node="gpu-a", labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    )
    assert world.admin.get(NODE, name="gpu-a")["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    _follows_config_label(world, gfd, "a100")
    _did_exactly_its_job(world, account, gfd)
    _refused(
        lambda: gfd.patch(NODE, name="gpu-b", patch={"metadata": {"labels": {"nvidia.com/gpu.count": "0"}}}),
        lambda: gfd.patch(NODE, name="gpu-a", patch={"spec": {"unschedulable": True}}),
        lambda: gfd.list(POD, namespace=NS),
        lambda: gfd.record_event(world.admin.get(NODE, name="gpu-a"), reason="Probe", message="probe"),
    )


async def _run_until(run: Callable[[asyncio.Event], Awaitable[None]], done: Callable[[], bool], timeout: float) -> None:
    """Run ``run(stop)`` until ``done()`` (polled), then stop it and wait for it to end."""
    stop = asyncio.Event()
    task = asyncio.create_task(run(stop))
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while not done():
            assert not task.done(), "the loop ended on its own"
            assert asyncio.get_running_loop().time() < deadline, "not done in time"
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def _dra_pod(namespace: str, name: str, node: str, claim: str) -> Obj:
    """A pod on ``node`` holding a GPU through the ResourceClaim ``claim`` only (no nvidia.com/gpu)."""
    pod = _gpu_pod(namespace, name, node)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def test_the_mig_manager_evicts_its_nodes_gpu_pods_and_repartitions(world: World) -> None:
    """mig/manager.py with --evict: read and watch its Node, list and watch the pods on it, get the
    DRA claims of those that have any (a claim on a GPU to change makes its pod a GPU user), evict
    the GPU users, pause the operands' labels, apply the layout, record Events."""
    account = "gpuchain-mig-manager"
    mig = world.agent(account)
    world.admin.create(_gpu_pod("ml", "train", "gpu-a"))
    world.admin.create(resource_claim("mig-user", namespace="ml"))
    world.admin.patch_status(
        RESOURCE_CLAIM, name="mig-user", status=allocation_status("gpu-a", [("gpu", "gpu-0")]), namespace="ml"
    )
    world.admin.create(_dra_pod("ml", "claims-a-gpu", "gpu-a", "mig-user"))
    _label(world, {"nvidia.com/mig.config": "all-1g.10gb"})
    manager = MigManager(
        mig,
        backend=SimBackend.from_preset("h100-80gb-x8", node="gpu-a"),
        node="gpu-a",
        config=default_config(),
        policy=MigPolicy(evict=True),
    )

    def state() -> str | None:
        return world.admin.get(NODE, name="gpu-a")["metadata"]["labels"].get("nvidia.com/mig.config.state")

    try:
        asyncio.run(
            _run_until(lambda stop: manager.run(interval=0.2, stop=stop, resync=1.0), lambda: state() == "success", 30)
        )
    finally:
        _label(world, {"nvidia.com/mig.config": None, "nvidia.com/mig.config.state": None})
        world.admin.delete(RESOURCE_CLAIM, name="mig-user", namespace="ml")
    assert isinstance(_refusal(lambda: world.admin.get(POD, name="train", namespace="ml")), KubeError), (
        "the GPU pod was evicted"
    )
    assert isinstance(_refusal(lambda: world.admin.get(POD, name="claims-a-gpu", namespace="ml")), KubeError), (
        "so was the DRA one"
    )
    assert _events_on(world, "gpu-a", "MigConfigSuccess")
    _did_exactly_its_job(world, account, mig)
    world.admin.create(_gpu_pod("ml", "train-b", "gpu-b"))
    evictions_judged(mig, world.admin)
    _refused(
        lambda: mig.evict("train-b", "ml"),
        lambda: mig.patch(
            NODE, name="gpu-b", patch={"metadata": {"labels": {"nvidia.com/mig.config.state": "failed"}}}
        ),
        lambda: mig.patch(NODE, name="gpu-a", patch={"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}),
        lambda: mig.delete(POD, name="train-b", namespace="ml"),
    )


def test_the_validator_reads_its_nodes_gpus_only(world: World) -> None:
    """validator/checks.py: the plugin validation gets its Node's allocatable; nothing else."""
    account = "gpuchain-operator-validator"
    validator = world.agent(account)
    world.admin.patch_status(
        NODE, name="gpu-a", status={"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}
    )
    result = check_plugin(validator, "gpu-a")
    assert result.ok, result.message
    _did_exactly_its_job(world, account, validator)
    _refused(
        lambda: validator.patch(NODE, name="gpu-a", patch={"metadata": {"labels": {"probe": "x"}}}),
        lambda: validator.list(POD, namespace=NS),
        lambda: validator.record_event(world.admin.get(NODE, name="gpu-a"), reason="Probe", message="probe"),
    )


def test_the_dra_plugin_publishes_its_nodes_slice_and_prepares_its_claims(world: World, tmp_path: Path) -> None:
    """dra/driver.py: publish the node's ResourceSlice (owned by its Node), republish on a change,
    read a claim to prepare it; deviceplugin/quarantine.py: watch its Node for quarantined GPUs."""
    account = "gpuchain-dra-plugin"
    dra = world.agent(account)
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-a")
    # gpu-a's GPUs are DRA's (kube.allocator): no device plugin announces them.
    world.admin.patch_status(
        NODE, name="gpu-a", status={"capacity": {"nvidia.com/gpu": "0"}, "allocatable": {"nvidia.com/gpu": "0"}}
    )
    config = DriverConfig(
        node="gpu-a", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", dev_root=tmp_path / "root", unlabelled=DRA
    )
    driver = DraDriver(backend, cluster=dra, config=config)
    first = driver.publish()
    assert first.changed and first.devices
    uuid = backend.inventory().gpu(0).uuid
    assert driver.set_quarantined(frozenset({uuid})) is not None
    live = world.admin.get(RESOURCE_SLICE, name="gpu-a-gpu.gpuchain.io")
    assert len(live["spec"]["devices"]) == len(first.devices) - 1

    created = world.admin.create(resource_claim("one-gpu", namespace="ml"))
    world.admin.patch_status(
        RESOURCE_CLAIM, name="one-gpu", status=allocation_status("gpu-a", [("gpu", "gpu-1")]), namespace="ml"
    )
    prepared = driver.prepare(ClaimRef("ml", created["metadata"]["uid"], "one-gpu"))
    assert prepared

    seen: list[frozenset[str]] = []
    follower = QuarantineFollower(dra, node_name="gpu-a", apply=seen.append, watch_seconds=5)

    async def follow() -> None:
        await _first(_quarantines(follower, seen), dra)

    asyncio.run(follow())
    _did_exactly_its_job(world, account, dra)
    other = dict(live, metadata={"name": "gpu-b-gpu.gpuchain.io"}, spec=dict(live["spec"], nodeName="gpu-b"))
    _refused(
        lambda: dra.create(other),
        lambda: dra.delete(RESOURCE_SLICE, name="gpu-a-gpu.gpuchain.io"),
        lambda: dra.list(RESOURCE_CLAIM, namespace="ml"),
        lambda: dra.patch(NODE, name="gpu-a", patch={"metadata": {"labels": {"probe": "x"}}}),
    )


def test_gpu_health_publishes_its_nodes_gpus_and_runs_its_repair_loop(world: World) -> None:
    """remediation/publisher.py: annotations, the GPUHealthy condition and Events on its Node;
    remediation/loopagent.py: the repair loop's records and the remediator's breaker (ConfigMap)."""
    account = "gpuchain-gpu-health"
    health = world.agent(account)
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-a")
    held = backend.inventory().gpu(3).uuid
    world.admin.create(_gpu_pod("ml", "trainer", "gpu-a"))
    rows = [Assignment("nvidia.com/gpu", held, PodRef("ml", "trainer", "main"))]
    publisher = GpuHealthPublisher(backend, cluster=health, node_name="gpu-a", pods=lambda: rows, quiet_seconds=0)
    publisher.handle(backend.inject_xid(3, xid=79))
    assert publisher.publish().annotations_written
    loop = GpuLoopAgent(backend, cluster=health, node_name="gpu-a", namespace=NS)
    loop.run_once()
    assert held in world.admin.get(NODE, name="gpu-a")["metadata"]["annotations"]["gpuchain.io/gpu-quarantine"]
    _did_exactly_its_job(world, account, health)
    _refused(
        lambda: health.patch(NODE, name="gpu-b", patch={"metadata": {"annotations": {"gpuchain.io/gpu-faults": "[]"}}}),
        lambda: health.get(CONFIGMAP, name="kube-root-ca.crt", namespace=NS),
        lambda: health.list(POD, namespace="ml"),
        lambda: health.evict("trainer", "ml"),
    )


def test_the_remediator_evicts_a_failed_gpus_pods_and_taints_its_node(world: World) -> None:
    """remediation/controller.py: list Nodes, their pods and budgets, check the admission policy
    that vouches for GPU health, evict, taint, record Events and its status ConfigMap. It is the
    one cluster-wide agent (a Deployment), so its beyond is a verb, not a node: it never deletes a
    pod outright, writes no Node status and no ConfigMap outside its namespace."""
    account = REMEDIATOR
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-b")
    failed = backend.inventory().gpu(5).uuid
    world.admin.create(_gpu_pod("ml", "victim", "gpu-b"))
    rows = [Assignment("nvidia.com/gpu", failed, PodRef("ml", "victim", "main"))]
    path = world.kubeconfigs[account].with_name("gpu-health-b")
    health_b = Recording.from_kubeconfig(
        str(pod_bound_kubeconfig(world.apiserver, world.admin, "gpuchain-gpu-health", "gpu-b", path))
    )
    assert isinstance(health_b, Recording)
    world.opened.append(health_b)
    publisher = GpuHealthPublisher(backend, cluster=health_b, node_name="gpu-b", pods=lambda: rows, quiet_seconds=0)
    publisher.handle(backend.inject_xid(5, xid=79))
    publisher.publish()

    remediator = world.agent(account)
    controller = Remediator(remediator, policy=RemediationPolicy(breaker_share=1.0), namespace=NS)
    controller.run_once()
    assert isinstance(_refusal(lambda: world.admin.get(POD, name="victim", namespace="ml")), KubeError), (
        "the pod was evicted"
    )
    taints = world.admin.get(NODE, name="gpu-b")["spec"].get("taints") or []
    assert taints, "the node was tainted"
    # restarted with a breaker that one failed node of two trips: its status ConfigMap is patched
    strict = Remediator(remediator, policy=RemediationPolicy(breaker_share=0.3, breaker_min_nodes=1), namespace=NS)
    assert strict.run_once().breaker.tripped
    assert world.admin.get(CONFIGMAP, name="gpuchain-remediator", namespace=NS)["data"]["breaker"] == "open"
    _did_exactly_its_job(world, account, remediator)
    world.admin.create(_gpu_pod("ml", "bystander", "gpu-b"))
    _refused(
        lambda: remediator.delete(POD, name="bystander", namespace="ml"),
        lambda: remediator.patch_status(NODE, "gpu-b", {"conditions": [{"type": "GPUHealthy", "status": "True"}]}),
        lambda: remediator.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ml"}}
        ),
    )


def test_the_exporter_is_granted_nothing(world: World) -> None:
    """The exporter reads the kubelet's pod-resources socket, not the API (the operator mounts no
    token into its pod); its account is bound to no role. (``--pods-from-api`` would need list
    pods, which the chart does not grant.)"""
    account = "gpuchain-dcgm-exporter"
    exporter = world.agent(account)
    assert world.grants.get(account, set()) == set()

    async def watch() -> None:  # a refused watch is a ForbiddenError too, not httpx's ResponseNotRead
        async for _event in exporter.watch(NODE, field_selector="metadata.name=gpu-a", timeout=5):
            return

    _refused(
        lambda: asyncio.run(watch()),
        lambda: exporter.get(NODE, name="gpu-a"),
        lambda: exporter.list(POD, namespace=NS),
        lambda: exporter.record_event(world.admin.get(NODE, name="gpu-a"), reason="Probe", message="probe"),
    )
