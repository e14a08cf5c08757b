"""The one answer to "which GPUs does this pod or node have", as the kubelet counts them."""

from __future__ import annotations

from typing import Any

import pytest

from gpuchain.kube.gpu_resources import is_gpu_resource, node_gpu_resources, pod_gpu_requests, shares_a_gpu, uses_gpus


def _container(name: str, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}}, **extra}


def _pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/gpu.a100", True),  # renamed by the plugin's sharing config
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-1g.10gb.me", True),
        ("nvidia.com/mig-3g.40gb.shared", True),
        ("nvidia.com/gpus", False),
        ("nvidia.com/gpu-burn", False),
        ("nvidia.com/hostdev", False),
        ("example.com/gpu", False),
        ("cpu", False),
    ],
)
def test_gpu_resource_names(name: str, gpu: bool) -> None:
    assert is_gpu_resource(name) is gpu


def test_node_resources_pick_gpu_ones_from_the_named_field() -> None:
    node = {
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0", "nvidia.com/hostdev": "2"},
            "allocatable": {"nvidia.com/gpu": "7", "nvidia.com/gpu.shared": "bad"},
        }
    }
    assert node_gpu_resources(node) == {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 0}
    assert node_gpu_resources(node, "allocatable") == {"nvidia.com/gpu": 7}
    assert node_gpu_resources({}) == {}


def test_pod_sums_app_containers_and_reads_requests_when_no_limit() -> None:
    pod = _pod(
        [
            _container("a", {"nvidia.com/gpu": "2", "cpu": "1"}),
            _container("b", {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": "1"}),
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu.shared": "1"}}},
            _container("d", {"nvidia.com/hostdev": "1"}),
        ]
    )
    assert pod_gpu_requests(pod) == {"nvidia.com/gpu": 3, "nvidia.com/gpu.shared": 1, "nvidia.com/mig-1g.10gb": 1}


def test_init_containers_count_as_the_kubelet_counts_them() -> None:
    # Regular init containers run one at a time before the app: the pod needs the larger of
    # the biggest init container and the app containers' sum.
    pod = _pod(
        [_container("app", {"nvidia.com/gpu": "1"})],
        init=[_container("warm", {"nvidia.com/gpu": "4"}), _container("other", {"nvidia.com/mig-1g.10gb": "1"})],
    )
    assert pod_gpu_requests(pod) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 1}


def test_sidecars_run_beside_later_init_containers_and_the_app() -> None:
    pod = _pod(
        [_container("app", {"nvidia.com/gpu": "1"})],
        init=[
            _container("sidecar", {"nvidia.com/gpu": "1"}, restartPolicy="Always"),
            _container("setup", {"nvidia.com/gpu": "2"}),
        ],
    )
    # setup runs with the sidecar already up (1 + 2); the app runs beside it too (1 + 1).
    assert pod_gpu_requests(pod) == {"nvidia.com/gpu": 3}


def test_a_pod_that_only_uses_gpus_in_an_init_container_uses_gpus() -> None:
    pod = _pod([_container("app")], init=[_container("check", {"nvidia.com/gpu": "1"})])
    assert uses_gpus(pod)


def test_a_pod_asking_for_no_gpu_or_zero_does_not_use_gpus() -> None:
    assert not uses_gpus(_pod([_container("app", {"cpu": "1", "nvidia.com/hostdev": "1"})]))
    assert not uses_gpus(_pod([_container("app", {"nvidia.com/gpu": "0"})]))
    assert pod_gpu_requests({}) == {}


def test_a_pod_asking_a_sharing_scheduler_for_part_of_a_gpu_shares_one() -> None:
    koordinator = {
        "koordinator.sh/gpu.shared": "1",
        "koordinator.sh/gpu-core": "50",
        "koordinator.sh/gpu-memory": "3724Mi",
    }
    assert shares_a_gpu(_pod([_container("main", koordinator)]))
    assert pod_gpu_requests(_pod([_container("main", koordinator)])) == {}
    assert shares_a_gpu(_pod([_container("main", {"aliyun.com/gpu-mem": "4"})]))
    assert not shares_a_gpu(_pod([_container("main", {"cpu": "4", "memory": "2Gi", "nvidia.com/hostdev": "1"})]))
    assert not shares_a_gpu(_pod([_container("main", {"koordinator.sh/gpu.shared": "0"})]))
