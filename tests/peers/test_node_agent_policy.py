"""Node agents confined to their own node on the real API server (issue 24 item 4).

RBAC cannot name "the node I run on": GFD and the MIG manager are granted patch on every Node,
the DRA plugin create/patch on every ResourceSlice. With its pod-bound token GFD could label,
cordon and NoExecute-taint any node, and the DRA plugin publish devices for another node. The
chart's ValidatingAdmissionPolicy gpuchain-node-agent-writes ties each write to the node claim
of the pod-bound token (``authentication.kubernetes.io/node-name``). Here the chart's RBAC and
policy are created on the real kube-apiserver (v1.34.4) and each agent writes with a token bound
to its pod on gpu-a: its own node's labels and slices pass, another node and a taint are refused.
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
from peers.test_node_write_policy import COLLECTIONS, NS, _apply, _node, _pod, _refusal, _until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

POLICY = "gpuchain-node-agent-writes"
AGENTS = (
    "gpuchain-gpu-feature-discovery",
    "gpuchain-mig-manager",
    "gpuchain-dra-plugin",
    "gpuchain-device-plugin",
    "gpuchain-operator-validator",
)
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
    for doc in render({"dra": {"enabled": True}, "migManagerEviction": True}):
        if doc["kind"] in COLLECTIONS and doc["metadata"]["name"] in (*AGENTS, POLICY):
            _apply(apiserver, doc)
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    for name in ("gpu-a", "gpu-b"):
        admin.create(_node(name))
    tmp = tmp_path_factory.mktemp("node-agent-policy")
    agents = {}
    for account in AGENTS:
        apiserver.ensure_service_account(NS, account)  # the operator makes the operands' accounts
        pod = admin.create(_pod(account.removeprefix("gpuchain-"), "gpu-a", account))
        token = apiserver.service_account_token(NS, account, bound_pod=pod)
        agents[account] = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig_for_token(token, tmp / account)))
    world = World(admin, agents)
    try:
        gfd = agents[AGENTS[0]]
        probe = {"metadata": {"labels": {"probe": "x"}}}
        _until(lambda: _refusal(lambda: gfd.get(NODE, "gpu-a")) is None, "the chart's RBAC reaches the authorizer")
        _until(
            lambda: isinstance(_refusal(lambda: gfd.patch(NODE, "gpu-b", probe)), ForbiddenError),
            f"ValidatingAdmissionPolicy {POLICY} is enforced",
        )
        yield world
    finally:
        for c in (admin, *agents.values()):
            c.close()
        apiserver.reset()


def _forbidden(write: Callable[[], object]) -> None:
    err = _refusal(write)
    assert isinstance(err, ForbiddenError), f"admitted or not refused by the policy: {err}"
    assert REFUSAL in str(err), str(err)


@pytest.mark.parametrize("account", AGENTS[:2])
def test_a_node_agent_labels_its_own_node_only(world: World, account: str) -> None:
    agent = world.agents[account]
    agent.patch(NODE, "gpu-a", {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}})
    assert world.admin.get(NODE, "gpu-a")["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    _forbidden(lambda: agent.patch(NODE, "gpu-b", {"metadata": {"labels": {"nvidia.com/gpu.count": "0"}}}))
    assert "nvidia.com/gpu.count" not in world.admin.get(NODE, "gpu-b")["metadata"]["labels"]


@pytest.mark.parametrize("account", AGENTS[:2])
@pytest.mark.parametrize(
    "spec",
    [{"unschedulable": True}, {"taints": [{"key": "evil", "effect": "NoExecute"}]}],
    ids=["cordon", "taint"],
)
def test_a_node_agent_may_not_cordon_or_taint_even_its_own_node(world: World, account: str, spec: dict) -> None:
    _forbidden(lambda: world.agents[account].patch(NODE, "gpu-a", {"spec": spec}))


def test_the_dra_plugin_publishes_slices_for_its_own_node_only(world: World) -> None:
    dra = world.agents["gpuchain-dra-plugin"]
    dra.create(_slice("gpu-a"))
    _forbidden(lambda: dra.create(_slice("gpu-b")))
    with pytest.raises(NotFoundError):
        world.admin.get(SLICE, "gpu-b-gpu.gpuchain.io")


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


def test_an_eviction_cannot_be_confined_to_the_agents_node_by_admission_policy(
    world: World, kube_apiserver: ApiServer
) -> None:
    """Why the MIG manager's evictions are not confined (issue 25 item 3), pinned on the real server.

    A policy on ``pods/eviction`` sees the Eviction and no pod (so no ``spec.nodeName`` to compare
    with the token's node), and the pod delete an eviction makes runs no validating admission (a
    policy refusing every pod DELETE does not stop it). Confining evictions needs a component
    that looks the pod up: an admission webhook, or evictions made centrally on a node agent's
    request written to its own Node (which the node-write policy already confines). So the chart
    grants the MIG manager evictions only with ``migManagerEviction: true`` (for ``--evict``)."""
    mig = world.agents["gpuchain-mig-manager"]
    probes = itertools.count()

    def delete_refused() -> bool:
        """Whether the admin's delete of a fresh pod is refused by the delete probe (a pod once
        deleted cannot be asked again: a second DELETE is NotFound before admission runs)."""
        name = f"probe-{next(probes)}"
        world.admin.create(_pod(name, "gpu-b", "default"))
        return "every pod DELETE is refused" in str(_refusal(lambda: world.admin.delete(POD, name, NS)))

    sees = _probe_policy(
        "probe-eviction-sees",
        "pods/eviction",
        "CREATE",
        "!(object.kind == 'Eviction' && oldObject == null)",
        "an eviction policy sees the Eviction and no pod",
    )
    blind = _probe_policy("probe-pod-delete", "pods", "DELETE", "false", "every pod DELETE is refused")
    try:
        for doc in sees:
            _apply(kube_apiserver, doc)
        # admission runs before the pod is looked up: no pod user-b is needed to see what it sees
        _until(
            lambda: "sees the Eviction and no pod" in str(_refusal(lambda: mig.evict("user-b", NS))),
            "the eviction probe is enforced",
        )
        _remove(kube_apiserver, sees)
        for doc in blind:
            _apply(kube_apiserver, doc)
        _until(delete_refused, "the delete probe is enforced")
        world.admin.create(_pod("user-d", "gpu-b", "default"))
        err = _refusal(lambda: mig.evict("user-d", NS))
        assert err is None, f"the eviction was refused: {err!r}"
        # the pod another node's agent evicted is gone (grace 0), the delete probe notwithstanding
        assert isinstance(_refusal(lambda: world.admin.get(POD, "user-d", NS)), NotFoundError)
    finally:
        _remove(kube_apiserver, sees + blind)
        _until(lambda: not delete_refused(), "the delete probe is gone")


def _remove(apiserver: ApiServer, docs: list[dict[str, Any]]) -> None:
    for doc in reversed(docs):
        with contextlib.suppress(urllib.error.HTTPError):
            apiserver.request("DELETE", f"{COLLECTIONS[doc['kind']]}/{doc['metadata']['name']}")


def test_the_device_plugin_reads_its_node_and_records_events_only(world: World) -> None:
    """deviceplugin/nodeconfig.py: get and watch its Node's config label, a Warning Event on a bad
    config; nothing else (issue 24 item 3)."""
    plugin = world.agents["gpuchain-device-plugin"]
    node = plugin.get(NODE, "gpu-a")
    plugin.record_event(node, "ConfigInvalid", "probe", type="Warning", component="gpuchain-device-plugin")
    for beyond in (
        lambda: plugin.patch(NODE, "gpu-a", {"metadata": {"labels": {"probe": "x"}}}),
        lambda: plugin.list(POD, NS),
        lambda: plugin.evict("anything", NS),
    ):
        assert isinstance(_refusal(beyond), ForbiddenError)


def test_the_validator_reads_its_node_only(world: World) -> None:
    """validator/checks.py: the plugin validation gets its Node's allocatable; nothing else."""
    validator = world.agents["gpuchain-operator-validator"]
    assert validator.get(NODE, "gpu-a")["metadata"]["name"] == "gpu-a"
    for beyond in (
        lambda: validator.patch(NODE, "gpu-a", {"metadata": {"labels": {"probe": "x"}}}),
        lambda: validator.list(POD, NS),
        lambda: validator.record_event(world.admin.get(NODE, "gpu-a"), "Probe", "probe"),
    ):
        assert isinstance(_refusal(beyond), ForbiddenError)
