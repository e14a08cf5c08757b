"""Classes of failure read from pod and node state and from the components' source (issue 26): a driver manager's
drain that waits on a pod already terminating, with or without a DRA claim; a driver container installing into the
previous driver pod's root left mounted; an exporter without the plugin's RuntimeClass; a plugin release that refuses
an empty MIG GPU under the mixed strategy; a former operator install's runtime left on the node; a node lost after the
toolkit restarted containerd with a drop-in from the config dump. Each on a small simulated cluster edited
the way the components leave it, with the link it names and a fix that repairs. The upstream facts each test stands
on are named in it."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod, refused_at_start
from sim.heldout9.harness import _apply

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _operator(*nodes: str) -> str:
    return "name: t\nstack: gpu-operator\nnodes:\n" + "".join(f"  - {n}\n" for n in nodes)


# -- the driver manager's drain waiting on a pod stuck terminating -------------------------------------------------

#: kubernetes/kubectl pkg/drain/drain.go: "evicting pod %s/%s" per pod, and "error when waiting for pod %q in
#: namespace %q to terminate: %v" when the pod outlives the drain's timeout; the driver manager runs that helper.
EVICTING = "Draining node n1...\nevicting pod ml/worker-0\nevicting pod ml/worker-0\n"
TIMED_OUT = (
    "level=info msg=evicting pod ml/worker-0\n"
    'level=error msg=failed to drain node: error when waiting for pod "worker-0" in namespace "ml" to terminate: '
    "global timeout reached: 5m0s\n"
)


def _terminating(claim: bool, deleting: bool = True) -> dict[str, Any]:
    """A pod ml/worker-0 on n1 whose deletion was asked (deletionTimestamp), optionally holding a DRA claim."""
    container: dict[str, Any] = {"name": "c", "image": "cuda"}
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [container]}
    if claim:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one-gpu"}]
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    meta: dict[str, Any] = {"name": "worker-0", "namespace": "ml"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    return {
        "do": "create",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status},
    }


def _drain_held(log: str, *, claim: bool, deleting: bool = True, crashing: bool = False) -> Report:
    manager: dict[str, Any] = {"name": "k8s-driver-manager", "state": {"running": True}}
    if crashing:
        manager = {
            "name": "k8s-driver-manager",
            "restarts": 4,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        }
    driver = {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "n1",
        "init": [manager],
        "logs": {"k8s-driver-manager": log},
    }
    return diagnosed(
        _operator("{name: n1, preset: a100-80gb-x8}"),
        lambda s: _apply(
            s.cluster, {"do": "create", "object": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}}
        ),
        lambda s: _apply(s.cluster, _terminating(claim, deleting)),
        driver,
        no_gpus("n1"),
    )


def test_a_drain_waiting_on_a_terminating_pod_force_deletes_that_pod() -> None:
    (root,) = _roots(_drain_held(EVICTING, claim=False))
    assert (root.link, root.node) == ("driver", "n1")
    assert root.action is not None and root.action.op is FixOp.DELETE and root.action.target == "ml/worker-0"
    assert root.fix.startswith("kubectl -n ml delete pod worker-0 --force --grace-period=0")
    assert "deletionTimestamp" in " ".join(root.evidence)


def test_a_claim_holding_pod_the_drain_waits_on_is_the_dra_deadlock_with_the_manager_release() -> None:
    (root,) = _roots(_drain_held(TIMED_OUT, claim=True, crashing=True))
    assert root.link == "driver" and "ResourceClaim" in root.cause
    assert "spec.driver.manager.version" in root.fix and "#217" in root.fix
    assert "--force --grace-period=0" in root.fix


def test_a_drain_waiting_on_a_pod_not_being_deleted_keeps_the_drains_own_repair() -> None:
    (root,) = _roots(_drain_held(TIMED_OUT, claim=False, deleting=False, crashing=True))
    assert root.link == "driver" and "--force" not in root.fix
    assert "DRAIN_DELETE_EMPTYDIR_DATA" in root.fix


# -- a driver container installing into a stale driver root --------------------------------------------------------

#: NVIDIA/nvidia-installer common-utils/common-utils.c (mkdir_recursive): "Failure creating directory '%s' : (%s)",
#: printed with ERROR: as the installer puts the driver's firmware under /lib/firmware/nvidia.
FIRMWARE = (
    "Installing NVIDIA driver kernel modules...\n"
    "ERROR: Failure creating directory '/lib/firmware/nvidia' : (No such file or directory)\n"
)


def test_no_firmware_directory_is_the_stale_driver_root_even_where_other_kernels_run_the_driver() -> None:
    crash = {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "b",
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "restarts": 5,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error"},
            }
        ],
        "logs": {"nvidia-driver-ctr": FIRMWARE},
    }
    report = diagnosed(
        _operator(
            "{name: a, preset: t4-x4, kernel: 6.8.0-1031-gcp}", "{name: b, preset: t4-x4, kernel: 6.8.0-63-generic}"
        ),
        crash,
        no_gpus("b"),
    )
    (root,) = _roots(report)
    assert (root.id, root.node) == ("driver.not-ready", "b")
    assert "umount -l /run/nvidia/driver" in root.fix and "on node b:" in root.fix
    assert "spec.driver.manager.version" in root.fix
    assert "catalog: nvidia-installer.firmware-dir-failed" in " ".join(root.evidence)
    assert "log.unrecognised" not in report.ids


# -- an exporter without the RuntimeClass the plugin's DaemonSet names ---------------------------------------------

#: NVIDIA/go-dcgm pkg/dcgm/admin.go: "DCGM initialization error" when its host engine cannot start (no NVML in the
#: container); the catalog's dcgm.init-error.
DCGM_INIT = 'level=ERROR msg="Error starting nv-hostengine: DCGM initialization error"\n'


def _exporter_beside_plugin(plugin_class: str | None) -> Report:
    edits: list[Any] = []
    if plugin_class:
        template = {"template": {"spec": {"runtimeClassName": plugin_class}}}
        edits.append(
            {"do": "daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "spec": template}
        )
    exporter = {
        "do": "add-daemonset",
        "namespace": "monitoring",
        "name": "dcgm-exporter",
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
        "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
        "containers": ["exporter"],
        "nodes": ["n1"],
    }
    crash = {
        "do": "pod",
        "daemonset": "dcgm-exporter",
        "namespace": "monitoring",
        "node": "n1",
        "containers": [
            {
                "name": "exporter",
                "restarts": 9,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error"},
            }
        ],
        "logs": {"exporter": DCGM_INIT},
    }
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: l4-x2, hostDriver: '570.172.08'}\n",
        *(lambda s, e=e: _apply(s.cluster, e) for e in [*edits, exporter, crash]),
    )


def test_a_dcgm_init_error_beside_a_plugin_daemonset_with_a_runtime_class_asks_the_exporter_for_it() -> None:
    (root,) = _roots(_exporter_beside_plugin("nvidia"))
    assert (root.link, root.node) == ("exporter", "n1")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "monitoring/dcgm-exporter"
    assert root.action.changes == {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}


def test_the_same_error_where_the_plugin_names_no_runtime_class_is_not_read_as_a_missing_one() -> None:
    (root,) = _roots(_exporter_beside_plugin(None))
    assert root.link == "exporter" and "runtimeClassName" not in root.fix


# -- a plugin release that refuses a MIG GPU without MIG devices under the mixed strategy -------------------------

#: NVIDIA/k8s-device-plugin internal/rm/device_map.go@v0.15.0: "device %v has an invalid MIG configuration", an error
#: in v0.13.0 to v0.15.x; v0.16.0's CHANGELOG: the mixed strategy only warns about an empty MIG device.
INVALID_MIG = (
    "E0101 00:00:00.000000       1 main.go:132] error starting plugins: error getting plugins: failed to construct "
    "NVML resource managers: error building device map: device 0 has an invalid MIG configuration\n"
)


def _empty_mig_gpu(strategy: str) -> Report:
    template = {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "nvidia-device-plugin-ctr",
                        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.15.0",
                        "env": [{"name": "MIG_STRATEGY", "value": strategy}],
                    }
                ]
            }
        }
    }
    edits = [
        {"do": "daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "spec": template},
        plugin_pod("n1", crash_looping("nvidia-device-plugin-ctr"), INVALID_MIG),
        {**no_gpus("n1"), "labels": {"nvidia.com/mig.strategy": strategy}},
    ]
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: a100-80gb-x8, hostDriver: '550.90.07'}\n",
        *(lambda s, e=e: _apply(s.cluster, e) for e in edits),
    )


def test_under_the_mixed_strategy_a_refusing_plugin_release_is_the_plugin_with_the_release_that_warns() -> None:
    (root,) = _roots(_empty_mig_gpu("mixed"))
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr=" in root.fix
    assert "k8s-device-plugin:v0.16.0" in root.fix and "nvidia-smi -mig 0" in root.fix


def test_under_the_single_strategy_the_same_refusal_stays_the_mig_layout() -> None:
    (root,) = _roots(_empty_mig_gpu("single"))
    assert root.link == "mig"


# -- a runtime binary a former GPU Operator install left on the node ----------------------------------------------

#: containerd's words when the runtime binary a handler names exits non-zero (the shim's "did not terminate
#: successfully"); the path is the GPU Operator toolkit's default install dir (ClusterPolicy spec.toolkit.installDir).
STALE_RUNTIME = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "/usr/local/nvidia/toolkit/nvidia-container-runtime did not terminate successfully: exit status 1: unknown"
)


def _refused_by(kubelet: str) -> Report:
    template = {"template": {"spec": {"runtimeClassName": "nvidia"}}}
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: l4-x2, hostDriver: '550.90.07'}\n",
        lambda s: _apply(
            s.cluster,
            {"do": "daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "spec": template},
        ),
        refused_at_start("nvidia-device-plugin", STALE_RUNTIME),
        {**no_gpus("n1"), "nodeInfo": {"kubeletVersion": kubelet}},
    )


def test_a_refusal_by_the_operators_runtime_where_no_operator_runs_removes_the_leftover() -> None:
    (root,) = _roots(_refused_by("v1.25.3+k3s1"))
    assert (root.link, root.node) == ("toolkit", "n1")
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "rm -rf /usr/local/nvidia" in root.fix and "k3s-killall.sh" in root.fix


def test_the_same_leftover_on_a_kubeadm_node_reconfigures_containerd() -> None:
    (root,) = _roots(_refused_by("v1.30.2"))
    assert "rm -rf /usr/local/nvidia" in root.fix and "nvidia-ctk runtime configure" in root.fix
    assert "k3s" not in root.fix


def test_the_operators_own_runtime_failing_where_its_toolkit_runs_is_not_a_leftover() -> None:
    report = diagnosed(
        _operator("{name: n1, preset: l4-x2}"),
        refused_at_start("nvidia-device-plugin", STALE_RUNTIME),
        no_gpus("n1"),
    )
    (root,) = _roots(report)
    assert root.link == "toolkit" and "rm -rf /usr/local/nvidia" not in root.fix


# -- a node lost right after the toolkit restarted containerd with a drop-in from the config dump -----------------

#: NVIDIA/nvidia-container-toolkit tools/container/runtime/containerd/containerd_linux.go: "Error signaling containerd,
#: attempt %v/%v: %v" (catalog nvidia-container-toolkit.signal-containerd), after it read containerd's config from its
#: default source, the `containerd config dump` command; containerd 2.3 dumps config version 4.
SIGNALLED = (
    'level=info msg="Loading config from command [containerd config dump]"\n'
    'level=info msg="Flushing config to /etc/containerd/conf.d/99-nvidia.toml"\n'
    'level=warning msg="Error signaling containerd, attempting to restart it"\n'
)


def _lost_after_signal(runtime: str, log: str) -> Report:
    scenario = (
        "name: t\nstack: gpu-operator\nnodes:\n"
        f"  - {{name: w, preset: l4-x2, containerRuntime: '{runtime}', nodeProblems: [kubelet-stopped]}}\n"
    )
    toolkit = {
        "do": "pod",
        "daemonset": "nvidia-container-toolkit-daemonset",
        "node": "w",
        "logs": {"nvidia-container-toolkit-ctr": log},
    }
    return diagnosed(scenario, toolkit)


def test_a_node_lost_after_the_toolkit_signalled_containerd_with_a_dumped_v4_config_is_the_toolkit() -> None:
    (root,) = _roots(_lost_after_signal("containerd://2.3.2", SIGNALLED))
    assert (root.id, root.link, root.node) == ("toolkit.runtime-stopped", "toolkit", "w")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in root.action.changes["spec"]["toolkit"]["env"]


def test_the_same_signal_on_a_containerd_that_dumps_an_older_version_stays_the_node() -> None:
    (root,) = _roots(_lost_after_signal("containerd://2.1.4", SIGNALLED))
    assert (root.id, root.link) == ("node.not-ready", "node")


# -- an AKS cluster with no device plugin ----------------------------------------------------------------------------


def test_an_aks_cluster_without_a_plugin_also_names_the_managed_gpu_node_pool() -> None:
    """learn.microsoft.com/azure/aks/aks-managed-gpu-nodes: AKS installs and keeps the plugin itself on a managed GPU
    node pool; on AKS Automatic a plugin DaemonSet of one's own in kube-system is refused."""
    report = diagnosed(
        "name: t\nstack: aks\nnodes:\n  - {name: n1, preset: t4-x4}\n",
        lambda s: _apply(
            s.cluster, {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"}
        ),
        no_gpus("n1"),
    )
    (root,) = _roots(report)
    assert root.id == "stack.missing" and root.action is not None and root.action.op is FixOp.INSTALL
    assert "gpuProfile.nvidia.managementMode=Managed" in root.fix and "EnableManagedGPUExperience" in root.fix


def test_an_eks_cluster_without_a_plugin_gets_no_aks_advice() -> None:
    report = diagnosed(
        "name: t\nstack: eks\nnodes:\n  - {name: n1, preset: t4-x4}\n",
        lambda s: _apply(
            s.cluster, {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"}
        ),
        no_gpus("n1"),
    )
    (root,) = _roots(report)
    assert root.id == "stack.missing" and "AKS" not in root.fix
