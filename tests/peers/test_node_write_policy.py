"""The chart's node-write ValidatingAdmissionPolicy (templates/remediation-admission.yaml) on the
real kube-apiserver, with real service-account tokens bound to pods on real Nodes.

tests/remediation/test_admission_policy.py checks the policy's CEL with cel-python; this checks
what the API server (k8s v1.37.2, tests/peers/go.mod) answers: the policy compiles and
type-checks there, gpu-health's writes (the real ``GpuHealthPublisher``) pass on its own node,
and everything else the policy promises to refuse is refused with HTTP 403 Forbidden.

One control plane, one policy install for the whole module (the server admits by a policy only
after its informer has seen it, so the module waits once, bounded, instead of per test).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, ForbiddenError, KubeError, LiveCluster
from gpuchain.kube.port import now_rfc3339
from gpuchain.remediation.admission import POLICY_NAME, VAP_BINDING, trusted_since, verify_writes, written_under_policy
from gpuchain.remediation.model import CONDITION_TYPE, FAULTS_ANNOTATION, PODS_ANNOTATION
from gpuchain.remediation.publisher import GpuHealthPublisher
from peers.apiserver import ApiServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

NS = "gpu-operator"  # the namespace tests/charts renders the release into
AGENT_SA = "gpuchain-gpu-health"
REMEDIATOR_SA = "gpuchain-remediator"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
#: Where the chart's documents are created (kind -> collection path).
COLLECTIONS = {
    "ServiceAccount": f"/api/v1/namespaces/{NS}/serviceaccounts",
    "ClusterRole": f"{RBAC}/clusterroles",
    "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
    "Role": f"{RBAC}/namespaces/{NS}/roles",
    "RoleBinding": f"{RBAC}/namespaces/{NS}/rolebindings",
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings",
}
PRIVATE = ("gpuchain-gpu-health", "gpuchain-remediator", POLICY_NAME)


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.1)


def _apply(apiserver: ApiServer, doc: dict[str, Any]) -> None:
    """Create ``doc``, or replace it when an earlier run of the session left one of that name."""
    collection = COLLECTIONS[doc["kind"]]
    try:
        apiserver.request("POST", collection, doc)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
        path = f"{collection}/{doc['metadata']['name']}"
        doc["metadata"]["resourceVersion"] = apiserver.request("GET", path)["metadata"]["resourceVersion"]
        apiserver.request("PUT", path, doc)


def _node(name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    }


def _pod(name: str, node: str, account: str, namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "ghcr.io/gpuchain/gpuchain:0.1.0"}],
        },
    }


def pod_bound_kubeconfig(apiserver: ApiServer, admin: LiveCluster, account: str, node: str, path: Path) -> Path:
    """A kubeconfig with a token of ``account`` bound to a new pod of it on ``node``, as a node
    agent's pod gets (its claims name the node). The account is made if absent, as the operator
    makes the operands' accounts."""
    apiserver.ensure_service_account(NS, account)
    pod = admin.create(_pod(f"{account.removeprefix('gpuchain-')}-{node}", node, account))
    return apiserver.kubeconfig_for_token(apiserver.service_account_token(NS, account, bound_pod=pod), path)


@dataclass
class World:
    """Nodes gpu-a and gpu-b, the chart's policy and RBAC, and a client per identity."""

    apiserver: ApiServer
    admin: LiveCluster
    agent_token: str
    agent_a: LiveCluster  # gpu-health, token bound to its pod on gpu-a
    unbound_agent: LiveCluster  # gpu-health with a token bound to no pod (no node claim)
    remediator: LiveCluster  # the remediator, token bound to a pod that also runs on gpu-a
    impostor: LiveCluster  # an account named gpuchain-gpu-health in another namespace, on gpu-a

    def node(self, name: str) -> dict[str, Any]:
        return self.admin.get(NODE, name=name)


@pytest.fixture(scope="module")
def world(kube_apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    apiserver = kube_apiserver
    apiserver.reset()
    docs = render({"remediation": {"enabled": True}})
    for doc in docs:
        if doc["kind"] in COLLECTIONS and doc["metadata"]["name"] in PRIVATE:
            _apply(apiserver, doc)
    # The impostor: same account name, another namespace, with the same ClusterRole.
    apiserver.ensure_service_account("gpuchain", AGENT_SA)
    impostor_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "test-gpu-health-impostor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuchain-gpu-health"},
        "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": "gpuchain"}],
    }
    _apply(apiserver, impostor_binding)
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    for name in ("gpu-a", "gpu-b"):
        admin.create(_node(name))
    pods = {
        "agent": admin.create(_pod("gpu-health-a", "gpu-a", AGENT_SA)),
        "remediator": admin.create(_pod("remediator", "gpu-a", REMEDIATOR_SA)),
        "impostor": admin.create(_pod("gpu-health-a", "gpu-a", AGENT_SA, namespace="gpuchain")),
    }
    tmp = tmp_path_factory.mktemp("node-write-policy")

    def client(namespace: str, account: str, pod: dict[str, Any] | None, name: str) -> LiveCluster:
        token = apiserver.service_account_token(namespace, account, bound_pod=pod)
        return client_for(token, name)

    def client_for(token: str, name: str) -> LiveCluster:
        return LiveCluster.from_kubeconfig(str(apiserver.kubeconfig_for_token(token, tmp / f"{name}.kubeconfig")))

    agent_token = apiserver.service_account_token(NS, AGENT_SA, bound_pod=pods["agent"])
    world = World(
        apiserver,
        admin,
        agent_token,
        client_for(agent_token, "agent-a"),
        client(NS, AGENT_SA, None, "unbound"),
        client(NS, REMEDIATOR_SA, pods["remediator"], "remediator"),
        client("gpuchain", AGENT_SA, pods["impostor"], "impostor"),
    )
    try:
        _wait_enforced(world)
        yield world
    finally:
        for c in (world.admin, world.agent_a, world.unbound_agent, world.remediator, world.impostor):
            c.close()
        with contextlib.suppress(urllib.error.HTTPError):
            apiserver.request("DELETE", f"{RBAC}/clusterrolebindings/test-gpu-health-impostor")
        apiserver.reset()


def _refusal(write: Callable[[], object]) -> KubeError | None:
    try:
        write()
    except KubeError as exc:
        return exc
    return None


def _wait_enforced(world: World) -> None:
    """RBAC and the policy reach the server's caches asynchronously: wait (bounded) until both hold."""

    def rbac_synced() -> bool:
        reads = (
            lambda: world.agent_a.get(NODE, name="gpu-a"),
            lambda: world.impostor.get(NODE, name="gpu-a"),
            lambda: world.remediator.list(NODE),
        )
        return all(_refusal(read) is None for read in reads)

    _until(rbac_synced, "the chart's RBAC reaches the authorizer")

    def enforced() -> bool:  # a dry run: admission answers, nothing is written either way
        forged = {"metadata": {"annotations": {FAULTS_ANNOTATION: "[]"}}}
        code, message = _raw_patch(world, world.agent_token, "/api/v1/nodes/gpu-b?dryRun=All", forged)
        return code == 403 and "gpu-health may write only the Node its pod runs on" in message

    _until(enforced, f"ValidatingAdmissionPolicy {POLICY_NAME} is enforced")


def _forbidden(write: Callable[[], object], message: str) -> None:
    """``write`` is refused by the policy: HTTP 403 (reason Forbidden) with the policy's message."""
    err = _refusal(write)
    assert err is not None, "the write was admitted"
    assert isinstance(err, ForbiddenError), f"HTTP {err.code}: {err}"
    assert message in str(err), str(err)


def test_the_server_compiles_and_type_checks_the_chart_policy(world: World) -> None:
    def checked() -> bool:
        policy = world.apiserver.request("GET", f"{ADMISSION}/validatingadmissionpolicies/{POLICY_NAME}")
        return (policy.get("status") or {}).get("observedGeneration") == policy["metadata"]["generation"]

    _until(checked, "the server type-checks the policy")
    policy = world.apiserver.request("GET", f"{ADMISSION}/validatingadmissionpolicies/{POLICY_NAME}")
    assert (policy["status"].get("typeChecking") or {}).get("expressionWarnings") in (None, [])


def test_gpu_health_publishes_on_its_own_node(world: World) -> None:
    """The real publisher, as gpu-health on gpu-a: annotations, GPUHealthy condition, Event."""
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-a")
    gpu = backend.inventory().gpu(3).uuid
    publisher = GpuHealthPublisher(backend, cluster=world.agent_a, node_name="gpu-a", pods=lambda: [], quiet_seconds=0)
    publisher.handle(backend.inject_xid(3, xid=79))
    result = publisher.publish()
    assert result.annotations_written and result.condition_written
    node = world.node("gpu-a")
    assert gpu in node["metadata"]["annotations"][FAULTS_ANNOTATION]
    healthy = next(c for c in node["status"]["conditions"] if c["type"] == CONDITION_TYPE)
    assert healthy["status"] == "False" and "XID 79" in healthy["message"]
    # An unchanged condition is rewritten on its heartbeat (the remediator's trust depends on it).
    publisher.heartbeat_s = 0
    assert publisher.publish().condition_written


def test_gpu_health_may_not_write_another_node(world: World) -> None:
    before = world.node("gpu-b")
    message = "gpu-health may write only the Node its pod runs on, not gpu-b"
    annotate = {"metadata": {"annotations": {FAULTS_ANNOTATION: "[]"}}}
    _forbidden(lambda: world.agent_a.patch(NODE, name="gpu-b", patch=annotate), message)
    _forbidden(
        lambda: world.agent_a.set_condition(NODE, name="gpu-b", condition={"type": CONDITION_TYPE, "status": "False"}),
        message,
    )
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-b")
    publisher = GpuHealthPublisher(backend, cluster=world.agent_a, node_name="gpu-b", pods=lambda: [])
    _forbidden(publisher.publish, message)
    assert world.node("gpu-b") == before


def test_gpu_health_says_why_when_the_cluster_refuses_it(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """Misplaced gpu-health (--node naming another node) keeps running and logs the refusal as one."""
    backend = SimBackend.from_preset("h100-80gb-x8", node="gpu-b")
    publisher = GpuHealthPublisher(backend, cluster=world.agent_a, node_name="gpu-b", pods=lambda: [])

    async def one_pass() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(publisher.run(stop, resync=30))
        while not caplog.records:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 10)

    with caplog.at_level(logging.ERROR, logger="gpuchain.remediation.publisher"):
        asyncio.run(asyncio.wait_for(one_pass(), 20))
    for record in caplog.records:  # one per pass (the event stream's subscription wakes a second)
        assert "the cluster refuses gpu-health's writes to node gpu-b" in record.getMessage()
        assert "gpu-health may write only the Node its pod runs on, not gpu-b" in record.getMessage()


def test_gpu_health_needs_a_token_bound_to_a_pod_on_the_node(world: World) -> None:
    write = {"metadata": {"annotations": {PODS_ANNOTATION: "{}"}}}
    _forbidden(lambda: world.unbound_agent.patch(NODE, name="gpu-a", patch=write), "gpu-health's token names no node")


#: What gpu-health must not change on its own Node: (subresource, merge patch).
EDITS: dict[str, tuple[str, dict[str, Any]]] = {
    "label": ("", {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "false"}}}),
    "other annotation": ("", {"metadata": {"annotations": {"gpuchain.io/cordoned-by": "gpu-health"}}}),
    "removed annotation": ("", {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": None}}}),
    "finalizer": ("", {"metadata": {"finalizers": ["example.com/keep"]}}),
    "owner": ("", {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "0"}]}}),
    "taint": ("", {"spec": {"taints": [{"key": "gpuchain.io/gpu-reset-required", "effect": "NoSchedule"}]}}),
    "cordon": ("", {"spec": {"unschedulable": True}}),
    "Ready condition": ("status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    "allocatable": ("status", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}}),
    "address": ("status", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}}),
    # The status subresource of a Node lets metadata through (only spec is reset there).
    "label through status": ("status", {"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}}),
    "annotation through status": ("status", {"metadata": {"annotations": {"example.com/x": "y"}}}),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_gpu_health_may_change_nothing_else_on_its_node(world: World, what: str) -> None:
    sub, body = EDITS[what]
    before = world.node("gpu-a")
    only = "on its Node gpu-health may change only the gpuchain.io/gpu-faults, gpu-pods"
    if sub == "status":  # the port's status patch sends only status; say the whole document raw
        code, message = _raw_patch(world, world.agent_token, "/api/v1/nodes/gpu-a/status", body)
        assert (code, only in message) == (403, True), (code, message)
    else:
        _forbidden(lambda: world.agent_a.patch(NODE, name="gpu-a", patch=body), only)
    assert world.node("gpu-a") == before


def _raw_patch(world: World, token: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A merge patch of ``path`` sent with ``token``: (HTTP status, the Status message)."""
    req = urllib.request.Request(f"{world.apiserver.url}{path}", data=json.dumps(body).encode(), method="PATCH")
    req.add_header("Content-Type", "application/merge-patch+json")
    req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(world.apiserver.ca))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, str(json.loads(exc.read() or b"{}").get("message", ""))


@pytest.mark.parametrize("who", ["admin", "remediator", "impostor"])
def test_nobody_else_may_write_gpu_health(world: World, who: str) -> None:
    writer: LiveCluster = getattr(world, who)
    before = world.node("gpu-a")
    forged = {"metadata": {"annotations": {FAULTS_ANNOTATION: '[{"uuid": "GPU-forged"}]'}}}
    _forbidden(lambda: writer.patch(NODE, name="gpu-a", patch=forged), "only gpuchain's gpu-health agent")
    condition = {"type": CONDITION_TYPE, "status": "False", "reason": "Forged", "message": "forged"}
    err = _refusal(lambda: writer.set_condition(NODE, name="gpu-a", condition=condition))
    assert err is not None and err.code == 403, err
    assert world.node("gpu-a") == before


def test_everyone_else_keeps_their_writes(world: World) -> None:
    """The remediator taints and cordons; an admin labels, annotates and sets other conditions."""
    taint = {"key": "gpuchain.io/gpu-reset-required", "effect": "NoSchedule"}
    world.remediator.patch(NODE, name="gpu-a", patch={"spec": {"taints": [taint]}})
    world.remediator.patch(
        NODE, name="gpu-a", patch={"metadata": {"annotations": {"gpuchain.io/cordoned-by": "remediator"}}}
    )
    world.admin.patch(NODE, name="gpu-a", patch={"metadata": {"labels": {"example.com/rack": "r1"}}})
    world.admin.set_condition(
        NODE, name="gpu-a", condition={"type": "Ready", "status": "True", "reason": "KubeletReady"}
    )
    node = world.node("gpu-a")
    assert node["spec"]["taints"] == [taint]
    assert node["metadata"]["annotations"]["gpuchain.io/cordoned-by"] == "remediator"
    assert node["metadata"]["labels"]["example.com/rack"] == "r1"
    world.admin.patch(
        NODE, name="gpu-a", patch={"spec": {"taints": None}, "metadata": {"labels": {"example.com/rack": None}}}
    )


def test_an_admin_clears_gpu_health_only_by_lifting_the_binding(world: World) -> None:
    """What the chart leaves to a cluster admin: GPU health is no admin's to edit while the policy is
    bound; an admin may delete and re-create the binding, after which the remediator trusts only
    what gpu-health writes again (admission.verify_writes / written_under_policy on the server's
    own objects)."""
    healthy = {"type": CONDITION_TYPE, "status": "False", "reason": "GPUXidError", "message": "XID 79"}
    world.agent_a.set_condition(NODE, name="gpu-a", condition={**healthy, "lastHeartbeatTime": "2020-01-01T00:00:00Z"})
    others = [c for c in world.node("gpu-a")["status"]["conditions"] if c["type"] != CONDITION_TYPE]
    clear = {"conditions": others}
    _forbidden(lambda: world.admin.patch_status(NODE, name="gpu-a", status=clear), "only gpuchain's gpu-health agent")

    binding_path = f"{ADMISSION}/validatingadmissionpolicybindings/{POLICY_NAME}"
    world.apiserver.request("DELETE", binding_path)
    _until(
        lambda: _refusal(lambda: world.admin.patch_status(NODE, name="gpu-a", status=clear)) is None,
        "the binding is lifted",
    )
    assert all(c["type"] != CONDITION_TYPE for c in world.node("gpu-a")["status"]["conditions"])
    _apply(
        world.apiserver,
        next(
            d
            for d in render({"remediation": {"enabled": True}})
            if d["kind"] == VAP_BINDING.kind and d["metadata"]["name"] == POLICY_NAME
        ),
    )
    _wait_enforced(world)

    policy = world.apiserver.request("GET", f"{ADMISSION}/validatingadmissionpolicies/{POLICY_NAME}")
    binding = world.apiserver.request("GET", binding_path)
    assert verify_writes(policy, binding) is None
    world.agent_a.set_condition(NODE, name="gpu-a", condition={**healthy, "lastHeartbeatTime": now_rfc3339()})
    assert written_under_policy(world.node("gpu-a"), since=trusted_since(binding))


def test_gpu_health_runs_the_repair_loop_and_lifts_only_its_startup_taint(world: World) -> None:
    """What issue 18 added to the policy, on the server: repair-loop annotations and conditions, and
    the readiness gate removing its own startup taint (and no other)."""
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    gate = {"key": "gpuchain.io/gpu-not-ready", "effect": "NoSchedule"}
    world.admin.patch(NODE, name="gpu-a", patch={"spec": {"taints": [other, gate]}})
    only = "on its Node gpu-health may change only"
    _forbidden(lambda: world.agent_a.patch(NODE, name="gpu-a", patch={"spec": {"taints": [gate]}}), only)
    world.agent_a.patch(NODE, name="gpu-a", patch={"spec": {"taints": [other]}})
    loop = {"gpuchain.io/gpu-loop": "{}", "gpuchain.io/reboot-requested": "x"}
    world.agent_a.patch(NODE, name="gpu-a", patch={"metadata": {"annotations": loop}})
    world.agent_a.set_condition(
        NODE, name="gpu-a", condition={"type": "GPUReady", "status": "True", "reason": "BurnInPassed"}
    )
    forged = {"metadata": {"annotations": {"gpuchain.io/reboot-requested": "please"}}}
    _forbidden(lambda: world.remediator.patch(NODE, name="gpu-a", patch=forged), "only gpuchain's gpu-health agent")
    node = world.node("gpu-a")
    assert node["spec"]["taints"] == [other] and node["metadata"]["annotations"]["gpuchain.io/reboot-requested"] == "x"
    world.admin.patch(NODE, name="gpu-a", patch={"spec": {"taints": None}})
