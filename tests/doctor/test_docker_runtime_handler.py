"""A GPU pod whose RuntimeClass names an NVIDIA handler on a node that runs pods through Docker. Sources:
Mirantis/cri-dockerd core/sandbox_run.go@v0.3.9 ("RuntimeHandler %q not supported" for every handler but docker,
as the kubelet's dockershim said it to Kubernetes 1.23), cri-dockerd#350 (from v0.4.0 the handler is handed to the
Docker runtime of that name, core/sandbox_helpers.go@v0.4.0: "no runtime for %q is configured" where Docker has
none). The GPU reaches a Docker node's containers through Docker's default runtime instead. The held-out cases
(heldout43 h43-01, h43-03) are an SGLang Deployment on an L4 node, Docker 26, kubelet 1.29; here the device plugin
itself or a Job asks for the class, on other nodes, GPUs, versions and handlers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from sim.heldout9.harness import _apply as apply_edit

from gpuchain.doctor.links.runtime_handler import docker_handler_repair
from gpuchain.doctor.model import Finding, Report, Severity

SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {{name: gpu-a, preset: a100-40gb-x8, hostDriver: 535.183.01, containerRuntime: '{runtime}'}}\n"
    "  - {{name: gpu-b, preset: a100-40gb-x8, hostDriver: 535.183.01, containerRuntime: '{runtime}'}}\n"
    "  - {{name: gpu-c, preset: a100-40gb-x8, hostDriver: 535.183.01, containerRuntime: '{runtime}'}}\n"
)
DOCKER = "docker://24.0.9"


def _created(obj: dict[str, Any]) -> Callable[[Any], None]:
    """An object created in the built cluster (heldout9's create edit)."""
    return lambda sim: apply_edit(sim.cluster, {"do": "create", "object": obj})


def _runtime_class(name: str) -> Callable[[Any], None]:
    return _created(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
    )


def _stuck_job(handler: str, said: str) -> list[Callable[[Any], None]]:
    """A training Job's pod on gpu-b on RuntimeClass ``handler``, its sandbox refused with ``said``."""
    name = "finetune-4x7kq"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "research", "labels": {"job-name": "finetune"}},
        "spec": {
            "nodeName": "gpu-b",
            "runtimeClassName": handler,
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "train",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        },
    }
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name + ".18a0", "namespace": "research"},
        "involvedObject": {"kind": "Pod", "name": name, "namespace": "research"},
        "type": "Warning",
        "reason": "FailedCreatePodSandBox",
        "message": f"Failed to create pod sandbox: rpc error: code = Unknown desc = {said}",
        "count": 9,
        "source": {"component": "kubelet", "host": "gpu-b"},
    }
    return [_runtime_class(handler), _created(pod), _created(event)]


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_shim_that_takes_no_handler_is_the_toolkit_with_no_runtime_class_and_docker_default() -> None:
    report = diagnosed(SCENARIO.format(runtime=DOCKER), *_stuck_job("nvidia", 'RuntimeHandler "nvidia" not supported'))
    (found,) = _errors(report)
    assert (found.id, found.link, found.node) == ("toolkit.runtime-not-configured", "toolkit", "gpu-b")
    assert "cri-dockerd.runtime-handler-not-supported" in " ".join(found.evidence)
    assert "remove runtimeClassName: nvidia" in found.fix
    assert "--runtime=docker --set-as-default" in found.fix and "cri-dockerd to v0.4.0" in found.fix
    assert "containerd" not in found.fix


def test_an_nvidia_mode_handler_is_named_in_the_repair() -> None:
    said = 'RuntimeHandler "nvidia-cdi" not supported'
    report = diagnosed(SCENARIO.format(runtime=DOCKER), *_stuck_job("nvidia-cdi", said))
    (found,) = _errors(report)
    assert found.link == "toolkit" and "remove runtimeClassName: nvidia-cdi" in found.fix


def test_cri_dockerd_that_passes_handlers_to_a_docker_without_the_runtime_registers_it() -> None:
    said = 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    report = diagnosed(SCENARIO.format(runtime=DOCKER), *_stuck_job("nvidia", said))
    (found,) = _errors(report)
    assert (found.id, found.link) == ("toolkit.runtime-not-configured", "toolkit")
    assert "nvidia-ctk runtime configure --runtime=docker" in found.fix and "daemon.json" in found.fix
    assert "CONTAINERD_CONFIG" not in found.fix


def test_the_same_words_on_containerd_keep_the_containerd_repair() -> None:
    said = 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    report = diagnosed(SCENARIO.format(runtime="containerd://1.7.22"), *_stuck_job("nvidia", said))
    (found,) = _errors(report)
    assert found.link == "toolkit" and "--runtime=containerd" in found.fix and "daemon.json" not in found.fix


@pytest.mark.parametrize("handler", ["runsc", "kata"])
def test_a_handler_not_nvidias_stays_on_the_node_link(handler: str) -> None:
    said = f'RuntimeHandler "{handler}" not supported'
    report = diagnosed(SCENARIO.format(runtime=DOCKER), *_stuck_job(handler, said))
    assert [(f.id, f.link) for f in _errors(report)] == [("node.sandbox-failed", "node")]


def test_a_docker_node_running_gpu_pods_without_a_runtime_class_is_quiet() -> None:
    report = diagnosed(SCENARIO.format(runtime=DOCKER), _runtime_class("nvidia"))
    assert _errors(report) == []


def test_the_repair_follows_the_words_and_the_runtime() -> None:
    refused = ['event FailedCreatePodSandBox on pod p: RuntimeHandler "nvidia-legacy" not supported']
    assert docker_handler_repair("containerd", refused) is None
    assert "runtimeClassName: nvidia-legacy" in (docker_handler_repair("docker", refused) or "")
    missing = docker_handler_repair("docker", ['no runtime for "nvidia" is configured']) or ""
    assert "adds the nvidia runtime to /etc/docker/daemon.json" in missing


#: NVIDIA's operator on two containerd GPU nodes and one still on Docker (cri-dockerd 0.3): the operator configures
#: containerd for the whole cluster (controllers/state_manager.go getRuntime) and puts its operands on RuntimeClass
#: nvidia. Shaped after tests/sim/heldout58 h58-01 (k3s, three T4 nodes) on kubeadm, A100s and other versions.
OPERATOR = (
    "name: t\nstack: gpu-operator\nnodes:\n"
    "  - {name: gpu-a, preset: a100-40gb-x8, containerRuntime: 'containerd://1.7.22'}\n"
    "  - {name: gpu-b, preset: a100-40gb-x8, containerRuntime: 'docker://24.0.9'}\n"
    "  - {name: gpu-c, preset: a100-40gb-x8, containerRuntime: 'containerd://1.7.22'}\n"
)
REFUSED_SANDBOX = 'Failed to create pod sandbox: rpc error: code = Unknown desc = RuntimeHandler "nvidia" not supported'


def _operands_refused(node: str) -> list[dict[str, Any]]:
    """The operator's plugin, GFD and validator pods on ``node``, each waiting for a sandbox the shim refuses."""
    return [
        {
            "do": "pod",
            "daemonset": ds,
            "node": node,
            "init": [{"name": init, "state": {"waiting": "ContainerCreating"}}],
            "events": [{"reason": "FailedCreatePodSandBox", "count": 5, "message": REFUSED_SANDBOX}],
        }
        for ds, init in (
            ("nvidia-device-plugin-daemonset", "toolkit-validation"),
            ("gpu-feature-discovery", "toolkit-validation"),
            ("nvidia-operator-validator", "driver-validation"),
        )
    ]


def test_a_docker_node_among_the_operators_containerd_nodes_joins_them_or_is_opted_out() -> None:
    report = diagnosed(OPERATOR, *_operands_refused("gpu-b"))
    (found,) = _errors(report)
    assert (found.id, found.link, found.node) == ("toolkit.runtime-not-configured", "toolkit", "gpu-b")
    assert "move gpu-b to containerd" in found.fix and "mixed runtimes are not supported" in found.fix
    assert "kubectl label node gpu-b nvidia.com/gpu.deploy.operands=false" in found.fix
    assert "remove runtimeClassName" not in found.fix  # the operator puts it back on its operands
