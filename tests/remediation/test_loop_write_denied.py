"""The repair loop on the real kube-apiserver while it refuses the agent's Node writes and serves its
reads (issue 25, item 1): a ValidatingAdmissionPolicy denies every update of Nodes (and their status)
by the agent's service account, as a failing webhook, an etcd space alarm or write throttling would.
The agent runs for a bounded time on a Node whose published fault needs a reset; the simulated GPU
counts the resets it was asked for. Before the fix: one reset (and one burn-in) per pass. Once the
policy goes, the loop records its attempt and resets the GPU exactly once. Events are not Node
writes and still land: the loop tells each stage once, when the Node records it, not once per pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from peers.apiserver import ApiServer

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, KubeError, LiveCluster
from gpuchain.kube.kinds import EVENT
from gpuchain.remediation.gpuloop import LOOP_ANNOTATION, Stage, decode_records
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.model import FAULTS_ANNOTATION, Fault, encode_faults

NS = "gpuchain"
AGENT_SA = "test-loop-agent"
USER = f"system:serviceaccount:{NS}:{AGENT_SA}"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
POLICY = "test-deny-loop-node-writes"
REFUSAL = "etcdserver: mvcc: database space exceeded (the test's policy)"
NODE_NAME = "gpu-a"
PASS_S = 0.1
"""The agent's pass interval here; failed passes back off from it (at least 4 passes in 2 s)."""


class CountingSim(SimBackend):
    """A SimBackend that counts the resets and burn-ins it was asked for, per GPU index."""

    resets: Counter[int]
    burn_ins: Counter[int]

    def reset_gpu(self, gpu_index: int) -> None:
        self.resets[gpu_index] += 1
        super().reset_gpu(gpu_index)

    def burn_in(self, gpu_index: int) -> Any:
        self.burn_ins[gpu_index] += 1
        return super().burn_in(gpu_index)


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.1)


def _post(apiserver: ApiServer, path: str, doc: dict[str, Any]) -> None:
    with contextlib.suppress(urllib.error.HTTPError):  # left by an earlier, interrupted run
        apiserver.request("DELETE", f"{path}/{doc['metadata']['name']}")
    apiserver.request("POST", path, doc)


def _deny_node_writes(apiserver: ApiServer) -> None:
    _post(
        apiserver,
        f"{ADMISSION}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes", "nodes/status"],
                        }
                    ]
                },
                "validations": [{"expression": f"request.userInfo.username != '{USER}'", "message": REFUSAL}],
            },
        },
    )
    _post(
        apiserver,
        f"{ADMISSION}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    )


@pytest.fixture
def agent_client(apiserver: ApiServer, tmp_path: Path) -> Iterator[LiveCluster]:
    """A client as the loop agent's own service account, allowed everything by RBAC."""
    apiserver.ensure_namespace(NS)
    _post(
        apiserver,
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": AGENT_SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": NS}],
        },
    )
    token = apiserver.service_account_token(NS, AGENT_SA)
    client = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig_for_token(token, tmp_path / "agent.kubeconfig")))
    try:
        yield client
    finally:
        client.close()
        with contextlib.suppress(urllib.error.HTTPError):
            apiserver.request("DELETE", f"{RBAC}/clusterrolebindings/{AGENT_SA}")


def _refused(client: LiveCluster) -> bool:
    """Whether the agent's Node writes are refused by the policy yet (it reaches admission async)."""
    try:
        client.patch(
            NODE, name=NODE_NAME, patch={"metadata": {"annotations": {"test.gpuchain.io/probe": str(time.time())}}}
        )
    except KubeError as exc:  # 422 Invalid: a policy's denial unless its validation names a reason
        return REFUSAL in str(exc)
    return False


def _gpu_events(client: LiveCluster) -> list[str]:
    """The reasons of the repair loop's Events about the Node, oldest first."""
    events = [
        e for e in client.list(EVENT, namespace="default") if (e.get("involvedObject") or {}).get("name") == NODE_NAME
    ]
    events.sort(key=lambda e: (e.get("firstTimestamp") or "", e["metadata"].get("creationTimestamp") or ""))
    return [str(e.get("reason")) for e in events if str(e.get("reason", "")).startswith("GPU")]


async def _run_for(agent: GpuLoopAgent, seconds: float) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop, interval=PASS_S))
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, timeout=30)


def test_no_reset_storm_while_the_api_server_refuses_node_writes_and_serves_reads(
    apiserver: ApiServer, live_cluster: LiveCluster, agent_client: LiveCluster
) -> None:
    backend = CountingSim.from_preset("h100-80gb-x8", node=NODE_NAME)
    backend.resets, backend.burn_ins = Counter(), Counter()
    uuid = backend.inventory().gpu(3).uuid
    live_cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE_NAME,
                "annotations": {
                    FAULTS_ANNOTATION: encode_faults({uuid: Fault(uuid=uuid, gpu=uuid, xids=(48,), covers=(uuid,))})
                },
            },
        }
    )
    live_cluster.patch_status(NODE, name=NODE_NAME, status={"nodeInfo": {"bootID": "b1"}})
    _deny_node_writes(apiserver)
    _until(lambda: _refused(agent_client), "the policy refuses the agent's Node writes")
    with pytest.raises(KubeError):
        agent_client.patch(NODE, name=NODE_NAME, patch={"metadata": {"annotations": {"x": "y"}}})
    assert agent_client.get(NODE, name=NODE_NAME)["metadata"]["name"] == NODE_NAME  # reads work

    agent = GpuLoopAgent(backend, cluster=agent_client, node_name=NODE_NAME)
    asyncio.run(_run_for(agent, 2.0))
    passes = agent.metrics.passes
    assert passes["failed"] >= 4 and passes["ok"] == 0, passes
    assert backend.resets[3] == 0 and backend.burn_ins[3] == 0, (backend.resets, backend.burn_ins, passes)
    assert LOOP_ANNOTATION not in live_cluster.get(NODE, name=NODE_NAME)["metadata"].get("annotations", {})
    assert _gpu_events(live_cluster) == []  # nothing happened that the Node records

    apiserver.request("DELETE", f"{ADMISSION}/validatingadmissionpolicybindings/{POLICY}")
    _until(lambda: not _refused(agent_client), "the policy is gone from admission")

    def burned_in() -> bool:
        agent.run_once()
        shown = live_cluster.get(NODE, name=NODE_NAME)["metadata"]["annotations"].get(LOOP_ANNOTATION)
        rec = decode_records(shown).get(uuid)
        return rec is not None and rec.stage is Stage.BURN_IN and rec.passed

    _until(burned_in, "the GPU is reset and burned in once writes work again")
    assert backend.resets[3] == 1 and backend.burn_ins[3] == 1, (backend.resets, backend.burn_ins)
    told = Counter(_gpu_events(live_cluster))
    assert told == Counter(["GPUQuarantined", "GPUDrained", "GPUResetStarted", "GPUBurnIn", "GPUBurnInPassed"]), told
