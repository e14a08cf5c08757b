"""The GPU Operator's device-plugin validation and the operator release its ClusterPolicy shows.

- Plugin validation runs a workload pod (``app=nvidia-device-plugin-validator``, generateName
  ``nvidia-device-plugin-validator-``, one GPU; NVIDIA/gpu-operator validator/manifests/
  plugin-workload-validation.yaml@a22dbf6) while ``WITH_WORKLOAD`` is on (cmd/nvidia-validator/main.go@a22dbf6,
  default true). Where the node's pods hold every GPU the kubelet refuses it at admission; the repair is
  ``validator.plugin.env WITH_WORKLOAD=false``, not a kubelet restart.
- The chart sets ``spec.validator.version`` to its appVersion unless pinned (deployments/gpu-operator/templates/
  clusterpolicy.yaml@a22dbf6): a GPU Operator release there dates the operator, so a check of a later release's
  default (CDI on with containerd < 1.7, from v25.10.0) stays quiet on a v1.x operator.
The refusal's wording is the kubelet's (pkg/kubelet/cm/devicemanager/manager.go: "requested number of devices
unavailable for %s. Requested: %d, Available: %d, which is unexpected")."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout3 import harness as heldout3

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report

REFUSED = (
    "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, "
    "which is unexpected"
)


def _scenario(validator: str, *, held: int, containerd: str = "1.6.28") -> str:
    version = f", validator: {{version: {validator}}}" if validator else ""
    workloads = f"workloads:\n  - {{name: llm, namespace: serve, count: {held}, gpus: 1, node: a1}}\n" if held else ""
    return (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{driver: {{version: 535.183.01}}{version}}}\n"
        f"nodes:\n  - {{name: a1, preset: t4-x4, containerRuntime: 'containerd://{containerd}'}}\n"
        f"{workloads}"
    )


def _validator_refused(node: str) -> list[Any]:
    name = "nvidia-device-plugin-validator-q2m9z"
    added = {
        "do": "add-pod",
        "namespace": "gpu-operator",
        "name": name,
        "node": node,
        "labels": {"app": "nvidia-device-plugin-validator"},
        "init": ["plugin-validation"],
        "containers": ["nvidia-device-plugin-validator"],
    }
    return [
        lambda sim: heldout3._apply(sim.cluster, dict(added)),
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-validator",
            "namespace": "gpu-operator",
            "node": node,
            "phase": "Failed",
            "containers": [
                {
                    "name": "nvidia-device-plugin-validator",
                    "ready": False,
                    "state": {"terminated": "UnexpectedAdmissionError", "exitCode": 0, "message": f"Pod {REFUSED}"},
                }
            ],
            "events": [{"reason": "UnexpectedAdmissionError", "count": 2, "message": REFUSED}],
        },
    ]


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_the_plugin_validation_refused_on_a_node_whose_pods_hold_every_gpu_turns_its_workload_off() -> None:
    report = diagnosed(_scenario("v24.3.0", held=4), *_validator_refused("a1"))
    (root,) = [f for f in _errors(report) if f.root]
    assert (root.id, root.link, root.node) == ("device-plugin.validation-outbid", "device-plugin", "a1")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {
        "spec": {"validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}}}
    }
    assert "llm-" in " ".join(root.evidence)


def test_a_validation_refused_while_a_gpu_is_free_is_not_blamed_on_the_validation() -> None:
    report = diagnosed(_scenario("v24.3.0", held=2), *_validator_refused("a1"))
    assert "device-plugin.validation-outbid" not in report.ids
    assert "workload.admission-failed" in report.ids


def test_a_v1_operator_named_by_its_validator_is_not_held_to_the_cdi_default_of_v25_10() -> None:
    quiet = diagnosed(_scenario("v1.8.2", held=0, containerd="1.4.12"))
    assert "node.runtime-no-cdi" not in quiet.ids
    later = diagnosed(_scenario("v25.10.0", held=0, containerd="1.4.12"))
    assert "node.runtime-no-cdi" in later.ids


def test_a_validator_version_that_is_no_operator_release_dates_nothing() -> None:
    """The simulator's own validator version in the policy (gpuchain 0.1.0) is not a GPU Operator release, so the
    validator pods' image (gpu-operator-validator:v24.9.0, the operator's rendering of it) dates the operator: before
    v25.10.0 CDI needs no containerd 1.7 (tests/doctor/test_cdi_native_runtime.py)."""
    assert "node.runtime-no-cdi" not in diagnosed(_scenario("", held=0, containerd="1.4.12")).ids
