"""A GPU pod whose CUDA allocation runs out of memory on a GPU the device plugin shares by time-slicing, beside other
GPU pods: time-slicing's replicas have no memory isolation ("each workload has access to the GPU memory",
NVIDIA/k8s-device-plugin README.md@v0.17.0), so a co-tenant holds what the failing pod needs. The pod keeps running
ready (a server whose model failed to load keeps answering), so the gather step reads the tenants of a few time-sliced
nodes; the finding names the device plugin's sharing on that node and the co-tenants to restart, from pod state.

The out-of-memory lines are PyTorch's caching allocator's ("CUDA out of memory. Tried to allocate ...") and the CUDA
driver API's name for the error; node, pod and namespace names are made up (none of heldout39's).
"""

from __future__ import annotations

from doctor.small_cluster import built, diagnosed
from doctor.test_doctor_lost_devices_and_headers import _ready_with_log

from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.doctor.ready_gpu_logs import MAX_SHARED_NODES, MAX_TENANTS, shared_gpu_tenants
from gpuchain.doctor.snapshot import gather

OOM = (
    "epoch 3 step 120\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.05 GiB "
    "of which 1.12 GiB is free.\n"
)
FID = "device-plugin.time-sliced-oom"


def _cluster(*, config: str = "ts3") -> str:
    """A device-plugin cluster with one four-GPU node running four GPU pods (vision, embed, train-0, train-1), which
    fit it unshared too; the node runs the plugin config ``config`` (time-sliced three ways, or ``whole``)."""
    return (
        "name: t\nstack: nvidia-device-plugin\n"
        "devicePluginConfigs:\n"
        "  ts3: {version: v1, sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}}\n"
        "  whole: {version: v1}\n"
        f"nodes:\n  - {{name: edge-9, preset: t4-x4, devicePluginConfig: {config}}}\n"
        "  - {name: cpu-1, gpu: false}\n"
        "workloads:\n"
        "  - {name: vision, namespace: cams, count: 1, node: edge-9}\n"
        "  - {name: embed, namespace: search, count: 1, node: edge-9}\n"
        "  - {name: train, namespace: lab, count: 2, node: edge-9}\n"
    )


def _found(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.id == FID]


def test_a_ready_tenant_out_of_cuda_memory_on_a_time_sliced_gpu_names_the_sharing_and_its_cotenants() -> None:
    report = diagnosed(_cluster(), _ready_with_log("train", "edge-9", "lab", OOM))
    (found,) = _found(report)
    assert (found.link, found.node, found.severity, found.root) == ("device-plugin", "edge-9", Severity.ERROR, True)
    assert found.action is not None and found.action.op is FixOp.NODE
    # The co-tenants, from the pods on the node, each with the command that restarts it; the starved pod is not one.
    assert "kubectl -n cams delete pod vision" in found.fix and "kubectl -n search delete pod embed" in found.fix
    assert "co-tenants on edge-9: cams/vision, search/embed" in found.evidence
    assert "GPU pods out of GPU memory: lab/train-0, lab/train-1" in found.evidence
    assert "delete pod train" not in found.fix.partition("then restart the starved pods")[0]
    assert "sharing.mps" in found.fix and "nvidia-smi --query-compute-apps" in found.fix
    assert any("device plugin config 'ts3'" in e for e in found.evidence)
    assert any("CUDA out of memory" in e for e in found.evidence)
    assert not [f for f in report.findings if f.severity is Severity.ERROR and f.id != FID]


def test_gfds_replicas_label_says_time_slicing_where_the_config_is_not_at_hand() -> None:
    labelled = {"do": "node", "node": "edge-9", "labels": {"nvidia.com/gpu.replicas": "3"}}
    report = diagnosed(_cluster(config="whole"), labelled, _ready_with_log("train", "edge-9", "lab", OOM))
    (found,) = _found(report)
    assert "GPUs shared by time-slicing: label nvidia.com/gpu.replicas=3" in found.evidence
    assert "cams/vision" in found.fix


def test_out_of_memory_on_an_unshared_or_mps_gpu_is_the_workloads_own() -> None:
    # A GPU of its own: the pod needs more than the card has; nothing of the chain.
    assert not _found(diagnosed(_cluster(config="whole"), _ready_with_log("train", "edge-9", "lab", OOM)))
    # MPS limits each client's memory (GFD labels the strategy): a refusal there is the tenant's own limit.
    mps = {"do": "node", "node": "edge-9", "labels": {"nvidia.com/gpu.sharing-strategy": "mps"}}
    assert not _found(diagnosed(_cluster(), mps, _ready_with_log("train", "edge-9", "lab", OOM)))


def test_time_sliced_tenants_that_say_nothing_of_memory_stay_quiet() -> None:
    report = diagnosed(_cluster(), _ready_with_log("train", "edge-9", "lab", "epoch 3 step 120 loss 0.41\n"))
    assert not _found(report)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_the_tenants_read_are_bounded_and_none_where_no_gpu_is_time_sliced() -> None:
    nodes = "".join(
        f"  - {{name: ts{i}, preset: l4-x2, devicePluginConfig: ts12}}\n" for i in range(MAX_SHARED_NODES + 1)
    )
    pods = "".join(
        f"  - {{name: w{i}, namespace: apps, count: {MAX_TENANTS + 2}, node: ts{i}}}\n"
        for i in range(MAX_SHARED_NODES + 1)
    )
    scenario = (
        "name: t\nstack: nvidia-device-plugin\ndevicePluginConfigs:\n"
        "  ts12: {version: v1, sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 12}]}}}\n"
        f"nodes:\n{nodes}workloads:\n{pods}"
    )
    snapshot = gather(built(scenario).cluster)
    configs = {k: str(v) for cm in snapshot.configmaps for k, v in (cm.get("data") or {}).items()}
    keys = shared_gpu_tenants(snapshot.pods, snapshot.nodes, configs, skip=("kube-system",))
    assert len(keys) == MAX_SHARED_NODES * MAX_TENANTS
    assert {k[1].partition("-")[0] for k in keys} == {f"w{i}" for i in range(MAX_SHARED_NODES)}
    unshared = gather(built(_cluster(config="whole")).cluster)
    assert not shared_gpu_tenants(unshared.pods, unshared.nodes, {}, skip=("kube-system",))
