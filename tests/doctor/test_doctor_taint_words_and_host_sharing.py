"""Two silences and one false error on GPU pools. The scheduler's taint words before 1.25 ("node(s) had taint {%s:
%s}, that the pod didn't tolerate", from 1.20) and before 1.20 ("node(s) had taints that the pod didn't tolerate",
kubernetes pkg/scheduler/algorithm/predicates/error.go@v1.16.0) name the same fault as today's "untolerated taint":
the GPU pods get their toleration, and where the taint's key is the resource they request, the finding says the API
server runs no ExtendedResourceToleration (kubernetes plugin/pkg/admission/extendedresourcetoleration). And a
Bottlerocket NVIDIA node whose host plugin shares its GPUs by time-slicing (bottlerocket-os/bottlerocket-core-kit
packages/nvidia-k8s-device-plugin, settings.kubelet-device-plugins.nvidia.device-sharing-strategy) offers GPUs:
pods Pending beside it are no consequence of a missing stack."""

from __future__ import annotations

from doctor.small_cluster import diagnosed
from doctor.test_doctor_bottlerocket_host_plugin import BR, _eks, _no_plugin_daemonset
from doctor.test_doctor_pending_workloads import pending_pod, tainted

from gpuchain.doctor.model import Report, Severity

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g1, preset: t4-x4, hostDriver: 535.183.01}\n"


def _untolerated(report: Report) -> list[str]:
    return [f.id for f in report.findings if f.id == "workload.untolerated-taint"]


def test_the_1_20_taint_words_get_the_toleration_and_name_the_missing_admission_plugin() -> None:
    said = "0/1 nodes are available: 1 node(s) had taint {nvidia.com/gpu: true}, that the pod didn't tolerate."
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    report = diagnosed(PLUGIN, tainted("g1", taint=taint), pending_pod("train", said, owner="train"))
    (found,) = [f for f in report.findings if f.id == "workload.untolerated-taint"]
    assert found.root and '"key":"nvidia.com/gpu"' in found.fix
    assert "ExtendedResourceToleration" in found.cause and any(
        "ExtendedResourceToleration" in e for e in found.evidence
    )


def test_the_1_16_taint_words_on_a_taint_of_another_key_get_the_toleration_without_the_plugin_note() -> None:
    said = "0/1 nodes are available: 1 node(s) had taints that the pod didn't tolerate."
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    report = diagnosed(PLUGIN, tainted("g1", taint=taint), pending_pod("train", said))
    (found,) = [f for f in report.findings if f.id == "workload.untolerated-taint"]
    assert '"key":"dedicated"' in found.fix and "ExtendedResourceToleration" not in found.cause


def test_words_of_a_pod_that_waits_for_gpus_name_no_taint() -> None:
    report = diagnosed(PLUGIN, pending_pod("train", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."))
    assert _untolerated(report) == []


def test_pods_waiting_beside_a_bottlerocket_node_that_shares_its_gpus_are_no_missing_stack() -> None:
    shared = {"do": "node", "node": "br1", "capacity": {"nvidia.com/gpu": 4}, "allocatable": {"nvidia.com/gpu": 4}}
    report = diagnosed(
        _eks(("br1", BR)),
        _no_plugin_daemonset,
        shared,
        pending_pod("infer", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
    )
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    (waiting,) = [f for f in report.findings if f.id == "workload.insufficient-gpu"]
    assert "stack.missing" not in waiting.cause


def test_pods_waiting_beside_a_bottlerocket_node_that_announces_nothing_wait_on_its_host_plugin() -> None:
    silent = {
        "do": "node",
        "node": "br1",
        "capacity": {"nvidia.com/gpu": None},
        "allocatable": {"nvidia.com/gpu": None},
    }
    report = diagnosed(
        _eks(("br1", BR)),
        _no_plugin_daemonset,
        silent,
        pending_pod("infer", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
    )
    (waiting,) = [f for f in report.findings if f.id == "workload.insufficient-gpu"]
    assert "device-plugin.not-registered" in waiting.cause and "stack.missing" not in waiting.cause
