"""LiveCluster specifics over real HTTP (kmock): the Eviction API's 429 and error mapping."""

from __future__ import annotations

import pytest
from kube.kmock_server import kmock_server

from gpuchain.kube import NODE, EvictionBlockedError, KubeError, LiveCluster, NotFoundError

REFUSAL = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget train-pdb needs 2 healthy pods and has 2 currently",
            }
        ]
    },
    "code": 429,
}


def test_eviction_refusal_names_the_budget() -> None:
    # kmock has no eviction subresource: answer as the API server does, over real HTTP.
    with kmock_server() as (url, emulator):
        emulator["post /api/v1/namespaces/ml/pods/w1/eviction"] << 429 << REFUSAL
        cluster = LiveCluster.from_url(url)
        with pytest.raises(EvictionBlockedError) as err:
            cluster.evict("w1", "ml")
        assert err.value.pdb == "train-pdb"
        assert (err.value.namespace, err.value.pod) == ("ml", "w1")
        assert cluster.calls.snapshot() == {"evict": 1}


def test_server_errors_are_typed() -> None:
    with kmock_server() as (url, emulator):
        emulator["get /api/v1/nodes/broken"] << 500 << {"kind": "Status", "code": 500, "message": "etcd is down"}
        cluster = LiveCluster.from_url(url)
        with pytest.raises(NotFoundError):
            cluster.get(NODE, "absent")
        with pytest.raises(KubeError) as err:
            cluster.get(NODE, "broken")
        assert err.value.code == 500
        assert "etcd is down" in str(err.value)
