"""Node agents confined to their own node on the real API server (issue 24 item 4, issue 25 item 3).

RBAC cannot name "the node I run on": GFD and the MIG manager are granted patch on every Node,
the DRA plugin create/patch on every ResourceSlice, the MIG manager (``migManagerEviction``)
evictions of any pod. With its pod-bound token GFD could label, cordon and NoExecute-taint any
node, the DRA plugin publish devices for another node and the MIG manager evict any pod. The
chart's ValidatingAdmissionPolicies gpuchain-node-agent-writes (Nodes, ResourceSlices, pod
deletes) and gpuchain-node-agent-evictions tie each write to the node claim of the pod-bound token
(``authentication.kubernetes.io/node-name``). Here the chart's RBAC and policies are created on
the real kube-apiserver (v1.37.2) and each agent writes with a token bound to its pod on gpu-a:
its own node's labels, slices and pods pass, another node's and a taint are refused.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuchain.dra.kinds import RESOURCE_SLICE as SLICE
from gpuchain.kube import NODE, POD, ForbiddenError, LiveCluster, NotFoundError
from peers.apiserver import ApiServer
from peers.test_node_write_policy import COLLECTIONS, NS, _apply, _node, _pod, _refusal, _until, pod_bound_kubeconfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

POLICY = "gpuchain-node-agent-writes"
EVICTIONS = "gpuchain-node-agent-evictions"
AGENTS = (
    "gpuchain-gpu-feature-discovery",
    "gpuchain-mig-manager",
    "gpuchain-dra-plugin",
    "gpuchain-device-plugin",
    "gpuchain-operator-validator",
    "gpuchain-node-agent",  # the node agent layout's one account (values nodeAgent.enabled, the default)
)
#: The accounts that label their node: GFD's, the MIG manager's and the node agent's (serving both).
LABELLERS = ("gpuchain-gpu-feature-discovery", "gpuchain-mig-manager", "gpuchain-node-agent")
REFUSAL = "may write only the node its pod runs on"


@dataclass
class World:
    admin: LiveCluster
    agents: dict[str, LiveCluster]  # each agent, token bound to its pod on gpu-a


def _slice(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.gpuchain.io"},
        "spec": {"driver": "gpu.gpuchain.io", "nodeName": node, "pool": {"name": node, "resourceSliceCount": 1}},
    }


@pytest.fixture(scope="module")
def world(kube_apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    apiserver = kube_apiserver
    apiserver.reset()
    apiserver.ensure_namespace(NS)
    # with the eviction grant the chart gives only on request (migManagerEviction), to pin what it allows
    # both layouts' accounts: each separate agent's and the node agent's (the policies are the same in both)
    values = {"dra": {"enabled": True}, "migManagerEviction": True}
    docs = {
        (d["kind"], d["metadata"]["name"]): d
        for d in (*render({**values, "nodeAgent": {"enabled": False}}), *render(values))
    }
    for (kind, name), doc in docs.items():
        if kind in COLLECTIONS and name in (*AGENTS, POLICY, EVICTIONS):
            _apply(apiserver, doc)
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    for name in ("gpu-a", "gpu-b"):
        admin.create(_node(name))
    tmp = tmp_path_factory.mktemp("node-agent-policy")
    agents = {}
    for account in AGENTS:
        kubeconfig = pod_bound_kubeconfig(apiserver, admin, account, "gpu-a", tmp / account)
        agents[account] = LiveCluster.from_kubeconfig(str(kubeconfig))
    world = World(admin, agents)
    try:
        gfd = agents[AGENTS[0]]
        probe = {"metadata": {"labels": {"probe": "x"}}}
        _until(lambda: _refusal(lambda: gfd.get(NODE, name="gpu-a")) is None, "the chart's RBAC reaches the authorizer")
        _until(
            lambda: isinstance(_refusal(lambda: gfd.patch(NODE, name="gpu-b", patch=probe)), ForbiddenError),
            f"ValidatingAdmissionPolicy {POLICY} is enforced",
        )
        evictions_judged(world.agents["gpuchain-mig-manager"], admin)
        yield world
    finally:
        for c in (admin, *agents.values()):
            c.close()
        apiserver.reset()


def evictions_judged(mig: LiveCluster, admin: LiveCluster) -> None:
    """Wait until gpuchain-node-agent-evictions refuses the MIG manager (token bound to gpu-a) the
    eviction of a pod created now on gpu-b. The policy finds pods in the server's own informer,
    which sees them in the order they were written: once it judges this one, it has every pod
    created before (a pod it has not seen yet is not judged, so a test that expects a refusal
    waits here first). A fresh pod each try: one evicted before the informer had it is gone."""
    _until(
        lambda: "may evict only pods" in str(_refusal(lambda: mig.evict(_user_pod(admin, "gpu-b"), NS))),
        f"{EVICTIONS} judges the pods created so far",
    )


def _forbidden(write: Callable[[], object]) -> None:
    err = _refusal(write)
    assert isinstance(err, ForbiddenError), f"admitted or not refused by the policy: {err}"
    assert REFUSAL in str(err), str(err)


@pytest.mark.parametrize("account", LABELLERS)
def test_a_node_agent_labels_its_own_node_only(world: World, account: str) -> None:
    agent = world.agents[account]
    agent.patch(NODE, name="gpu-a", patch={"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}})
    assert world.admin.get(NODE, name="gpu-a")["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    _forbidden(lambda: agent.patch(NODE, name="gpu-b", patch={"metadata": {"labels": {"nvidia.com/gpu.count": "0"}}}))
    assert "nvidia.com/gpu.count" not in world.admin.get(NODE, name="gpu-b")["metadata"]["labels"]


@pytest.mark.parametrize("account", LABELLERS)
@pytest.mark.parametrize(
    "spec",
    [{"unschedulable": True}, {"taints": [{"key": "evil", "effect": "NoExecute"}]}],
    ids=["cordon", "taint"],
)
def test_a_node_agent_may_not_cordon_or_taint_even_its_own_node(world: World, account: str, spec: dict) -> None:
    _forbidden(lambda: world.agents[account].patch(NODE, name="gpu-a", patch={"spec": spec}))


def test_the_dra_plugin_publishes_slices_for_its_own_node_only(world: World) -> None:
    dra = world.agents["gpuchain-dra-plugin"]
    dra.create(_slice("gpu-a"))
    _forbidden(lambda: dra.create(_slice("gpu-b")))
    with pytest.raises(NotFoundError):
        world.admin.get(SLICE, name="gpu-b-gpu.gpuchain.io")


def _probe_policy(name: str, resource: str, operation: str, expression: str, message: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its Deny binding, for one resource and operation."""
    admission = "admissionregistration.k8s.io/v1"
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": [resource], "operations": [operation]}
    return [
        {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": message}],
            },
        },
        {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


def _remove(apiserver: ApiServer, docs: list[dict[str, Any]]) -> None:
    for doc in reversed(docs):
        with contextlib.suppress(urllib.error.HTTPError):
            apiserver.request("DELETE", f"{COLLECTIONS[doc['kind']]}/{doc['metadata']['name']}")


def _user_pod(admin: LiveCluster, node: str) -> str:
    """A fresh pod bound to ``node`` (a new name each time: a deleted pod cannot be asked about again)."""
    name = f"user-{node}-{next(_serial)}"
    admin.create(_pod(name, node, "default"))
    return name


_serial = itertools.count()


def test_the_mig_manager_evicts_pods_of_its_own_node_only(world: World) -> None:
    """Issue 25 item 3: with its pod-bound token the MIG manager (--evict) evicted any pod in the
    cluster. The chart's gpuchain-node-agent-evictions policy looks the pod up (as its parameter)
    and compares its node with the token's."""
    mig = world.agents["gpuchain-mig-manager"]
    own = _user_pod(world.admin, "gpu-a")
    mig.evict(own, NS)
    assert isinstance(_refusal(lambda: world.admin.get(POD, name=own, namespace=NS)), NotFoundError)
    other = _user_pod(world.admin, "gpu-b")
    evictions_judged(mig, world.admin)
    err = _refusal(lambda: mig.evict(other, NS))
    assert isinstance(err, ForbiddenError), f"admitted or not refused by the policy: {err!r}"
    assert (
        f"may evict only pods of the node its pod runs on (token bound to gpu-a, evicting {NS}/{other} on gpu-b)"
        in str(err)
    )
    assert world.admin.get(POD, name=other, namespace=NS)["spec"]["nodeName"] == "gpu-b"

    # an unscheduled pod is no node's: refused too (a fresh one each try: one evicted before the
    # policy's informer had it is gone)
    def pending() -> str:
        pod = _pod(f"pending-{next(_serial)}", "gpu-a", "default")
        del pod["spec"]["nodeName"]
        return str(world.admin.create(pod)["metadata"]["name"])

    _until(
        lambda: "on no node)" in str(_refusal(lambda: mig.evict(pending(), NS))),
        "an unscheduled pod's eviction is refused",
    )


@pytest.fixture
def pod_deletes(world: World, kube_apiserver: ApiServer) -> Iterator[None]:
    """Grant every node agent pod deletes (no chart role does), so that what refuses a delete one
    node over is the policy, not RBAC."""
    grant = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "test-node-agents-delete-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "test-node-agents-delete-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "test-node-agents-delete-pods",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS} for account in AGENTS],
        },
    ]
    for doc in grant:
        _apply(kube_apiserver, doc)
    mig = world.agents["gpuchain-mig-manager"]
    _until(
        lambda: isinstance(_refusal(lambda: mig.delete(POD, name="absent", namespace=NS)), NotFoundError),
        "the grant is in force",
    )
    try:
        yield
    finally:
        _remove(kube_apiserver, grant)


@pytest.mark.usefixtures("pod_deletes")
@pytest.mark.parametrize("account", AGENTS)
def test_a_node_agent_deletes_pods_of_its_own_node_only(world: World, account: str) -> None:
    agent = world.agents[account]
    own = _user_pod(world.admin, "gpu-a")
    agent.delete(POD, name=own, namespace=NS)
    other = _user_pod(world.admin, "gpu-b")
    _forbidden(lambda: agent.delete(POD, name=other, namespace=NS))
    assert world.admin.get(POD, name=other, namespace=NS)["spec"]["nodeName"] == "gpu-b"


@pytest.mark.usefixtures("pod_deletes")
def test_an_eviction_escapes_pod_rules_so_the_policy_looks_the_pod_up(world: World, kube_apiserver: ApiServer) -> None:
    """Why gpuchain-node-agent-evictions takes the pod as its parameter, pinned on the real server:
    a policy on ``pods/eviction`` sees the Eviction and no pod (``oldObject`` is null, so no
    ``spec.nodeName`` to compare with the token's node), and the pod delete an eviction makes runs
    no validating admission: with that policy unbound, the MIG manager evicts a pod one node over
    that the pod-delete rule of gpuchain-node-agent-writes refuses it to delete."""
    mig = world.agents["gpuchain-mig-manager"]
    sees = _probe_policy(
        "probe-eviction-sees",
        "pods/eviction",
        "CREATE",
        "!(object.kind == 'Eviction' && oldObject == null)",
        "an eviction policy sees the Eviction and no pod",
    )
    binding = f"{COLLECTIONS['ValidatingAdmissionPolicyBinding']}/{EVICTIONS}"
    saved = kube_apiserver.request("GET", binding)
    try:
        kube_apiserver.request("DELETE", binding)
        for doc in sees:
            _apply(kube_apiserver, doc)
        # admission runs before the pod is looked up: no pod is needed to see what it sees
        _until(
            lambda: "sees the Eviction and no pod" in str(_refusal(lambda: mig.evict("absent", NS))),
            "the eviction probe is enforced",
        )
        _remove(kube_apiserver, sees)
        _until(lambda: isinstance(_refusal(lambda: mig.evict("absent", NS)), NotFoundError), "the probe is gone")
        victim = _user_pod(world.admin, "gpu-b")
        _forbidden(lambda: mig.delete(POD, name=victim, namespace=NS))
        err = _refusal(lambda: mig.evict(victim, NS))
        assert err is None, f"the eviction was refused: {err!r}"
        assert isinstance(_refusal(lambda: world.admin.get(POD, name=victim, namespace=NS)), NotFoundError)
    finally:
        _remove(kube_apiserver, sees)
        saved["metadata"] = {"name": EVICTIONS, "labels": saved["metadata"].get("labels", {})}
        _apply(kube_apiserver, saved)
        evictions_judged(mig, world.admin)
