"""Release facts read from the components' release notes (releases.yaml, issue 26): the GPU Operator's own release
(its ClusterPolicy's Helm chart label) moved to the one that fixed what the cluster shows, a known issue no release
fixed answered with the workaround its notes document, a defect that shows under one ClusterPolicy setting only
where the policy has it, and a helper image (the driver manager) set under its own key of the policy. Each log line
is the component's own wording, from the source the catalog entry it matches cites."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from doctor.small_cluster import crash_looping, diagnosed, toolkit_pod
from doctor.test_doctor_changelog_releases import NODEFEATURE
from doctor.test_doctor_lower_link_classes import _held_in_manager, _operator
from doctor.test_doctor_release_fixes import OPERATOR, _image, _refused, _standalone
from doctor.test_doctor_user_pods import failing_gpu_pod
from sim.heldout3.harness import _apply

from gpuchain.doctor import Severity
from gpuchain.doctor.links.driver_paused import restored
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.releases import Defect, defects, showing
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
#: nvidia-container-toolkit v1.17.0 on K3s: `containerd config dump` is not on the PATH (the GPU Operator's release
#: notes v24.9.0, Known Limitations; tools/container/runtime/containerd config loading, as the toolkit logs it).
CONFIG_DUMP = (
    'time="2024-11-07T22:08:57Z" level=error msg="error running nvidia-toolkit: unable to determine runtime '
    "options: unable to load containerd config: failed to load config: failed to run command chroot [/host "
    'containerd config dump]: exit status 127"\n'
)
#: GFD refused NFD's feature-file directory (internal/lm/output.go@v0.17.1 "error atomically writing file '%s': %w",
#: the file's open error as Go's os package words it), as klog writes the error main.go returns.
FEATURE_FILE = (
    "E0712 09:14:02.118431       1 main.go:128] error atomically writing file "
    "'/etc/kubernetes/node-feature-discovery/features.d/gfd': open "
    "/etc/kubernetes/node-feature-discovery/features.d/.gfd-tmp: permission denied\n"
)
#: The runtime's words for a GPU pod with spec.hostUsers: false (the GPU Operator's release notes v26.3.1, Known Issues).
USERNS = "Error: container create failed: read status from sync socket: No such process"


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def _operator_release(version: str) -> Any:
    """An edit: the ClusterPolicy labelled as Helm installs it from the gpu-operator chart at ``version``
    (deployments/gpu-operator/templates/clusterpolicy.yaml's gpu-operator.labels: helm.sh/chart, instance)."""

    def edit(sim: SimCluster) -> None:
        for policy in sim.cluster.list(NVIDIA_CLUSTER_POLICY):
            labels = {"helm.sh/chart": f"gpu-operator-{version}", "app.kubernetes.io/instance": "gpu-operator"}
            sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=name_of(policy), patch={"metadata": {"labels": labels}})

    return edit


def test_the_operators_release_with_the_defect_is_upgraded_by_its_chart_with_the_notes_workaround() -> None:
    """Release notes v24.9.1: "Fixed an issue where NVIDIA Container Toolkit would fail to start on Rancher RKE2,
    K3s, and Canonical MicroK8s"; v24.9.0's Known Limitations give toolkit.version=v1.17.1 until then."""
    root = _root(diagnosed(OPERATOR, _operator_release("v24.9.0"), toolkit_pod(NODE, CONFIG_DUMP)))
    assert (root.link, root.node) == ("toolkit", NODE)
    assert root.fix.startswith("helm upgrade gpu-operator ") and "--version v24.9.1 --reuse-values" in root.fix
    assert "toolkit.version=v1.17.1-ubuntu20.04" in root.fix and "back to v24.6.2" in root.fix
    assert any(
        e.startswith("release: gpu-operator.k3s-toolkit-config-dump (NVIDIA/cloud-native-docs ") for e in root.evidence
    )


@pytest.mark.parametrize("version", ["v24.9.1", "v24.6.2"])
def test_an_operator_release_the_note_does_not_cover_gets_no_operator_upgrade(version: str) -> None:
    root = _root(diagnosed(OPERATOR, _operator_release(version), toolkit_pod(NODE, CONFIG_DUMP)))
    assert root.link == "toolkit" and "helm upgrade gpu-operator" not in root.fix
    assert not any(e.startswith("release: gpu-operator.") for e in root.evidence)


def _gfd_at(tag: str) -> list[Any]:
    return [
        _image("gpu-feature-discovery", f"nvcr.io/nvidia/k8s-device-plugin:{tag}"),
        {
            "do": "pod",
            "daemonset": "gpu-feature-discovery",
            "node": NODE,
            "containers": [crash_looping("gpu-feature-discovery")],
            "logs": {"gpu-feature-discovery": FEATURE_FILE},
        },
    ]


def test_gfd_refused_its_feature_file_is_moved_to_the_release_that_uses_the_api_with_the_env_until_then() -> None:
    """k8s-device-plugin CHANGELOG.md@v0.19.0: "Enable NodeFeature API by default in GFD"; the GPU Operator's
    release notes v25.10.1 (Known Issues) give USE_NODE_FEATURE_API=true in gfd.env until then."""
    root = _root(diagnosed(OPERATOR, *_gfd_at("v0.17.0")))
    assert (root.link, root.node) == ("gfd", NODE)
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"gfd": {"version": "v0.19.0"}}}
    assert "USE_NODE_FEATURE_API" in root.fix and "until it runs" in root.fix
    later = _root(diagnosed(OPERATOR, *_gfd_at("v0.19.0")))
    assert later.link == "gfd" and not any(e.startswith("release: ") for e in later.evidence)


def _manager_at(tag: str) -> Any:
    """An edit: the driver pod's k8s-driver-manager init container runs ``tag``."""

    def edit(sim: SimCluster) -> None:
        for pod in [p for p in sim.cluster.list(POD) if name_of(p).startswith("nvidia-driver-daemonset")]:
            spec = copy.deepcopy(pod["spec"])
            for c in spec.get("initContainers") or []:
                if c["name"] == "k8s-driver-manager":
                    c["image"] = f"nvcr.io/nvidia/cloud-native/k8s-driver-manager:{tag}"
            sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    return edit


def _mofed_wait(tag: str, host_mofed: bool) -> Finding:
    rdma = {"do": "policy", "spec": {"driver": {"rdma": {"enabled": True, "useHostMofed": host_mofed}}}}
    report = diagnosed(
        _operator("{name: n1, preset: a100-80gb-x8}"),
        lambda s: _apply(s.cluster, rdma),
        _held_in_manager("n1"),
        _manager_at(tag),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def test_the_driver_manager_release_with_the_swapped_host_mofed_check_is_set_under_the_policys_manager_key() -> None:
    """NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.9.1 (d9bc204e): "fix: check if mlx5_core is present
    in /proc/modules when USE_HOST_MOFED=true"; v0.9.0 waited for the MOFED container's ready file instead."""
    root = _mofed_wait("v0.9.0", host_mofed=True)
    assert (root.link, root.node) == ("driver", "n1")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"driver": {"manager": {"version": "v0.9.1"}}}}
    assert "back to v0.8.1" in root.fix
    assert any(e.startswith("release: k8s-driver-manager.host-mofed-wait (") for e in root.evidence)


@pytest.mark.parametrize(("tag", "host_mofed"), [("v0.9.0", False), ("v0.9.1", True)])
def test_the_same_wait_under_the_other_mofed_setting_or_a_fixed_manager_names_no_manager_release(
    tag: str, host_mofed: bool
) -> None:
    root = _mofed_wait(tag, host_mofed)
    assert root.link == "driver" and not any(e.startswith("release: ") for e in root.evidence)


def test_a_known_issue_no_release_fixed_is_answered_with_its_documented_workaround() -> None:
    """The GPU Operator's release notes v26.3.1 (Known Issues): GPU pods in their own user namespace fail at the
    toolkit's createContainer hook; "omit the hostUsers field or set spec.hostUsers: true"."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: a}\nworkloads:\n  - {name: job, gpus: 1, node: a}\n",
        _image("nvidia-container-toolkit", "nvcr.io/nvidia/k8s/container-toolkit:v1.18.1-ubuntu20.04"),
        _refused(USERNS),
    )
    (hook,) = [f for f in report.findings if f.id == "workload.runtime-hook-failed"]
    assert hook.link == "toolkit" and "spec.hostUsers: true" in hook.fix
    assert "the workaround its release notes document" in hook.fix
    assert any(e.startswith("release: container-toolkit.user-namespace-hook (") for e in hook.evidence)


def test_open_ranges_cover_every_later_release_and_need_their_workaround() -> None:
    (found,) = [d for d in defects() if d.id == "container-toolkit.user-namespace-hook"]
    assert found.fixed_in == "" and found.workaround
    assert found.covers("v1.18.0") and found.covers("v9.0.0") and not found.covers("v1.17.8")
    fixed = Defect(
        id="t.x",
        component="t",
        by="image",
        affected=("v1.0.0", "v1.1.0"),
        symptom="restarts",
        cause="",
        source="",
        line="",
    )
    assert fixed.covers("v1.0.5") and not fixed.covers("v1.1.0")


def test_the_gds_probes_fact_names_only_the_containers_the_operator_gave_that_probe() -> None:
    """Release notes v25.3.0: "Removed default liveness probe from the nvidia-fs-ctr and nvidia-gdrcopy-ctr
    containers of the GPU driver daemonset"."""
    (found,) = [d for d in showing("probe-killed") if d.by == "operator"]
    assert found.kills("nvidia-fs-ctr") and found.kills("nvidia-gdrcopy-ctr")
    assert not found.kills("nvidia-driver-ctr") and not found.kills("nvidia-peermem-ctr")
    assert found.covers("v24.9.2") and not found.covers("v25.3.0")


def test_a_policy_setting_fact_holds_only_where_the_policy_carries_it() -> None:
    (found,) = [d for d in defects() if d.id == "k8s-driver-manager.host-mofed-wait"]
    assert found.holds({"spec": {"driver": {"rdma": {"enabled": True, "useHostMofed": True}}}})
    assert not found.holds({"spec": {"driver": {"rdma": {"enabled": True, "useHostMofed": False}}}})
    assert not found.holds(None)


PAUSED = "paused-for-driver-upgrade"
#: The operands the driver manager pauses, as their DaemonSets (the GPU Operator's names) and deploy labels.
PAUSABLE = {
    "nvidia-device-plugin-daemonset": "nvidia.com/gpu.deploy.device-plugin",
    "gpu-feature-discovery": "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia-dcgm-exporter": "nvidia.com/gpu.deploy.dcgm-exporter",
}


def _with_manager(tag: str) -> Any:
    """An edit: the driver pod runs the k8s-driver-manager init container at ``tag``."""

    def edit(sim: SimCluster) -> None:
        for pod in [p for p in sim.cluster.list(POD) if name_of(p).startswith("nvidia-driver-daemonset")]:
            image = f"nvcr.io/nvidia/cloud-native/k8s-driver-manager:{tag}"
            spec = {"initContainers": [{"name": "k8s-driver-manager", "image": image}]}
            sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    return edit


def _paused(tag: str, *, upgrade_state: str = "") -> Report:
    """An operator node whose operands' deploy labels still hold the driver manager's pause (their pods gone, as
    their DaemonSets' selectors no longer match), its driver pod ready, the manager at ``tag``."""
    labels = {label: PAUSED for label in PAUSABLE.values()}
    if upgrade_state:
        labels["nvidia.com/gpu-driver-upgrade-state"] = upgrade_state
    drops = [{"do": "daemonset", "namespace": "gpu-operator", "name": ds, "dropPods": True} for ds in PAUSABLE]
    return diagnosed(
        OPERATOR,
        {"do": "node", "node": NODE, "labels": labels},
        *(lambda s, d=d: _apply(s.cluster, d) for d in drops),
        _with_manager(tag),
    )


def test_operands_left_paused_after_the_driver_is_in_are_set_back_and_the_manager_moved_to_the_fixed_release() -> None:
    """The GPU Operator's release notes v26.3.2: API server interruptions "could leave nodes with stale
    paused-for-driver-upgrade label values"; NVIDIA/k8s-driver-manager#176 (v0.11.0) retries and fails instead."""
    found = [f for f in _paused("v0.10.0").findings if f.id == "operand.paused-for-driver-upgrade"]
    assert {f.link for f in found} == {"gfd", "exporter"}  # the plugin's GPUs stay in the node's capacity
    root = found[0]
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {label: "true" for label in PAUSABLE.values()}
    assert '{"spec":{"driver":{"manager":{"version":"v0.11.0"}}}}' in root.fix.replace(" ", "")
    assert any(e.startswith("release: k8s-driver-manager.stale-pause-labels (") for e in root.evidence)


def test_a_fixed_manager_gets_the_labels_set_back_without_a_release_and_an_upgrade_in_progress_is_no_stale_pause() -> (
    None
):
    root = next(f for f in _paused("v0.11.0").findings if f.id == "operand.paused-for-driver-upgrade")
    assert not any(e.startswith("release: ") for e in root.evidence) and "manager" not in root.fix
    during = _paused("v0.10.0", upgrade_state="pod-restart-required")
    assert "operand.paused-for-driver-upgrade" not in during.ids


@pytest.mark.parametrize(
    ("value", "back"),
    [(PAUSED, "true"), (f"false_{PAUSED}", "false"), (f"paused-for-mig-change_{PAUSED}", "paused-for-mig-change")],
)
def test_the_pause_is_removed_as_the_manager_removes_it(value: str, back: str) -> None:
    """k8s-driver-manager cmd/driver-manager/main.go@v0.10.0 maybeSetTrue: "true" for the pause alone, else the value
    with "paused-for-driver-upgrade_?" removed."""
    assert restored(value) == back


#: dcgm-exporter refused the ConfigMap its metrics are in (pkg/dcgmexporter/parser.go@3.3.5-3.4.0 "could not
#: retrieve ConfigMap '%s'; err: %w" around the API server's RBAC refusal, kubernetes apimachinery's wording).
CONFIGMAP_FORBIDDEN = (
    'time="2024-02-01T10:00:00Z" level=fatal msg="could not retrieve ConfigMap \'gpu-operator:metrics-config\'; '
    'err: configmaps \\"metrics-config\\" is forbidden: User \\"system:serviceaccount:gpu-operator:'
    'nvidia-dcgm-exporter\\" cannot get resource \\"configmaps\\" in API group \\"\\" in the namespace '
    '\\"gpu-operator\\""\n'
)


@pytest.mark.parametrize(("version", "upgraded"), [("v23.9.2", True), ("v24.3.0", False)])
def test_an_exporter_the_operators_role_refuses_its_configmap_moves_the_operator_to_the_release_that_grants_it(
    version: str, upgraded: bool
) -> None:
    """The GPU Operator's release notes v24.3.0: "the role used by the exporter is granted access to read from config
    maps" (assets/state-dcgm-exporter/0200_role.yaml, commit eb2dcaae5)."""
    exporter = {
        "do": "pod",
        "daemonset": "nvidia-dcgm-exporter",
        "node": NODE,
        "containers": [crash_looping("nvidia-dcgm-exporter")],
        "logs": {"nvidia-dcgm-exporter": CONFIGMAP_FORBIDDEN},
    }
    root = _root(diagnosed(OPERATOR, _operator_release(version), exporter))
    assert root.link == "exporter"
    assert any(e.startswith("catalog: dcgm-exporter.metrics-configmap-forbidden (") for e in root.evidence)
    assert ("helm upgrade gpu-operator " in root.fix and "--version v24.3.0" in root.fix) is upgraded


def test_without_the_charts_labels_the_operator_pods_image_tag_names_the_release() -> None:
    """A GPU Operator installed without Helm's labels on its ClusterPolicy (a plain manifest, OLM): the tag of its
    own pod's image (nvcr.io/nvidia/gpu-operator:<release>) is the release, and the upgrade is named, not a chart's."""
    operator = {
        "do": "add-pod",
        "namespace": "gpu-operator",
        "name": "gpu-operator-7d9f8c6b5-x2x9q",
        "node": NODE,
        "containers": ["gpu-operator"],
        "image": "nvcr.io/nvidia/gpu-operator:v24.9.0",
    }
    root = _root(diagnosed(OPERATOR, lambda s: _apply(s.cluster, operator), toolkit_pod(NODE, CONFIG_DUMP)))
    assert root.fix.startswith("# upgrade the GPU Operator to v24.9.1 or later"), root.fix
    assert "GPU Operator v24.9.0" in root.evidence


#: dcgm-exporter 3.3.x's last words on a node without NVIDIA CPUs (NVIDIA/dcgm-exporter#412): the Go runtime's
#: trace of the crash in the cgo call go-dcgm makes (pkg/dcgm/cpu.go@3c233ee2a242 "C.dcgmGetCpuHierarchy(").
CPU_SEGFAULT = (
    'time="2024-10-30T20:01:56Z" level=info msg="Initializing system entities of type: CPU"\n'
    "SIGSEGV: segmentation violation\n"
    "PC=0x7f5bb75066aa m=11 sigcode=1 addr=0x4\n"
    "signal arrived during cgo execution\n\n"
    "goroutine 1 gp=0xc0000061c0 m=11 mp=0xc000680008 [syscall]:\n"
    "runtime.cgocall(0x16dc5c0, 0xc000705c80)\n"
    "\t/usr/local/go/src/runtime/cgocall.go:157 +0x4b fp=0xc000705c58 sp=0xc000705c20 pc=0x418ccb\n"
    "github.com/NVIDIA/go-dcgm/pkg/dcgm._Cfunc_dcgmGetCpuHierarchy(0x7fff, 0xc000705d00)\n"
)


@pytest.mark.parametrize(("tag", "moved"), [("3.3.5-3.4.1-ubuntu22.04", True), ("4.1.1-4.0.3-ubuntu22.04", False)])
def test_an_exporter_crashing_on_the_cpu_hierarchy_is_moved_to_the_release_whose_dcgm_does_not(
    tag: str, moved: bool
) -> None:
    report = diagnosed(
        f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}}}\n",
        *_standalone("dcgm-exporter", f"nvcr.io/nvidia/k8s/dcgm-exporter:{tag}", CPU_SEGFAULT),
    )
    root = _root(report)
    assert root.link == "exporter" and "log.unrecognised" not in report.ids
    assert any(e.startswith("catalog: go-dcgm.cpu-hierarchy-segfault (") for e in root.evidence)
    fixed = "dcgm-exporter=nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.3-ubuntu22.04"
    assert (fixed in root.fix and "back to 3.3.0-3.2.0" in root.fix) is moved


#: The CUDA runtime's words for cudaErrorInsufficientDriver (35), as NVIDIA's vectorAdd sample prints them
#: (cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu@v12.8, catalog cuda.insufficient-driver).
INSUFFICIENT = (
    "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime version)!"
)


@pytest.mark.parametrize(("tag", "moved"), [("v1.17.4-ubuntu20.04", True), ("v1.17.5-ubuntu20.04", False)])
def test_cuda_too_new_for_the_driver_under_the_toolkit_that_dropped_forward_compatibility_names_that_release(
    tag: str, moved: bool
) -> None:
    """NVIDIA/cloud-native-docs container-toolkit/release-notes.md: v1.17.4 stopped mounting the image's CUDA
    forward compatibility libraries, v1.17.5 "Re-added support for CUDA Forward Compatibility"; the pod's CUDA error
    is then the toolkit release on the node (read from the operator's toolkit pod), before the driver upgrade."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        _image("nvidia-container-toolkit", f"nvcr.io/nvidia/k8s/container-toolkit:{tag}"),
        failing_gpu_pod(runtime_class="nvidia", said=INSUFFICIENT),
    )
    (found,) = [f for f in report.findings if f.id == "workload.cuda-unusable"]
    assert found.link == "driver"
    assert ("container-toolkit.cuda-compat-off" in " ".join(found.evidence)) is moved
    assert ('"version":"v1.17.5-ubuntu20.04"' in found.fix.replace(" ", "")) is moved


@pytest.mark.parametrize(("version", "upgraded"), [("v25.3.4", True), ("v25.10.0", False)])
def test_gfd_the_operators_role_refuses_nodefeatures_moves_the_operator_to_the_release_that_grants_them(
    version: str, upgraded: bool
) -> None:
    """The GPU Operator's release notes v25.10.0: "Added required permissions when GPU Feature Discovery is configured
    to use the Node Feature API" (assets/gpu-feature-discovery/0200_role.yaml names nodefeatures from v25.10.0)."""
    gfd = {
        "do": "pod",
        "daemonset": "gpu-feature-discovery",
        "node": NODE,
        "containers": [crash_looping("gpu-feature-discovery")],
        "logs": {"gpu-feature-discovery": NODEFEATURE},
    }
    root = _root(diagnosed(OPERATOR, _operator_release(version), gfd))
    assert root.link == "gfd"
    assert ("helm upgrade gpu-operator " in root.fix and "--version v25.10.0" in root.fix) is upgraded
    assert any(e.startswith("release: gpu-operator.gfd-nodefeature-rbac (") for e in root.evidence) is upgraded
