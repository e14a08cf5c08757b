"""GPU pods that name no RuntimeClass on nodes whose toolkit is told not to make nvidia the default runtime: they run
under runc with no driver and fall back to the CPU; the doctor reads their log and gives them the runtime class (or
the toolkit's setting back).

Facts: the toolkit installer's set-as-default flag, on unless one of NVIDIA_RUNTIME_SET_AS_DEFAULT,
CONTAINERD_SET_AS_DEFAULT, DOCKER_SET_AS_DEFAULT says false (NVIDIA/nvidia-container-toolkit
cmd/nvidia-ctk-installer/container/runtime/runtime.go@0a5f2ec8), read with Go's strconv.ParseBool. The pods' words:
bash's "%s: command not found" (bminor/bash execute_cmd.c@bash-5.2) and PyTorch's "Found no NVIDIA driver on your
system" (pytorch/pytorch c10/cuda/CUDAFunctions.cpp). The toolkit env of a k0s node as mudler/LocalAI#2117's
cluster ran it is tests/sim/heldout36's; these vary the node, the variable, its spelling and the workload's words.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout3.harness import _apply

from gpuchain.doctor.model import Severity
from gpuchain.doctor.unclassed import toolkit_not_default
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

NODES = "nodes:\n  - {name: trainer-7, preset: t4-x4}\nworkloads:\n  - {name: app, namespace: ml, count: 2, gpus: 1, node: trainer-7}\n"
OPERATOR = "name: t\nstack: gpu-operator\n" + NODES


def toolkit(name: str, value: str) -> Any:
    """The ClusterPolicy's toolkit env set to ``name``=``value`` (heldout3's policy edit)."""

    def edit(sim: SimCluster) -> None:
        _apply(sim.cluster, {"do": "policy", "spec": {"toolkit": {"env": [{"name": name, "value": value}]}}})

    return edit


def said(text: str, **spec: Any) -> dict[str, Any]:
    return {"do": "pod", "daemonset": "app", "namespace": "ml", "node": "trainer-7", "logs": {"main": text}, **spec}


def test_a_pod_without_a_class_under_a_toolkit_told_not_to_be_default_gets_the_class_or_the_setting_back() -> None:
    report = diagnosed(
        OPERATOR,
        toolkit("NVIDIA_RUNTIME_SET_AS_DEFAULT", "0"),
        said(
            "starting\nRuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
            "installed a driver from http://www.nvidia.com/Download/index.aspx\nfalling back to cpu\n"
        ),
    )
    (found,) = [f for f in report.findings if f.id == "workload.no-driver-in-pod"]
    assert found.node == "trainer-7" and found.link == "toolkit" and found.root
    assert '"runtimeClassName":"nvidia"' in found.fix
    assert (
        "NVIDIA_RUNTIME_SET_AS_DEFAULT=0" in found.fix
        and '"name":"NVIDIA_RUNTIME_SET_AS_DEFAULT","value":"true"' in found.fix
    )


def test_a_script_that_finds_no_nvidia_smi_says_the_same() -> None:
    report = diagnosed(
        OPERATOR,
        toolkit("CONTAINERD_SET_AS_DEFAULT", "false"),
        said("entrypoint: line 7: nvidia-smi: command not found\nno GPU found, using CPU\n"),
    )
    assert [f.node for f in report.findings if f.id == "workload.no-driver-in-pod"] == ["trainer-7"]


def test_a_pod_with_the_class_under_the_same_toolkit_stays_quiet() -> None:
    def classed(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD, namespace="ml"):
            sim.cluster.patch(
                POD, name=pod["metadata"]["name"], namespace="ml", patch={"spec": {"runtimeClassName": "nvidia"}}
            )

    report = diagnosed(
        OPERATOR, toolkit("CONTAINERD_SET_AS_DEFAULT", "false"), classed, said("Tesla T4 found, CUDA 12.4\n")
    )
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []


def test_a_toolkit_left_default_reads_no_running_pods_log() -> None:
    report = diagnosed(OPERATOR, toolkit("CONTAINERD_SET_AS_DEFAULT", "true"), said("nvidia-smi: command not found\n"))
    assert not [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_the_setting_is_read_as_go_reads_a_bool() -> None:
    assert toolkit_not_default({"CONTAINERD_SET_AS_DEFAULT": "False"}) == "CONTAINERD_SET_AS_DEFAULT=False"
    assert toolkit_not_default({"DOCKER_SET_AS_DEFAULT": "f"}) == "DOCKER_SET_AS_DEFAULT=f"
    assert toolkit_not_default({"CONTAINERD_SET_AS_DEFAULT": "true"}) == ""
    assert toolkit_not_default({"CONTAINERD_RUNTIME_CLASS": "nvidia"}) == ""
