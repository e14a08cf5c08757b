"""The operator's chart role on the real API server, with the operator's own token (issue 24 item 3).

The chart's RBAC is created as rendered; the operator's code then does its whole job with a token
of its ServiceAccount (``gpuchain-operator``): the roll-out of every operand, its status, a resync
that changes nothing, and a driver upgrade carried node by node through NVIDIA's state machine
(cordon, evict the GPU workload, restart the driver pod, validate, uncordon). The kube-controller-
manager of the test control plane runs no DaemonSet controller and no kubelet runs here, so the test
plays their part for the driver: a pod from the DaemonSet's template on each GPU node, its Ready
status, finishing a graceful deletion.

What the reconcile asked of the server is what the role grants it (nothing refused, nothing
granted that no code path uses but kopf's watches, which ``gpuchain operator run`` makes and the
second test shows are allowed too), and one step beyond its job is refused.
"""

from __future__ import annotations

import contextlib
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.cluster_policy import cluster_policy

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, NODE, POD, ForbiddenError, LiveCluster, NotFoundError
from gpuchain.kube.kinds import RUNTIME_CLASS, SERVICE, SERVICE_ACCOUNT
from gpuchain.operator.operands import DRIVER, EXPORTER_SERVICE, MANAGED_SELECTOR, OPERANDS
from gpuchain.operator.reconcile import reconcile
from gpuchain.operator.upgrade import DONE, STATE_LABEL
from peers.apiserver import ApiServer
from peers.audit import AuditLog
from peers.operator_run import operator_run
from peers.test_agent_roles import Recording, _gpu_pod, _grants
from peers.test_clusterpolicy_names import NVIDIA_CRD, NVIDIA_SAMPLE, _install
from peers.test_kube_apiserver import gpu_node, install_crd
from peers.test_node_write_policy import COLLECTIONS, NS, _apply, _refusal, _until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

ACCOUNT = "gpuchain-operator"
GPU_NODES = ("gpu-a", "gpu-b")
#: kopf's own requests (`gpuchain operator run`): it watches ClusterPolicies, DaemonSets and Nodes
#: (operator/runtime.py's handlers), and lists and watches CRDs to find its resources (its
#: scanning). The reconcile makes none of these; the second test shows the role allows them.
KOPF_ONLY = {
    ("watch", "gpuchain.io", "clusterpolicies"),
    ("watch", "apps", "daemonsets"),
    ("watch", "", "nodes"),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions"),
    ("watch", "apiextensions.k8s.io", "customresourcedefinitions"),
}


@dataclass
class World:
    apiserver: ApiServer
    admin: LiveCluster
    kubeconfig: Path  # the operator's token
    grants: set[tuple[str, str, str]]


@pytest.fixture(scope="module")
def world(kube_apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    apiserver = kube_apiserver
    apiserver.reset()
    docs = render({})
    for doc in docs:
        if doc["kind"] in COLLECTIONS:
            _apply(apiserver, doc)
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        install_crd(admin)
        for name in GPU_NODES:
            admin.create(gpu_node(name))
        token = apiserver.service_account_token(NS, ACCOUNT)
        kubeconfig = apiserver.kubeconfig_for_token(token, tmp_path_factory.mktemp("operator-role") / "kubeconfig")
        world = World(apiserver, admin, kubeconfig, _grants(docs)[ACCOUNT])
        probe = LiveCluster.from_kubeconfig(str(kubeconfig))
        try:
            _until(lambda: _refusal(lambda: probe.list(NODE)) is None, "the chart's RBAC reaches the authorizer")
        finally:
            probe.close()
        yield world
    finally:
        admin.close()
        apiserver.reset()


def _play_node(world: World) -> None:
    """What the DaemonSet controller and a kubelet would do for the driver here (the test control
    plane runs neither): a driver pod from the DaemonSet's current template on each GPU node that
    has none, each reported Running and Ready, and a graceful deletion (the driver restart)
    finished."""
    for pod in _driver_pods(world.admin):
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(urllib.error.HTTPError):  # gone meanwhile
                world.apiserver.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", {"gracePeriodSeconds": 0})
        elif pod.get("status", {}).get("phase") != "Running":
            statuses = [
                {"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"], "imageID": "",
                 "state": {"running": {}}}
                for c in pod["spec"]["containers"]
            ]  # fmt: skip
            ready = [{"type": "Ready", "status": "True"}]
            world.admin.patch_status(
                POD,
                name=name,
                status={"phase": "Running", "conditions": ready, "containerStatuses": statuses},
                namespace=NS,
            )
    placed = {p["spec"]["nodeName"] for p in _driver_pods(world.admin)}
    template = world.admin.get(DAEMONSET, name=DRIVER.name, namespace=NS)["spec"]["template"]
    for node in sorted(set(GPU_NODES) - placed):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "generateName": f"{DRIVER.name}-", "namespace": NS},
            "spec": {**template["spec"], "nodeName": node, "terminationGracePeriodSeconds": 0},
        }
        pod["spec"].pop("affinity", None)
        world.admin.create(pod)


def _driver_pods(admin: LiveCluster) -> list[dict[str, Any]]:
    return [
        p
        for p in admin.list(POD, namespace=NS, label_selector=MANAGED_SELECTOR)
        if p["metadata"]["labels"].get("app") == DRIVER.name
    ]


def test_the_operator_rolls_out_resyncs_and_upgrades_the_driver_with_its_own_role(world: World) -> None:
    admin = world.admin
    operator = Recording.from_kubeconfig(str(world.kubeconfig))
    assert isinstance(operator, Recording)
    try:
        # The device plugin's config from a ConfigMap, which the operator reads (for sharing.mps).
        admin.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plugin-configs", "namespace": NS},
             "data": {"default": "version: v1\n"}}
        )  # fmt: skip
        plugin_config = {
            "devicePlugin": {"config": {"name": "plugin-configs", "default": "default"}},
            "nodeAgent": {"enabled": False},  # one DaemonSet per operand, each pruned on its own below
        }
        admin.create(cluster_policy("cluster-policy", plugin_config))
        first = reconcile(operator, name="cluster-policy", namespace=NS)
        assert len(admin.list(DAEMONSET, namespace=NS)) == len(OPERANDS), first
        assert "clusterpolicy/cluster-policy/status" in first.changed
        assert reconcile(operator, name="cluster-policy", namespace=NS).changed == []

        # A Ready driver pod on each GPU node, from the DaemonSet (the test plays its controller and the kubelet).
        for _ in range(2):
            _play_node(world)
        assert len(_driver_pods(admin)) == len(GPU_NODES)
        admin.create(_gpu_pod("ml", "train", "gpu-a"))

        # A new driver version: the DaemonSet (OnDelete) changes, and each pass moves each node one step.
        admin.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"driver": {"version": "580.95.05"}}})
        deadline = time.monotonic() + 90
        while not all(
            admin.get(NODE, name=n)["metadata"].get("labels", {}).get(STATE_LABEL) == DONE for n in GPU_NODES
        ):
            assert time.monotonic() < deadline, [admin.get(NODE, name=n)["metadata"].get("labels") for n in GPU_NODES]
            reconcile(operator, name="cluster-policy", namespace=NS)
            _play_node(world)
            time.sleep(0.2)
        with pytest.raises(NotFoundError):
            admin.get(POD, name="train", namespace="ml")
        assert all(not admin.get(NODE, name=n).get("spec", {}).get("unschedulable") for n in GPU_NODES)
        assert {p["spec"]["containers"][0]["image"].rsplit(":", 1)[-1].split("-")[0] for p in _driver_pods(admin)} == {
            "580.95.05"
        }

        # Someone edits what the operator owns: it puts each back (a patch), then nothing.
        drift = {"metadata": {"labels": {"app.kubernetes.io/part-of": "someone-else"}}}
        admin.patch(SERVICE_ACCOUNT, name="gpuchain-device-plugin", patch=drift, namespace=NS)
        admin.patch(SERVICE, name=EXPORTER_SERVICE, patch=drift, namespace=NS)
        admin.patch(RUNTIME_CLASS, name="nvidia", patch=drift)
        mended = reconcile(operator, name="cluster-policy", namespace=NS).changed
        assert {"serviceaccount/gpuchain-device-plugin", f"service/{EXPORTER_SERVICE}", "runtimeclass/nvidia"} <= set(
            mended
        ), mended
        # The exporter switched off: its DaemonSet and Service go.
        admin.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": False}}})
        pruned = reconcile(operator, name="cluster-policy", namespace=NS).changed
        assert {"daemonset/nvidia-dcgm-exporter (deleted)", f"service/{EXPORTER_SERVICE} (deleted)"} <= set(pruned)
        # NVIDIA's ClusterPolicy left behind with no NVIDIA operator running: looked at, and gpuchain goes on.
        _install(admin, NVIDIA_CRD)
        nvidia = yaml.safe_load(NVIDIA_SAMPLE.read_text())
        nvidia["metadata"] = {"name": "cluster-policy"}
        world.apiserver.request("POST", "/apis/nvidia.com/v1/clusterpolicies", nvidia)
        assert reconcile(operator, name="cluster-policy", namespace=NS).state != "standingAside"

        assert operator.refused == [], operator.refused
        asked = operator.requests
        assert asked <= world.grants, f"the operator asked for what its role lacks: {sorted(asked - world.grants)}"
        unused = world.grants - asked - KOPF_ONLY
        assert not unused, f"the operator's role grants what no code path used: {sorted(unused)}"

        for step in (
            lambda: operator.create(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}}
            ),
            lambda: operator.delete(POD, name="anything", namespace="ml"),
            lambda: operator.create(
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x", "namespace": "ml"}, "spec": {}}
            ),
        ):
            assert isinstance(_refusal(step), ForbiddenError)
    finally:
        operator.close()


def test_gpuchain_operator_run_rolls_out_with_its_own_token(world: World, tmp_path: Path) -> None:
    """The process as it runs in its pod (kopf's watches and lists included) with the operator's
    token: it rolls out, and the server refused none of its requests (audit log)."""
    admin = world.admin
    audit = AuditLog(world.apiserver)
    policy = cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": True}})
    if admin.list(CLUSTER_POLICY):  # left by the test above
        admin.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": policy["spec"]})
    else:
        admin.create(policy)
    for ds in admin.list(DAEMONSET, namespace=NS):
        admin.delete(DAEMONSET, name=ds["metadata"]["name"], namespace=NS)
    start = audit.mark()
    with operator_run(world.kubeconfig, tmp_path, NS) as (proc, stderr):
        _until(
            lambda: len(admin.list(DAEMONSET, namespace=NS)) == len(OPERANDS),
            "the roll-out by `gpuchain operator run`",
            60,
        )
        time.sleep(3)  # a few resyncs and kopf's watches
        assert proc.poll() is None, stderr.read_text()[-3000:]
    refused = audit.refused(start)
    assert not refused, "the server refused the operator:\n" + "\n".join(map(str, refused))
    log = stderr.read_text()
    assert "forbidden" not in log.lower(), log[-3000:]
