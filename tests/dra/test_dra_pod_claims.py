"""Which ResourceClaims a pod and each of its containers use (``dra.claims``), as the kubelet
prepares them: by name, from a template once the claim is made, and the scheduler's claim for a
plain ``nvidia.com/gpu`` request served by DRA. Pod fields as Kubernetes 1.34 to 1.37 write them."""

from __future__ import annotations

from gpuchain.dra.claims import container_claims, pod_claims

POD = {
    "spec": {
        "resourceClaims": [
            {"name": "gpu", "resourceClaimName": "shared-gpu"},
            {"name": "scratch", "resourceClaimTemplateName": "scratch-template"},
            {"name": "pending", "resourceClaimTemplateName": "later"},  # not made yet: no claim
            {"name": "unused", "resourceClaimName": "pod-level"},
        ],
        "initContainers": [{"name": "warm", "resources": {"claims": [{"name": "scratch"}]}}],
        "containers": [
            {"name": "main", "resources": {"claims": [{"name": "gpu"}, {"name": "scratch", "request": "r"}]}},
            {"name": "sidecar"},
            {"name": "waits", "resources": {"claims": [{"name": "pending"}]}},
        ],
    },
    "status": {
        "resourceClaimStatuses": [{"name": "scratch", "resourceClaimName": "train-scratch-x7k2p"}],
        "extendedResourceClaimStatus": {
            "resourceClaimName": "train-extended-resources-abcde",
            "requestMappings": [{"containerName": "sidecar", "resourceName": "nvidia.com/gpu", "requestName": "c1"}],
        },
    },
}


def test_each_container_uses_the_claims_its_entries_name() -> None:
    assert container_claims(POD) == {
        "warm": frozenset({"train-scratch-x7k2p"}),
        "main": frozenset({"shared-gpu", "train-scratch-x7k2p"}),
        "sidecar": frozenset({"train-extended-resources-abcde"}),
        "waits": frozenset(),
    }


def test_the_pod_uses_every_claim_made_for_it() -> None:
    assert pod_claims(POD) == {"shared-gpu", "train-scratch-x7k2p", "pod-level", "train-extended-resources-abcde"}
    assert pod_claims({"spec": {"containers": [{"name": "c"}]}}) == frozenset()
