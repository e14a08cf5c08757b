"""ACK's shared GPU scheduling as a stack: the gpushare device plugin and cGPU found, and pods sharing a card that
cannot start for the sharing layer's own known reasons (a card over cGPU's pod limit; a cGPU release that fails on the
node's OS image) named at the device-plugin link with the sharing layer's repair; a card at its limit, or a pod failing
for a reason of its own, left quiet.

Sources: AliyunContainerService/gpushare-device-plugin device-plugin-ds.yaml (DaemonSet gpushare-device-plugin-ds,
container gpushare, image k8s-gpushare-plugin) and pkg/gpu/nvidia/const.go (aliyun.com/gpu-mem, ALIYUN_COM_GPU_MEM_IDX);
Alibaba Cloud's "Manage the shared GPU scheduling component" and "cGPU FAQ" pages (ack.yaml quotes them). Node names,
GPU counts, labels, releases, workloads and pod counts are stand-ins, unlike any held-out case's.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import Edit, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.stacks import ack

NODE = "ack-gpu-7"
SCENARIO = f"""
name: t
stack: none
nodes:
  - {{name: {NODE}, preset: l4-x2, hostDriver: "570.133.20", osImage: "Ubuntu 22.04.5 LTS", kernel: 5.15.0-131-generic}}
  - {{name: ack-cpu-1, gpu: false}}
"""


def _node(kernel: str = "5.15.0-131-generic", gpu_mem: str = "46") -> dict[str, Any]:
    return {
        "do": "node",
        "node": NODE,
        "nodeInfo": {"kernelVersion": kernel},
        "labels": {"ack.node.gpu.schedule": "core_mem"},
        "capacity": {"aliyun.com/gpu-mem": "46", "aliyun.com/gpu-count": "2"},
        "allocatable": {"aliyun.com/gpu-mem": gpu_mem, "aliyun.com/gpu-count": "2"},
    }


def _daemonsets(cgpu: str, installer: str) -> list[dict[str, Any]]:
    chart = {"helm.sh/chart": f"ack-ai-installer-{installer}"}
    return [
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "gpushare-device-plugin-ds",
            "labels": {"component": "gpushare-device-plugin", **chart},
            "image": "registry-cn-beijing-vpc.ack.aliyuncs.com/acs/k8s-gpushare-plugin:v3.7.1-aliyun",
            "containers": ["gpushare"],
            "nodes": [NODE],
        },
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "cgpu-installer",
            "labels": chart,
            "image": f"registry-cn-beijing-vpc.ack.aliyuncs.com/acs/cgpu-installer:{cgpu}",
            "containers": ["cgpu-installer"],
            "nodes": [NODE],
        },
    ]


def _created(obj: dict[str, Any]) -> Edit:
    """An edit: ``obj`` created in the cluster as the API server would hold it."""
    return lambda sim: sim.cluster.create(obj)


def _pod(i: int, card: str, *, fails: str = "") -> Edit:
    """Replica ``i`` of StatefulSet ``ranker`` sharing GPU ``card``, running or failing to start with ``fails``."""
    status: dict[str, Any] = {
        "phase": "Running",
        "containerStatuses": [{"name": "ranker", "ready": True, "restartCount": 0, "state": {"running": {}}}],
    }
    if fails:
        state = {"waiting": {"reason": "RunContainerError", "message": fails}}
        last = {"terminated": {"reason": "StartError", "exitCode": 128, "message": fails}}
        status = {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "ranker", "ready": False, "restartCount": 3, "state": state, "lastState": last}
            ],
        }
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ranker", "uid": "u1", "controller": True}
    return _created(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"ranker-{i}",
                "namespace": "search",
                "ownerReferences": [owner],
                "annotations": {ack.GPU_INDEX: card, "ALIYUN_COM_GPU_MEM_ASSIGNED": "true"},
            },
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": "ranker", "image": "example/ranker:2", "resources": {"limits": {ack.GPU_MEM: "2"}}}
                ],
            },
            "status": status,
        }
    )


NAMESPACE = _created({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "search"}})
OVER = "Error occurs when creating cGPU instance: unknown"
HOOK = (
    "OCI runtime create failed: runc create failed: error running hook #0: exit status 1, stdout: , stderr: : unknown"
)


def _report(*pods: Edit, cgpu: str = "1.5.20", installer: str = "1.13.0", kernel: str = "") -> Report:
    return diagnosed(SCENARIO, _node(kernel) if kernel else _node(), *_daemonsets(cgpu, installer), NAMESPACE, *pods)


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_stack_is_ack_gpushare_with_its_releases() -> None:
    report = _report(_pod(0, "0"), cgpu="1.5.19", installer="1.12.8")
    assert report.stack["id"] == "ack-gpushare"
    assert (
        "ack-ai-installer 1.12.8" in report.stack["notes"] and "cGPU 1.5.19 by cgpu-installer" in report.stack["notes"]
    )
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []


def test_card_over_the_pod_limit_scales_its_owner_down() -> None:
    pods = [_pod(i, "1") for i in range(20)] + [_pod(20 + i, "1", fails=OVER) for i in range(3)]
    pods += [_pod(30 + i, "0") for i in range(4)]
    errors = _errors(_report(*pods))
    assert [f.id for f in errors] == ["device-plugin.cgpu-pod-limit"]
    found = errors[0]
    assert found.node == NODE and found.link == "device-plugin" and found.root
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "StatefulSet/search/ranker"
    assert found.action.changes["patch"] == {"spec": {"replicas": 24}}  # 27 replicas, 3 over the limit on GPU 1
    assert "23 pods share GPU 1" in found.cause


def test_cards_each_under_the_limit_stay_quiet() -> None:
    pods = [_pod(i, "0") for i in range(20)] + [_pod(20 + i, "1") for i in range(18)]
    assert not _errors(_report(*pods))


def test_pod_failing_on_a_card_under_the_limit_is_not_the_limit() -> None:
    pods = [_pod(i, "0") for i in range(5)] + [_pod(9, "0", fails=HOOK)]
    assert not [f for f in _report(*pods).findings if f.id.startswith("device-plugin.cgpu")]


def test_old_cgpu_on_containeros_kernel_names_the_installer_release() -> None:
    pods = [_pod(0, "0", fails=HOOK)]
    errors = _errors(_report(*pods, cgpu="1.5.9", installer="1.10.1", kernel="5.10.134-16.3.lifsea8.x86_64"))
    assert [f.id for f in errors] == ["device-plugin.cgpu-os-defect"]
    assert errors[0].node == NODE and errors[0].root
    assert "ack-ai-installer to 1.12.6 or later" in errors[0].fix
    assert "kubectl delete pod -n search ranker-0" in errors[0].fix


def test_fixed_cgpu_on_containeros_or_old_cgpu_elsewhere_is_not_the_defect() -> None:
    pods = [_pod(0, "0", fails=HOOK)]
    on_fixed = _report(*pods, cgpu="1.5.19", kernel="5.10.134-16.3.lifsea8.x86_64")
    on_ubuntu = _report(*pods, cgpu="1.5.9")
    for report in (on_fixed, on_ubuntu):
        assert not [f for f in report.findings if f.id == "device-plugin.cgpu-os-defect"]


def test_facts_come_from_the_data_file() -> None:
    facts = ack.facts()
    assert facts.pods_per_gpu == 20
    assert facts.cgpu_labels["ack.node.gpu.schedule"] == ("cgpu", "core_mem")
    assert [d.installer_fixed for d in facts.os_defects] == ["1.12.6"]


def test_a_cgpu_node_announcing_no_gpu_memory_restarts_its_gpushare_pod() -> None:
    report = diagnosed(SCENARIO, _node(gpu_mem="0"), *_daemonsets("1.5.20", "1.13.0"), NAMESPACE)
    (found,) = _errors(report)
    assert (found.id, found.link, found.node) == ("device-plugin.gpushare-unannounced", "device-plugin", NODE)
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.action.changes["name"].startswith("gpushare-device-plugin-ds")
