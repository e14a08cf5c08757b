"""Node Feature Discovery's own failures that keep a GPU node unlabelled (catalog.yaml, entries read from
kubernetes-sigs/node-feature-discovery's source): a worker whose NodeFeature object the API refuses is repaired on
NFD's Role (not on GFD's ClusterRole, whose words for its own NodeFeature object are the same), a master that may
not list the rules on its ClusterRole, and a cluster without NFD's CRDs by installing them.

Log lines as klog writes an ErrorS line of kubernetes-sigs/node-feature-discovery cmd/nfd-worker/main.go@v0.17.3
("error while running") and pkg/nfd-master/nfd-master.go@v0.16.9, and client-go's leader elector
(kubernetes/client-go tools/leaderelection/leaderelection.go@9a8caafaa5b520682d68111828b297eab42bcab8 "error
retrieving resource lock %v: %v"), which nfd-master runs on its Lease; the refusals in the API server's words for an RBAC
denial (kubernetes apiserver's forbidden message: '<resource> "<name>" is forbidden: User "<user>" cannot <verb>
resource "<resource>" in API group "<group>" in the namespace "<ns>"')."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from doctor.test_doctor_operator_reason import BARE_METAL, NFD_MISSING, NFD_MISSING_LOG, NS, UNLABELLED, _nfd, _operator

from gpuchain.doctor import Severity, catalog
from gpuchain.doctor.model import Report

WORKER_SA = "system:serviceaccount:nfd:nfd-worker"
REFUSED = (
    'E1206 12:00:01.000000       1 main.go:73] "error while running" err="failed to advertise features (via CRD '
    'API): failed to create NodeFeature object \\"g\\": nodefeatures.nfd.k8s-sigs.io is forbidden: User '
    f'\\"{WORKER_SA}\\" cannot create resource \\"nodefeatures\\" in API group \\"nfd.k8s-sigs.io\\" in the '
    'namespace \\"nfd\\""'
)
NO_CRD = (
    'E1206 12:00:01.000000       1 main.go:73] "error while running" err="failed to advertise features (via CRD '
    'API): failed to create NodeFeature object \\"g\\": the server could not find the requested resource (post '
    'nodefeatures.nfd.k8s-sigs.io)"'
)


def _worker_crashing(log: str) -> dict[str, Any]:
    """An edit: the nfd-worker pod on g crash-looping with ``log``."""
    crash = {"name": "worker", "ready": False, "restarts": 6, "state": {"waiting": "CrashLoopBackOff"}}
    return {
        "do": "pod",
        "daemonset": "nfd-worker",
        "namespace": "nfd",
        "node": "g",
        "containers": [crash],
        "logs": {"worker": log},
    }


def _root(report: Report) -> Any:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def test_a_worker_refused_its_nodefeature_object_is_repaired_on_nfds_role_not_gfds() -> None:
    # GFD's entry knows the same words (its own NodeFeature object): the worker's log is read with NFD's entries first.
    assert catalog.entry("gpu-feature-discovery.nodefeature-create").regex.search(REFUSED)
    root = _root(
        diagnosed(
            "name: t\nstack: eks\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
            *UNLABELLED,
            _worker_crashing(REFUSED),
        )
    )
    assert root.id == "nfd.not-labelled" and "CrashLoopBackOff" in root.cause
    assert any(e.startswith("catalog: node-feature-discovery.worker-nodefeature-forbidden") for e in root.evidence)
    assert "create, get, update and delete on nodefeatures" in root.fix and "worker.rbac.create=true" in root.fix
    assert "nfd/nfd-worker-" in root.fix, "the pod to start again, filled in from the evidence"


def test_a_cluster_without_nfds_crds_installs_them() -> None:
    root = _root(
        diagnosed(
            "name: t\nstack: eks\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
            *UNLABELLED,
            _worker_crashing(NO_CRD),
        )
    )
    assert any(e.startswith("catalog: node-feature-discovery.nodefeature-crd-missing") for e in root.evidence)
    assert "deployment/base/nfd-crds" in root.fix


def test_the_masters_refusals_and_the_worker_grpc_line_match_only_their_failure() -> None:
    """Each entry needs the failure's own words after the component's prefix: the prefix alone, which nfd-master and
    nfd-worker also write for causes the cluster's settings do not repair, is left to the unrecognised-line path."""
    listed = catalog.entry("node-feature-discovery.master-list-forbidden")
    grpc = catalog.entry("node-feature-discovery.worker-grpc-unreachable")
    denied = (
        'E1206 12:00:01.000000       1 nfd-master.go:1177] "failed to list NodeFeatureRule resources" err="'
        'nodefeaturerules.nfd.k8s-sigs.io is forbidden: User \\"system:serviceaccount:nfd:nfd-master\\" cannot list '
        'resource \\"nodefeaturerules\\" in API group \\"nfd.k8s-sigs.io\\" at the cluster scope"'
    )
    assert listed.regex.search(denied) and "nodefeaturerules" in listed.fix
    assert not listed.regex.search('"failed to list NodeFeatureRule resources" err="context canceled"')
    refused = "failed to advertise features (via gRPC): rpc error: code = Unavailable desc = connection refused"
    assert grpc.regex.search(refused) and not grpc.regex.search("failed to advertise features (via gRPC): EOF")


MASTER_SA = 'User \\"system:serviceaccount:gpu-operator:node-feature-discovery-master\\"'
#: A running nfd-master's refused line, the entry it is, the permission the fix grants.
MASTER_REFUSALS = [
    (
        'E1206 12:00:05.000000       1 nfd-master.go:1177] "failed to list NodeFeatureRule resources" err="'
        f'nodefeaturerules.nfd.k8s-sigs.io is forbidden: {MASTER_SA} cannot list resource \\"nodefeaturerules\\" '
        'in API group \\"nfd.k8s-sigs.io\\" at the cluster scope"',
        "node-feature-discovery.master-list-forbidden",
        "get, list and watch on nodefeatures, nodefeaturerules",
    ),
    (
        "E1206 12:00:05.000000       1 leaderelection.go:436] error retrieving resource lock "
        'gpu-operator/nfd-master.nfd.kubernetes.io: leases.coordination.k8s.io "nfd-master.nfd.kubernetes.io" is '
        'forbidden: User "system:serviceaccount:gpu-operator:node-feature-discovery-master" cannot get resource '
        '"leases" in API group "coordination.k8s.io" in the namespace "gpu-operator"',
        "node-feature-discovery.master-lease-forbidden",
        "get, update on the lease nfd-master.nfd.kubernetes.io",
    ),
]


@pytest.mark.parametrize(("log", "entry", "grant"), MASTER_REFUSALS, ids=[m[1] for m in MASTER_REFUSALS])
def test_a_running_nfd_master_the_api_refuses_gets_the_permission_it_lacks(log: str, entry: str, grant: str) -> None:
    master = {
        "do": "pod",
        "daemonset": "gpu-operator-node-feature-discovery-master",
        "namespace": NS,
        "containers": [{"name": "master", "ready": True, "state": {"running": True}}],
        "logs": {"master": log},
    }
    root = _root(diagnosed(BARE_METAL, _operator(NFD_MISSING_LOG), NFD_MISSING, *_nfd(["cpu", "g"]), master))
    assert root.id == "nfd.not-labelled" and "runs but its log says it cannot write the labels" in root.cause
    assert any(e.startswith(f"catalog: {entry} (") for e in root.evidence), root.evidence
    assert grant in root.fix and "master.rbac.create=true" in root.fix
