"""A user's pod with a GPU ResourceClaim held in ContainerCreating because the DRA path cannot set its claim up,
while NVIDIA's DRA kubelet plugin runs ready and publishes the node's GPUs: the pod is the consequence, the node's
DRA plugin the root, and the repair the plugin's (restart it, its checkpoint file, the claim's pod made again).

The messages are built from the upstream format strings, wrapper by wrapper as each layer writes them:
- the kubelet's Event (kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go@v1.34.4, reason
  FailedPrepareDynamicResources, "Failed to prepare dynamic resources: %v"; pkg/kubelet/cm/dra/manager.go
  "prepare dynamic resources: %w" and "NodePrepareResources failed for ResourceClaim %s: %s";
  pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go "DRA driver %s is not registered");
- NVIDIA's GPU kubelet plugin (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin@v25.12.0: driver.go "error preparing
  devices for claim %s: %w" with ResourceClaimToString's ns/name:uid; device_state.go "unable to get checkpoint: %v",
  "unable to create CDI spec file for claim: %w"), nvidia-container-toolkit pkg/nvcdi/spec/spec.go@v1.18.0 "failed
  to write spec: %w", container-device-interface pkg/cdi/spec.go and device.go@v1.0.1 "invalid CDI Spec: %w",
  "invalid device, empty device edits"; the kubelet's checkpointmanager "checkpoint is corrupted";
- containerd's container message (containerd/v2 internal/cri/server/container_create.go@v2.2.9 "failed to generate
  container %q spec: %w", pkg/cdi/oci_opt.go "CDI device injection failed: %w", container-device-interface
  pkg/cdi/cache.go "unresolvable CDI devices %s") with the claim's CDI name k8s.gpu.nvidia.com/claim=<uid>-gpu-0
  (cmd/gpu-kubelet-plugin/cdi.go GetClaimDeviceName).
Pod fields: spec.resourceClaims / status.resourceClaimStatuses (k8s.io/api core/v1 types.go@v0.34.4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from doctor.small_cluster import diagnosed, no_gpus
from test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, OPERATOR_DRA, READY, dra_release, published

from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.sim.build import SimCluster

PLUGIN = f"{DRA_DS}-7xk2p"
UID = "0b6f3c1e-2d4a-4e7b-9f10-5a8c3d2e1f00"
CLAIM = "train-gpu-x2q9d"
#: The kubelet's words around the plugin's answer for one claim.
KUBELET = (
    "Failed to prepare dynamic resources: prepare dynamic resources: "
    f"NodePrepareResources failed for ResourceClaim {CLAIM}: "
)
PLUGIN_SAYS = f"error preparing devices for claim ml/{CLAIM}:{UID}: "
STALE_CDI = (
    KUBELET + PLUGIN_SAYS + "unable to create CDI spec file for claim: failed to write spec: invalid CDI Spec: "
    "invalid device, empty device edits"
)
CORRUPT = KUBELET + PLUGIN_SAYS + "unable to get checkpoint: checkpoint is corrupted"
UNRESOLVABLE = (
    'failed to generate container "5f0c2a7e9b1d" spec: CDI device injection failed: unresolvable CDI devices '
    f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"
)
CREATING = {"name": "train", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}


def claim_pod(container: dict[str, Any] = CREATING, *, node: str = "n1") -> Callable[[SimCluster], None]:
    """An edit: Deployment ml/train's pod on ``node`` holding a ResourceClaim made from a template, its container in
    the state given (ContainerCreating by default, as the kubelet leaves a pod whose claims are not prepared)."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "train-7c9f8-abcde",
                    "namespace": "ml",
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "train-7c9f8", "controller": True}],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "train", "image": "pytorch/pytorch:2.5.1-cuda12.4",
                                    "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                },
                "status": {
                    "phase": "Pending",
                    "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": CLAIM}],
                    "containerStatuses": [container],
                },
            }
        )  # fmt: skip

    return edit


def kubelet_event(message: str, reason: str = "FailedPrepareDynamicResources") -> Callable[[SimCluster], None]:
    """An edit: the kubelet's Warning Event on pod ml/train-7c9f8-abcde."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"train-7c9f8-abcde.{reason.lower()}", "namespace": "ml"},
                "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "train-7c9f8-abcde"},
                "type": "Warning",
                "reason": reason,
                "message": message,
                "source": {"component": "kubelet", "host": "n1"},
            }
        )

    return edit


def dra_node(*edits: Callable[[SimCluster], None], scenario: str = OPERATOR_DRA) -> Report:
    """The operator with NVIDIA's DRA driver serving n1's GPUs (its plugin ready, its slice published), then
    ``edits``."""
    return diagnosed(
        scenario, no_gpus("n1"), dra_release("n1", DONE, READY, "/run/nvidia/driver"), published("n1"), *edits
    )


def _found(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.id == "device-plugin.dra-prepare-failed"]


def test_a_claim_the_plugin_cannot_write_a_cdi_spec_for_restarts_the_dra_plugin() -> None:
    report = dra_node(claim_pod(), kubelet_event(STALE_CDI))
    (found,) = _found(report)
    assert found.root and (found.link, found.node, found.severity) == ("device-plugin", "n1", Severity.ERROR)
    assert [f.id for f in report.findings if f.root and f.severity is Severity.ERROR] == [found.id]
    assert f"says: {STALE_CDI}" in found.evidence
    assert any(
        e.startswith("catalog: k8s-dra-driver-gpu.cdi-spec-failed (NVIDIA/k8s-dra-driver-gpu ") for e in found.evidence
    )
    assert any(e.startswith("catalog: kubelet.dra-prepare-failed") for e in found.evidence)
    assert found.consequences == ("pod ml/train-7c9f8-abcde: ContainerCreating, its GPU claims not set up",)
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.action.target == f"{DRA_NS}/{PLUGIN}"
    assert found.fix.startswith(f"kubectl -n {DRA_NS} delete pod {PLUGIN}   # the kubelet retries")


def test_a_corrupt_plugin_checkpoint_is_moved_aside_on_the_node_before_the_plugin_restarts() -> None:
    (found,) = _found(dra_node(claim_pod(), kubelet_event(CORRUPT)))
    assert found.root and any(e.startswith("catalog: k8s-dra-driver-gpu.checkpoint-corrupted") for e in found.evidence)
    assert found.action is not None and (found.action.op, found.action.target) == (FixOp.NODE, "n1")
    work = str(found.action.changes["action"])
    assert "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json" in work
    assert f"kubectl -n {DRA_NS} delete pod {PLUGIN}" in work and work in found.fix


def test_a_prepared_claim_whose_cdi_spec_the_runtime_lacks_makes_the_pod_again_after_the_plugin() -> None:
    """The kubelet holds the claim as prepared and never asks the plugin again: its pod is made again. The
    runtime's words are the toolkit's for a device plugin's CDI name, the DRA plugin's for a claim's."""
    refused = {**CREATING, "state": {"waiting": {"reason": "CreateContainerError", "message": UNRESOLVABLE}}}
    report = dra_node(claim_pod(refused), kubelet_event(f"Error: {UNRESOLVABLE}", reason="Failed"))
    (found,) = _found(report)
    assert found.root and any(e.startswith("catalog: cdi.unresolvable-dra-claim") for e in found.evidence)
    assert found.fix.startswith(
        f"kubectl -n {DRA_NS} delete pod {PLUGIN} && kubectl -n ml delete pod train-7c9f8-abcde   # "
    )
    assert not [f for f in report.findings if f.link == "toolkit" and f.severity is Severity.ERROR]
    # The same, read from the container's state alone (no Event kept).
    (alone,) = _found(dra_node(claim_pod(refused)))
    assert "container CreateContainerError on pod ml/train-7c9f8-abcde" in alone.evidence


def test_the_dra_plugin_beside_a_running_device_plugin_is_still_the_one_restarted() -> None:
    """The operator's device plugin serves the node too: NVIDIA's DRA plugin pod is not the node's device-plugin
    operand pod, and is found by its image."""
    operator = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
    report = diagnosed(
        operator, dra_release("n1", DONE, READY, "/run/nvidia/driver"), claim_pod(), kubelet_event(STALE_CDI)
    )
    (found,) = _found(report)
    assert found.action is not None and found.action.target == f"{DRA_NS}/{PLUGIN}"


def test_a_plugin_that_is_down_is_the_root_and_its_claims_are_not_another() -> None:
    """The kubelet's 'not registered' while the plugin crash-loops: the plugin's own state is the root."""
    not_registered = (
        "Failed to prepare dynamic resources: prepare dynamic resources: DRA driver gpu.nvidia.com is not registered"
    )
    report = diagnosed(
        OPERATOR_DRA, no_gpus("n1"), dra_release("n1", DONE, CRASH, "/run/nvidia/driver"), published("n1"),
        claim_pod(), kubelet_event(not_registered),
    )  # fmt: skip
    (found,) = _found(report)
    assert not found.root and any(e.startswith("catalog: kubelet.dra-driver-not-registered") for e in found.evidence)
    assert [f.link for f in report.findings if f.root and f.severity is Severity.ERROR] == ["device-plugin"]


def test_what_is_not_a_gpu_claim_failing_now_is_not_named() -> None:
    """Another DRA driver's failure (the kubelet's words alone, no GPU driver named), and a pod that runs now
    although its old Event is still kept."""
    other = KUBELET + "failed to attach VF 0000:3b:00.2: device or resource busy"
    assert not _found(dra_node(claim_pod(), kubelet_event(other)))
    running = {
        "name": "train",
        "ready": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}},
    }
    assert not _found(dra_node(claim_pod(running), kubelet_event(STALE_CDI)))
    assert not _found(dra_node(claim_pod()))


#: The plugin's other answers (cmd/gpu-kubelet-plugin device_state.go@v25.12.0 "requested device %s is already
#: allocated to different claim %s", "error creating MIG device: %w" around nvlib.go's "error creating GPU instance
#: for '%s': %v" with NVML's text for ERROR_INSUFFICIENT_RESOURCES (fixtures/nvml-return-codes.yaml); driver.go's wrapper around "prepare devices failed: %w" / "claim not yet allocated"),
#: each read as its own entry and repaired as it says: on the node where the checkpoint must change first.
OTHER_ANSWERS = [
    (f"requested device gpu-0 is already allocated to different claim {UID}", "device-already-allocated", FixOp.NODE),
    (
        "prepare devices failed: error creating MIG device: error creating GPU instance for '1g.10gb-0-0': Ran out of "
        "critical resources, other than memory",
        "mig-create-failed",
        FixOp.DELETE,
    ),
    ("prepare devices failed: claim not yet allocated", "prepare-failed", FixOp.DELETE),
]


@pytest.mark.parametrize(("said", "entry", "op"), OTHER_ANSWERS, ids=[a[1] for a in OTHER_ANSWERS])
def test_each_answer_of_the_plugin_is_read_as_its_own_entry(said: str, entry: str, op: FixOp) -> None:
    (found,) = _found(dra_node(claim_pod(), kubelet_event(KUBELET + PLUGIN_SAYS + said)))
    assert found.root and any(e.startswith(f"catalog: k8s-dra-driver-gpu.{entry} ") for e in found.evidence)
    assert found.action is not None and found.action.op is op
