"""The production checklist: pass on a healthy cluster, the right items fail on broken ones."""

from __future__ import annotations

from typing import Any

from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.verify import GpuTestOutcome, Status, checklist, cuda_of_image, live_test_pod
from gpuchain.kube import POD, MemoryCluster
from gpuchain.sim import build, load_scenario


def _statuses(name: str, **kwargs: Any) -> dict[str, Status]:
    snap = gather(build(load_scenario(name)).cluster)
    return {i.id: i.status for i in checklist(snap, **kwargs).items}


def test_healthy_cluster_passes_every_item_but_mig_which_is_skipped() -> None:
    ok = GpuTestOutcome(ok=True, node="gpu-2", output="GPU 0: NVIDIA H100 80GB HBM3")
    got = _statuses("healthy", pod=ok)
    assert got == {
        "driver-version": Status.PASS,
        "toolkit": Status.PASS,
        "device-plugin-count": Status.PASS,
        "test-pod": Status.PASS,
        "metrics": Status.PASS,
        "mig-resources": Status.SKIP,
    }


def test_driver_older_than_the_cuda_image_fails() -> None:
    assert cuda_of_image("nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04") == (13, 0)
    assert cuda_of_image("busybox") is None
    got = _statuses("healthy", cuda_image="nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04")
    assert got["driver-version"] is Status.FAIL


def test_each_broken_scenario_fails_its_item() -> None:
    assert _statuses("leftover-time-slicing")["device-plugin-count"] is Status.FAIL
    assert _statuses("gpu-fell-off-bus")["device-plugin-count"] is Status.FAIL
    assert _statuses("exporter-down")["metrics"] is Status.FAIL
    assert _statuses("runtime-not-configured")["toolkit"] is Status.FAIL
    assert _statuses("mig-56")["mig-resources"] is Status.PASS
    assert _statuses("mig-stuck-pending")["mig-resources"] is Status.FAIL
    friday = _statuses("friday-scale-out")
    assert friday["driver-version"] is Status.FAIL and friday["toolkit"] is Status.FAIL


def test_live_test_pod_waits_reads_the_log_and_always_deletes_the_pod() -> None:
    cluster = MemoryCluster()

    def kubelet(_seconds: float) -> None:  # stands in for the scheduler + kubelet between polls
        cluster.patch(POD, name="gpu-test", patch={"spec": {"nodeName": "gpu-0"}}, namespace="default")
        cluster.patch_status(POD, name="gpu-test", status={"phase": "Succeeded"}, namespace="default")

    outcome = live_test_pod(
        cluster,
        reader=lambda ns, pod, c: "GPU 0: NVIDIA H100" if (ns, pod, c) == ("default", "gpu-test", "cuda") else None,
        sleep=kubelet,
        poll=0.0,
        timeout=5,
    )
    assert outcome.ok and outcome.node == "gpu-0" and outcome.output == "GPU 0: NVIDIA H100"
    assert cluster.get_or_none(POD, name="gpu-test", namespace="default") is None


def test_live_test_pod_times_out_as_a_failure_with_the_phase() -> None:
    cluster = MemoryCluster()
    outcome = live_test_pod(cluster, reader=None, sleep=lambda _s: None, poll=0.0, timeout=0.01)
    assert not outcome.ok and "Pending" in outcome.reason
    assert cluster.get_or_none(POD, name="gpu-test", namespace="default") is None


def test_metrics_item_says_it_checks_readiness_and_hints_the_real_namespace_and_pod() -> None:
    """No pod proxy in the Cluster port: the item is named for what it checks, and its hand command
    port-forwards a real exporter pod in the operator's namespace (the operator creates no Service)."""
    scenario = load_scenario("healthy").model_copy(update={"namespace": "gpus"})
    sim = build(scenario)
    item = next(i for i in checklist(gather(sim.cluster, namespace="gpus")).items if i.id == "metrics")
    assert item.status is Status.PASS
    assert item.title == "exporter ready"
    assert any("not scraped" in line for line in item.evidence)
    assert item.command.startswith("kubectl -n gpus port-forward pod/")
    exporter_pods = {p["metadata"]["name"] for p in sim.cluster.list(POD, namespace="gpus")}
    assert item.command.split("pod/")[1].split()[0] in exporter_pods
    assert "svc/" not in item.command and "gpu-operator" not in item.command
