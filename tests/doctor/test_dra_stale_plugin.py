"""NVIDIA's DRA kubelet plugin left running from before the driver's current incarnation (links/dra_stale.py).

The plugin publishes each GPU with the driver release as device attribute driverVersion, semver-normalised
(NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go@v25.8.0: Masterminds semver, so 570.148.08 reads
"570.148.8"), and writes CDI edits that mount the driver's versioned libraries (cdi.go@v25.8.0); it reads the driver
once, at its start. After a driver reload at another release it serves the old one until recreated, which
k8s-driver-manager v0.12.0 does across reloads where the node carries nvidia.com/gpu.deploy.dra-driver
(NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0 evictKubeletPlugin; NVIDIA/k8s-driver-manager#203).
The runtime's refusal of a mount source that is not there is runc's wording ("error mounting %q to rootfs at %q",
opencontainers/runc libcontainer/rootfs_linux.go, with stat's ENOENT); nodes, releases and UUIDs are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

from sim.heldout9.harness import load

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Finding, Severity
from gpuchain.kube import POD

NODE = "a10g-pool-3"
STALE = "device-plugin.dra-stale-driver"


def _refused(library: str) -> str:
    src = f"/run/nvidia/driver/usr/lib/x86_64-linux-gnu/{library}"
    return (
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        f'failed: unable to start container process: error during container init: error mounting "{src}" to rootfs '
        f'at "/usr/lib/x86_64-linux-gnu/{library}": stat {src}: no such file or directory: unknown'
    )


def _findings(
    tmp_path: Path,
    *,
    driver: str,
    published: str | None,
    refused: str | None = None,
    manager: str | None = None,
    plugin_started: str | None = None,
) -> list[Finding]:
    """A GPU Operator node whose GPUs a DRA kubelet plugin serves (device plugin off), its driver pod at ``driver``
    after one reload; the plugin's ResourceSlice publishes ``published`` as driverVersion (None: no attribute); a
    claim pod refused with ``refused``; the ClusterPolicy's driver manager release ``manager``."""
    attributes: dict[str, object] = {"type": {"string": "gpu"}, "uuid": {"string": "GPU-7d1e0c44-2b9a-4c61-9f3e-1"}}
    if published:
        attributes["driverVersion"] = {"version": published}
    policy: dict[str, object] = {"driver": {"version": driver}}
    if manager:
        policy["driver"] = {"version": driver, "manager": {"version": manager}}
    edits: list[dict[str, object]] = [
        {"do": "policy", "spec": {"devicePlugin": {"enabled": False}}},
        {"do": "delete-daemonset", "namespace": "gpu-operator", "name": "nvidia-device-plugin-daemonset"},
        {"do": "node", "node": NODE, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "namespace": "gpu-operator",
            "node": NODE,
            "containers": [
                {"name": "nvidia-driver-ctr", "ready": True, "restarts": 1, "state": {"running": True}},
            ],
        },
        {
            "do": "add-daemonset",
            "namespace": "dra",
            "name": "nvidia-dra-driver-gpu-kubelet-plugin",
            "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
            "containers": ["gpus"],
            "nodes": [NODE],
        },
        {
            "do": "pod",
            "daemonset": "nvidia-dra-driver-gpu-kubelet-plugin",
            "namespace": "dra",
            "node": NODE,
            "containers": [{"name": "gpus", "ready": True, "state": {"running": True}}],
        },
        {
            "do": "create",
            "object": {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{NODE}-gpu.nvidia.com-q8x2m"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": NODE,
                    "pool": {"generation": 1, "name": NODE, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0", "attributes": attributes}],
                },
            },
        },
    ]
    if refused:
        edits += [
            {
                "do": "add-pod",
                "namespace": "vision",
                "name": "detector-5f7c9-kq2lm",
                "node": NODE,
                "containers": ["app"],
            },
            {
                "do": "pod",
                "daemonset": "detector",
                "namespace": "vision",
                "node": NODE,
                "phase": "Pending",
                "containers": [{"name": "app", "state": {"waiting": "RunContainerError"}}],
                "events": [{"reason": "Failed", "count": 9, "message": refused}],
            },
        ]
    doc = {
        "name": "dra-stale",
        "source": "NVIDIA/k8s-driver-manager#203",
        "base": {
            "stack": "gpu-operator",
            "policy": policy,
            "nodes": [{"name": NODE, "preset": "l4-x2", "labels": {"nvidia.com/gpu.deploy.dra-driver": "true"}}],
        },
        "edits": edits,
        "expect": {"root": "none"},
    }
    path = tmp_path / "case.yaml"
    path.write_text(json.dumps(doc))
    case = load(path)
    if plugin_started:
        for pod in case.cluster.list(POD, namespace="dra"):
            status = pod["status"]
            status["containerStatuses"][0]["state"] = {"running": {"startedAt": plugin_started}}
            case.cluster.patch_status(POD, name=pod["metadata"]["name"], status=status, namespace="dra")
    report = run_doctor(case.cluster, reader=case.read_log)
    return [f for f in report.findings if f.severity is not Severity.INFO]


def _stale(findings: list[Finding]) -> Finding:
    found = [f for f in findings if f.id == STALE]
    assert len(found) == 1, [f.id for f in findings]
    assert (found[0].link, found[0].node, found[0].severity) == ("device-plugin", NODE, Severity.ERROR)
    return found[0]


def test_a_slice_of_the_previous_driver_release_is_a_plugin_to_recreate(tmp_path: Path) -> None:
    """The plugin's own ResourceSlice says it enumerated 570.148.08 while the driver pod runs 575.57.08: no claim
    has failed yet, and the plugin is recreated, with the driver manager release that drains it next time."""
    finding = _stale(_findings(tmp_path, driver="575.57.08", published="570.148.8"))
    assert "driverVersion 570.148.8" in " ".join(finding.evidence)
    assert finding.fix.startswith("kubectl -n dra delete pod nvidia-dra-driver-gpu-kubelet-plugin-")
    assert "k8s-driver-manager v0.12.0 or later" in finding.fix and "#203" in finding.fix
    assert "575.57.08" in finding.cause and finding.action is not None


def test_a_claim_pod_refused_an_old_driver_library_names_the_plugin(tmp_path: Path) -> None:
    """No driverVersion on the slice (an older chart's devices): the runtime's refusal of libnvidia-ml of the old
    release says the plugin's CDI edits predate the driver; a driver manager already at v0.12.0 is not upgraded."""
    refused = _refused("libnvidia-ml.so.570.148.08")
    finding = _stale(_findings(tmp_path, driver="575.57.08", published=None, refused=refused, manager="v0.12.0"))
    assert "libnvidia-ml.so.570.148.08" in " ".join(finding.evidence)
    assert "run k8s-driver-manager" not in finding.fix and "nvidia.com/gpu.deploy.dra-driver=true" in finding.fix


def test_a_plugin_of_the_running_driver_stays_quiet(tmp_path: Path) -> None:
    """The slice's release is the driver's (semver's 575.57.8 is 575.57.08), and a refusal naming the running
    driver's library is no stale plugin."""
    refused = _refused("libcuda.so.575.57.08")
    findings = _findings(tmp_path, driver="575.57.08", published="575.57.8", refused=refused)
    assert not [f for f in findings if f.id == STALE]


def test_a_plugin_started_after_the_drivers_current_run_is_not_stale(tmp_path: Path) -> None:
    """It enumerated the driver that runs now, whatever a pod's refusal says of an old library."""
    refused = _refused("libcuda.so.570.148.08")
    findings = _findings(
        tmp_path, driver="575.57.08", published=None, refused=refused, plugin_started="2099-01-01T00:00:00Z"
    )
    assert not [f for f in findings if f.id == STALE]
