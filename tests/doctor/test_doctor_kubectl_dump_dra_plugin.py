"""A plain ``kubectl cluster-info dump`` of a GPU Operator cluster whose GPUs NVIDIA's DRA kubelet plugin serves in
the device plugin's place: the dump has no ClusterPolicy to say the device plugin is off, but the DRA kubelet plugin
pod on the node says the node's GPUs are its (NVIDIA installs the GPU Operator beside its DRA driver with
``devicePlugin.enabled=false``), so the device-plugin link is that plugin's, judged as where the policy says so: a
plugin that serves an older driver than the node's (the runtime refuses the claims' containers for a driver library
of another release, a Warning ``Failed`` Event) is named; a ready one that nothing shows stale is no fault.

The runtime's refusal is runc's wording for a bind-mount source that is gone ("error mounting ... no such file or
directory"), as containerd returns it in the kubelet's ``Failed`` Event ("Error: failed to create containerd task").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from doctor.small_cluster import built

from gpuchain.doctor import LinkState, Severity
from gpuchain.doctor.diagnose import diagnose, run_doctor
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.sim.build import SimCluster

NS = "gpu-operator"
#: The DRA driver's chart installed into the operator's own namespace, where the operator's device plugin ran.
DRA_NS = NS
CLUSTER = (
    "name: t\nstack: gpu-operator\npolicy: {driver: {version: '575.57.08'}}\nnodes:\n  - {name: cpu, gpu: false}\n"
    "  - {name: h100-a, preset: h100-80gb-x8}\n"
)
NODE = "h100-a"
OLD = "570.148.08"
REFUSED = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error mounting "
    f'"/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{OLD}" to rootfs at '
    f'"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{OLD}": stat /run/nvidia/driver/usr/lib/x86_64-linux-gnu/'
    f"libnvidia-ml.so.{OLD}: no such file or directory: unknown"
)


def _dra_instead_of_the_device_plugin() -> list[dict[str, Any]]:
    """Edits: the operator's device plugin gone (its GPUs no longer node capacity) and NVIDIA's DRA driver's kubelet
    plugin DaemonSet running ready on the GPU node, installed into the operator's namespace."""
    return [
        {"do": "delete-daemonset", "namespace": NS, "name": "nvidia-device-plugin-daemonset"},
        {"do": "node", "node": NODE, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "add-daemonset",
            "namespace": DRA_NS,
            "name": "nvidia-dra-driver-gpu-kubelet-plugin",
            "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.2",
            "labels": {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"},
            "containers": ["gpus"],
            "nodes": [NODE],
        },
        {
            "do": "pod",
            "daemonset": "nvidia-dra-driver-gpu-kubelet-plugin",
            "namespace": DRA_NS,
            "node": NODE,
            "containers": [{"name": "gpus", "ready": True, "state": {"running": True}}],
        },
    ]


def _claim_pod_refused(sim: SimCluster) -> None:
    """A training pod with a GPU ResourceClaim whose container the runtime cannot create: the CDI edits it was given
    mount the driver library of release `OLD`, which the node's driver no longer has."""
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer-0", "namespace": "ml"},
            "spec": {
                "nodeName": NODE,
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.04-py3"}],
            },
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "train",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": "RunContainerError"}},
                    }
                ],
            },
        }
    )
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "trainer-0.1", "namespace": "ml"},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "trainer-0"},
            "reason": "Failed",
            "type": "Warning",
            "count": 9,
            "message": REFUSED,
            "source": {"component": "kubelet", "host": NODE},
        }
    )


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def test_a_dra_plugin_serving_an_older_driver_is_named_from_a_kubectl_dump(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, *_dra_instead_of_the_device_plugin(), _claim_pod_refused), tmp_path)
    roots = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert [(f.id, f.node) for f in roots] == [("device-plugin.dra-stale-driver", NODE)]
    assert OLD in roots[0].cause and "575.57.08" in roots[0].cause
    assert roots[0].action is not None and roots[0].action.target.startswith(f"{DRA_NS}/nvidia-dra-driver-gpu")


def test_a_ready_dra_plugin_with_nothing_stale_is_no_fault_in_a_kubectl_dump(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, *_dra_instead_of_the_device_plugin()), tmp_path)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    (chain,) = [c for c in report.chains if c.node == NODE]
    plugin = next(link for link in chain.links if link.name == "device-plugin")
    assert plugin.state is LinkState.SKIPPED and "DRA kubelet plugin" in plugin.summary
    # What the dump cannot tell is said, not guessed: whether the plugin published the node's GPUs.
    assert any("no ResourceSlices" in line for line in report.not_judged), report.not_judged


def test_a_dump_with_its_resourceslices_does_not_say_it_lacks_them(tmp_path: Path) -> None:
    sim = built(CLUSTER, *_dra_instead_of_the_device_plugin())
    write_dump(sim.cluster, tmp_path)
    report = diagnose(read_dump(tmp_path))
    assert not any("no ResourceSlices" in line for line in report.not_judged), report.not_judged


def test_live_with_the_device_plugin_off_in_the_policy_the_dra_plugin_serves_the_node() -> None:
    """NVIDIA's documented install beside its DRA driver switches the device plugin off in the ClusterPolicy: read
    live, that is the DRA kubelet plugin's node, not a device plugin switched off with nothing in its place."""
    off = CLUSTER.replace("policy: {driver:", "policy: {devicePlugin: {enabled: false}, driver:")
    sim = built(off, *[e for e in _dra_instead_of_the_device_plugin() if e["do"] != "delete-daemonset"])
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not [f for f in report.findings if f.id == "device-plugin.disabled-in-policy"], report.findings
    (chain,) = [c for c in report.chains if c.node == NODE]
    plugin = next(link for link in chain.links if link.name == "device-plugin")
    assert plugin.state is LinkState.SKIPPED and "DRA kubelet plugin" in plugin.summary
