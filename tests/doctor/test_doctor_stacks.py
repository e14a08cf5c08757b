"""Stack detection: each stack recognised from its own objects, absent API groups read as "not this
stack", fixes rendered with the stack's own names. NVIDIA's sample ClusterPolicy comes from
NVIDIA/gpu-operator (see fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube.kmock_server import kmock_server

from gpuchain.doctor import diagnose, gather, run_doctor
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY, detect, is_gpu_node
from gpuchain.doctor.stacks.gpu_operator import lenient_policy
from gpuchain.kube import CONFIGMAP, DAEMONSET, EVENT, NODE, POD, LiveCluster, MemoryCluster
from gpuchain.kube.kinds import CLUSTER_POLICY, RUNTIME_CLASS
from gpuchain.sim import build, load_scenario

FIXTURES = Path(__file__).parent / "fixtures"
STACK_OF = {
    "healthy": "gpuchain",
    "healthy-gpu-operator": "gpu-operator",
    "healthy-nvidia-device-plugin": "nvidia-device-plugin",
    "healthy-eks": "eks",
    "healthy-aks": "aks",
    "healthy-gke": "gke",
}


@pytest.mark.parametrize("scenario", sorted(STACK_OF))
def test_a_healthy_cluster_of_each_stack_reports_no_error_and_names_the_stack(scenario: str) -> None:
    sim = build(load_scenario(scenario))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not report.broken, [f.to_dict() for f in report.findings]
    assert report.stack["id"] == STACK_OF[scenario]
    assert report.gpu_nodes >= 3


def test_each_stack_renders_its_own_daemonset_names_and_namespace() -> None:
    names = {
        s: {
            (d["metadata"]["namespace"], d["metadata"]["name"]) for d in build(load_scenario(s)).cluster.list(DAEMONSET)
        }
        for s in STACK_OF
    }
    assert ("gpu-operator", "nvidia-operator-validator") in names["healthy-gpu-operator"]
    assert names["healthy-nvidia-device-plugin"] == {("kube-system", "nvidia-device-plugin-daemonset")}
    assert names["healthy-gke"] == {("kube-system", "nvidia-gpu-device-plugin-large-cos")}
    op = build(load_scenario("healthy-gpu-operator")).cluster
    assert [p["apiVersion"] for p in op.list(NVIDIA_CLUSTER_POLICY)] == ["nvidia.com/v1"]
    assert op.list(CLUSTER_POLICY) == []
    plugin = next(
        p for p in op.list(POD, namespace="gpu-operator") if p["metadata"]["name"].startswith("nvidia-device-plugin")
    )
    assert plugin["spec"]["containers"][0]["name"] == "nvidia-device-plugin"


def test_nvidias_sample_clusterpolicy_is_read_leniently() -> None:
    sample = yaml.safe_load((FIXTURES / "gpu-operator-v1_clusterpolicy.yaml").read_text())
    policy = lenient_policy(sample["spec"])
    assert policy.driver.enabled and policy.mig.strategy == "single"
    cluster = MemoryCluster([sample, _gpu_node("g")])
    report = run_doctor(cluster)
    assert (
        report.stack["id"] == "gpu-operator"
        and report.stack["policy"] == "clusterpolicies.nvidia.com/gpu-cluster-policy"
    )
    assert "policy.invalid" not in report.ids


def _gpu_node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
    }


def test_gpu_operator_over_http_where_gpuchain_io_is_not_served() -> None:
    """The 404 on gpuchain.io ClusterPolicies is "not this stack", never "reading the cluster failed"."""
    sim = build(load_scenario("healthy-gpu-operator"))
    with kmock_server() as (url, emulator):
        del emulator.resources["gpuchain.io/v1/clusterpolicies"]
        emulator.resources["nvidia.com/v1/clusterpolicies"] = {"namespaced": False, "verbs": {"get", "list", "create"}}
        live = LiveCluster.from_url(url)
        for kind in (NODE, NVIDIA_CLUSTER_POLICY, RUNTIME_CLASS, DAEMONSET, CONFIGMAP, POD, EVENT):
            for obj in sim.cluster.list(kind):
                meta = {
                    k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")
                }
                live.create({**obj, "metadata": meta})
        live.calls.reset()
        report = run_doctor(live)
    assert report.stack["id"] == "gpu-operator" and not report.broken
    assert report.api_calls["list"] <= 10


def test_fixes_on_the_gpu_operator_use_nvidias_names_never_gpuchains_chart() -> None:
    text = (FIXTURES.parent.parent.parent / "src/gpuchain/sim/scenarios/host-driver-conflict.yaml").read_text()
    data = yaml.safe_load(text) | {"stack": "gpu-operator", "name": "skew-op"}
    from gpuchain.sim import parse_scenario

    sim = build(parse_scenario(yaml.safe_dump(data)))
    report = diagnose(gather(sim.cluster))
    assert report.stack["id"] == "gpu-operator"
    fixes = " ".join(f.fix for f in report.findings)
    assert "clusterpolicies.nvidia.com cluster-policy" in fixes
    assert "helm install gpuchain" not in fixes


def test_cloud_gpu_nodes_are_found_without_nfd() -> None:
    eks = {"metadata": {"name": "n", "labels": {"node.kubernetes.io/instance-type": "p4d.24xlarge"}}}
    aks = {"metadata": {"name": "n", "labels": {"kubernetes.azure.com/accelerator": "nvidia"}}}
    cpu = {"metadata": {"name": "n", "labels": {"node.kubernetes.io/instance-type": "m5.xlarge"}}}
    assert is_gpu_node(eks) and is_gpu_node(aks) and not is_gpu_node(cpu)


def test_no_stack_is_reported_as_none() -> None:
    snap = gather(MemoryCluster([_gpu_node("g")]))
    assert detect(snap).id == "none"


def test_gpu_zero_in_capacity_with_gpus_present_is_not_registered_not_all_in_use() -> None:
    """`nvidia.com/gpu: 0` on a node whose GFD labels count 8 GPUs: the plugin announces nothing."""
    sim = build(load_scenario("healthy-gpu-operator"))
    node = sim.cluster.get(NODE, name="gpu-1")
    status = node["status"]
    sim.cluster.patch_status(
        NODE,
        name="gpu-1",
        status={
            "capacity": {**status["capacity"], "nvidia.com/gpu": "0"},
            "allocatable": {**status["allocatable"], "nvidia.com/gpu": "0"},
        },
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    [group] = report.root_causes
    assert group.id == "device-plugin.not-registered" and group.nodes == ("gpu-1",)
    assert "nvidia.com/gpu: 0" in group.first.evidence[0]
    assert any(e == "GPUs present: nvidia.com/gpu.count=8" for e in group.first.evidence)
    assert "this is not 'all GPUs in use'" in group.first.cause


def test_the_one_renderer_writes_the_daemonset_commands_kubectl_takes() -> None:
    """Labelling an operand's namespace, re-configuring and re-limiting its DaemonSet, restarting a pod and removing a
    Helm release are fixes as data, written by the stack's renderer in kubectl's and helm's own syntax."""
    stack = detect(gather(build(load_scenario("healthy-nvidia-device-plugin")).cluster))
    ds = "kube-system/nvidia-device-plugin-daemonset"
    privileged = Fix(FixOp.LABEL_NAMESPACE, "kube-system", {"pod-security.kubernetes.io/enforce": "privileged"})
    assert stack.render(privileged) == (
        "kubectl label namespace kube-system pod-security.kubernetes.io/enforce=privileged --overwrite"
    )
    assert stack.render(Fix(FixOp.SET_ENV, ds, {"env": {"MIG_STRATEGY": "mixed", "FAIL_ON_INIT_ERROR": "false"}})) == (
        "kubectl -n kube-system set env ds/nvidia-device-plugin-daemonset MIG_STRATEGY=mixed FAIL_ON_INIT_ERROR=false"
    )
    limits = {"container": "nvidia-device-plugin-ctr", "limits": {"memory": "512Mi", "cpu": "1"}}
    assert stack.render(Fix(FixOp.SET_LIMITS, ds, limits)) == (
        "kubectl -n kube-system set resources ds/nvidia-device-plugin-daemonset -c nvidia-device-plugin-ctr "
        "--limits=memory=512Mi,cpu=1"
    )
    restart = Fix.delete_pod("kube-system", "nvidia-device-plugin-abcde", fact="registration")
    assert restart.changes == {
        "kind": "Pod",
        "namespace": "kube-system",
        "name": "nvidia-device-plugin-abcde",
        "fact": "registration",
    }
    assert stack.render(restart) == "kubectl -n kube-system delete pod nvidia-device-plugin-abcde"
    release = Fix(FixOp.UNINSTALL, "dcgm", {"release": "dcgm", "namespace": "monitoring"})
    assert stack.render(release) == "helm -n monitoring uninstall dcgm"
