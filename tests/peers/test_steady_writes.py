"""A steady state writes nothing: every controller and node agent, on the real API server, counted
from the server's own audit log (peers/audit.py).

Each test lets a component make its first pass (which writes), then counts the write requests the
server received over further passes with nothing changed: there must be none. The passes are
shown to have happened (by the component's own reads), so a zero is never a component that
stopped. On the in-memory cluster these components already wrote nothing; against the real server
the operator patched 7 ServiceAccounts, 7 DaemonSets and its Service on every pass, because a real
server's List leaves apiVersion and kind off its items. The operator is checked in both layouts.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.cluster_policy import cluster_policy
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.common.quantity import add_quantities
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, NODE, LiveCluster
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager
from gpuchain.operator.operands import OPERANDS
from gpuchain.operator.reconcile import reconcile
from gpuchain.remediation.publisher import GpuHealthPublisher
from peers.apiserver import ApiServer
from peers.audit import AuditLog, Mark
from peers.operator_run import operator_run
from peers.test_kube_apiserver import gpu_node, install_crd

NS = "gpu-operator"
NODE_NAME = "gpu-0"
LISTS = frozenset({"list"})
runner = CliRunner()


@pytest.fixture
def audit(apiserver: ApiServer) -> AuditLog:
    """The audit log of the session's control plane, emptied of earlier tests' objects."""
    return AuditLog(apiserver)


@pytest.fixture
def agent_env(apiserver: ApiServer, tmp_path: Path) -> dict[str, str]:
    """What a command run in this process needs to find the real server (and nothing else)."""
    return {"KUBECONFIG": str(apiserver.kubeconfig), "HOME": str(tmp_path)}


def _no_writes(audit: AuditLog, since: Mark, what: str) -> None:
    writes = audit.writes(since)
    assert not writes, f"{what} wrote {len(writes)} times with nothing changed:\n" + "\n".join(map(str, writes))


def _invoke(args: list[str], env: dict[str, str]) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output


#: The node agent's resources are its roles' added up: written as the server writes quantities back
#: (``0.05`` + ``50m`` is ``100m``, ``100Mi`` + ``1Gi`` is ``1124Mi``), or each pass would write them again.
AGENT_RESOURCES = {
    "devicePlugin": {"resources": {"requests": {"cpu": "0.05", "memory": "100Mi"}, "limits": {"memory": "1Gi"}}},
    "gfd": {"resources": {"requests": {"cpu": "50m", "memory": "1Gi"}, "limits": {"memory": "512Mi"}}},
}
LAYOUTS = {
    # the default: driver, toolkit and the node agent
    "node-agent": (AGENT_RESOURCES, 3),
    "per-operand": ({"nodeAgent": {"enabled": False}}, len(OPERANDS)),
}


#: Quantities as a user or a chart writes them; each is also summed with others below.
QUANTITY_TEXTS = ("1024Mi", "1.5Gi", "0.5", "1500", "1000", "5000", "1.5M", "512Ki", "0.5Ki", "1.5Ki", "5000Ki",
                  "100m", "2", "4Ki")  # fmt: skip


def test_quantities_are_written_as_the_real_server_writes_them_back(apiserver: ApiServer) -> None:
    """What ``add_quantities`` writes is what the server keeps for that text, and a fixed point: the
    server writes it back unchanged (so the operator's comparison finds nothing to write). A node's
    status.capacity holds the quantity: the server parses and re-serialises it like any other."""
    apiserver.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "q"}})

    def kept(text: str) -> str:
        node = apiserver.request("GET", "/api/v1/nodes/q")
        node["status"] = {"capacity": {"memory": text}}
        apiserver.request("PUT", "/api/v1/nodes/q/status", node)
        return str(apiserver.request("GET", "/api/v1/nodes/q")["status"]["capacity"]["memory"])

    sums = [[a, b] for a in QUANTITY_TEXTS for b in ("904", "1Ki", "0.5")]
    for terms in [[t] for t in QUANTITY_TEXTS] + sums:
        ours = add_quantities(terms)
        assert kept(ours) == ours, f"{terms}: the server rewrites {ours!r}"
        if len(terms) == 1:
            assert kept(terms[0]) == ours, f"{terms[0]!r}: the server keeps it otherwise"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_operator_passes_after_the_first_write_nothing(audit: AuditLog, live_cluster: LiveCluster, layout: str) -> None:
    spec, daemonsets = LAYOUTS[layout]
    install_crd(live_cluster)
    live_cluster.create(gpu_node(NODE_NAME))
    live_cluster.create(cluster_policy("cluster-policy", spec))
    start = audit.mark()
    first = reconcile(live_cluster, name="cluster-policy", namespace=NS)
    counts = audit.counts(start)
    assert counts[("create", "daemonsets", "", "admin")] == daemonsets
    assert counts[("patch", "clusterpolicies", "status", "admin")] == 1
    assert "clusterpolicy/cluster-policy/status" in first.changed
    steady = audit.mark()
    changed = [reconcile(live_cluster, name="cluster-policy", namespace=NS).changed for _ in range(3)]
    _no_writes(audit, steady, "the operator's reconcile")
    assert changed == [[], [], []]


@pytest.fixture
def operator_process(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``gpuchain operator run`` with the admin's kubeconfig. Yields it and its stderr file."""
    with operator_run(apiserver.kubeconfig, tmp_path, NS) as running:
        yield running


def _until(check: Any, what: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"the operator exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def _passes(audit: AuditLog, since: Mark) -> int:
    """Reconcile passes the operator made since the mark: each lists the ClusterPolicies twice
    (reconcile_all, then reconcile), through its own client (kopf's watches list through kopf's)."""
    lists = audit.requests(since, verbs=LISTS)
    return sum(1 for r in lists if r.resource == "clusterpolicies" and not r.user_agent.startswith("kopf")) // 2


#: A line about one HTTP request, as httpx, aiohttp or kopf would log it.
PER_REQUEST = re.compile(r"HTTP Request:|\b(GET|POST|PUT|PATCH|DELETE) https?://|\bHTTP/1\.[01]\"? \d{3}")


def test_operator_run_resyncs_without_writing_or_logging_requests(
    audit: AuditLog, live_cluster: LiveCluster, operator_process: tuple[subprocess.Popen[bytes], Path]
) -> None:
    """`gpuchain operator run` after its roll-out: resyncs (one a second here) write nothing, and
    its INFO log has no line per HTTP request (before, 200 of 236 lines in 35 s were)."""
    install_crd(live_cluster)
    live_cluster.create(gpu_node(NODE_NAME))
    live_cluster.create(cluster_policy("cluster-policy", {}))
    proc, log = operator_process

    def rolled_out() -> bool:
        status = live_cluster.get(CLUSTER_POLICY, name="cluster-policy").get("status") or {}
        return bool(status) and len(live_cluster.list(DAEMONSET, namespace=NS)) == 3  # driver, toolkit, node agent

    _until(rolled_out, "the operator's roll-out", proc, log)
    steady = audit.mark()
    _until(lambda: _passes(audit, steady) >= 3, "three resyncs", proc, log)
    _no_writes(audit, steady, "gpuchain operator run")
    lines = log.read_text().splitlines()
    per_request = [line for line in lines if PER_REQUEST.search(line)]
    assert not per_request, f"{len(per_request)} of {len(lines)} log lines are one HTTP request each:\n" + "\n".join(
        per_request[:5]
    )
    wrote = [line for line in lines if " INFO gpuchain.operator: ClusterPolicy cluster-policy " in line]
    assert len(wrote) >= 1 and "daemonset/gpuchain-node-agent" in wrote[0], "the roll-out is one line"
    assert len(wrote) <= 2, f"one line per pass that wrote, none for a quiet pass:\n{chr(10).join(wrote)}"


def test_gpu_health_publishes_once_then_writes_nothing(
    audit: AuditLog, live_cluster: LiveCluster, agent_env: dict[str, str]
) -> None:
    """`gpuchain gpu-health` on a Node: the first publish writes, later ones (each a fresh process,
    as after a restart, and the running loop's resyncs) write nothing; also with a GPU fault."""
    live_cluster.create(gpu_node(NODE_NAME))
    args = ["gpu-health", "--once", "--node", NODE_NAME, "--backend", "sim"]
    start = audit.mark()
    _invoke(args, agent_env)
    assert audit.counts(start)[("patch", "nodes", "status", "admin")] == 1
    steady = audit.mark()
    _invoke(args, agent_env)
    _invoke(args, agent_env)
    _no_writes(audit, steady, "gpu-health --once")

    backend = SimBackend.from_preset("h100-80gb-x8")
    publisher = GpuHealthPublisher(backend, cluster=live_cluster, node_name=NODE_NAME, pods=lambda: [], quiet_seconds=0)
    publisher.handle(backend.inject_xid(3, xid=79))
    faulted = audit.mark()
    assert publisher.publish().condition_written
    assert audit.writes(faulted), "the fault is published"
    steady = audit.mark()
    gets = live_cluster.calls.by_verb["get"]
    asyncio.run(
        _run_until(
            lambda stop: publisher.run(stop, resync=0.2),
            lambda: live_cluster.calls.by_verb["get"] - gets >= 3,
            "the loop's three passes",
        )
    )
    _no_writes(audit, steady, "gpu-health's loop on a faulty GPU")


async def _run_until(loop: Any, done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Run ``loop(stop)`` until ``done()``, then stop it and wait for it to end.

    Until its passes are counted, not for a fixed time: on a loaded machine 1.5 s held fewer than
    the three passes the tests ask for."""
    stop = asyncio.Event()
    task = asyncio.create_task(loop(stop))
    try:
        async with asyncio.timeout(timeout):
            while not done():
                assert not task.done(), f"the loop ended before {what}"
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_gfd_labels_a_node_once_then_writes_nothing(
    audit: AuditLog, live_cluster: LiveCluster, agent_env: dict[str, str]
) -> None:
    """`gpuchain gfd` writing labels to a Node: the first pass patches, later passes patch nothing.
    (``nvidia.com/gfd.timestamp``, on by default as in NVIDIA's GFD, is the time of the last pass,
    so with it each pass in a later second patches that one label; ``--no-timestamp`` is off here.)"""
    live_cluster.create(gpu_node(NODE_NAME))
    args = ["gfd", "--oneshot", "--output-file", "", "--node", NODE_NAME, "--backend", "sim", "--no-timestamp"]
    start = audit.mark()
    _invoke(args, agent_env)
    assert audit.counts(start)[("patch", "nodes", "", "admin")] == 1
    assert live_cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    steady = audit.mark()
    _invoke(args, agent_env)
    _invoke(args, agent_env)
    _no_writes(audit, steady, "gfd")


def test_mig_manager_applies_once_then_writes_nothing(audit: AuditLog, live_cluster: LiveCluster) -> None:
    """The MIG manager on a Node asking for a layout: the first round writes its state labels and
    Event, then its resyncs (and the watch events of its own writes) write nothing. (A restarted
    manager checks the GPUs again and says so: state pending, then success, and an Event.)"""
    node = gpu_node(NODE_NAME)
    node["metadata"]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    live_cluster.create(node)
    backend = SimBackend.from_preset("h100-80gb-x8")
    config = default_config()
    start = audit.mark()
    manager = MigManager(live_cluster, backend=backend, node=NODE_NAME, config=config)
    assert manager.reconcile().outcome == "success"
    assert audit.counts(start)[("patch", "nodes", "", "admin")] >= 1
    assert live_cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    steady = audit.mark()
    lists = live_cluster.calls.by_verb["list"]
    asyncio.run(
        _run_until(
            lambda stop: manager.run(interval=0.2, stop=stop, resync=0.2),
            lambda: live_cluster.calls.by_verb["list"] - lists >= 3,
            "the manager's three rounds",
        )
    )
    _no_writes(audit, steady, "the MIG manager's resyncs")


def test_remediator_acts_once_then_writes_nothing(
    audit: AuditLog, live_cluster: LiveCluster, agent_env: dict[str, str]
) -> None:
    """The remediator on a node whose GPU failed: the first pass acts on the node, later
    passes (each a fresh process) write nothing while nothing changes."""
    live_cluster.create(gpu_node(NODE_NAME))
    live_cluster.create(gpu_node("gpu-1"))
    backend = SimBackend.from_preset("h100-80gb-x8")
    publisher = GpuHealthPublisher(backend, cluster=live_cluster, node_name=NODE_NAME, pods=lambda: [], quiet_seconds=0)
    publisher.handle(backend.inject_xid(3, xid=79))
    publisher.publish()
    args = ["remediator", "--once", "--node-writes", "any"]
    start = audit.mark()
    _invoke(args, agent_env)
    assert audit.writes(start), "the first pass acts on the failed GPU"
    steady = audit.mark()
    _invoke(args, agent_env)
    _invoke(args, agent_env)
    assert audit.requests(steady, verbs=LISTS), "the passes read the cluster"
    _no_writes(audit, steady, "the remediator")
