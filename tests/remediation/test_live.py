"""Publisher and controller through LiveCluster (lightkube, real HTTP) against kmock's API emulator.

kmock has no Eviction subresource and ignores selectors (see tests/kube/kube_fixtures.py), so this
checks the requests the node side and the node actions make; evictions are covered on MemoryCluster.
"""

from __future__ import annotations

import json

from kube.kmock_server import kmock_server

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import CONFIGMAP, EVENT, NODE, LiveCluster
from gpuchain.remediation.controller import STATUS_NAME, Remediator
from gpuchain.remediation.model import FAULTS_ANNOTATION, TAINT_KEY, find_condition
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object, simulated_policy_objects


def test_publish_and_taint_over_http(h100_sim: SimBackend) -> None:
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        try:
            for name in ("n0", "n1", "n2", "n3"):
                live.create(node_object(name))
            for obj in simulated_policy_objects():
                obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # kmock does not stamp objects
                live.create(obj)
            publisher = GpuHealthPublisher(h100_sim, cluster=live, node_name="n0")
            publisher.handle(h100_sim.inject_xid(5, xid=79))
            result = publisher.publish()
            assert result.condition_written and result.event == "GPUUnhealthy"

            node = live.get(NODE, name="n0")
            cond = find_condition(node)
            assert cond is not None and cond.status == "False" and "XID 79" in cond.message
            assert json.loads(node["metadata"]["annotations"][FAULTS_ANNOTATION])

            report = Remediator(live).run_once()
            assert [(o.action.kind.value, o.result) for o in report.outcomes] == [("taint", "done")]
            assert [t["key"] for t in live.get(NODE, name="n0")["spec"]["taints"]] == [TAINT_KEY]
            assert live.get(CONFIGMAP, name=STATUS_NAME, namespace="gpuchain")["data"]["breaker"] == "closed"
            reasons = {e["reason"] for e in live.list(EVENT)}
            assert {"GPUUnhealthy", "GPUNodeTainted"} <= reasons
        finally:
            live.close()
