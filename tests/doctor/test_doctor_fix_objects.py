"""Fixes that act on the right object (issue 26): a pod is deleted in its own namespace, a toleration
patch lets the pod past every taint that keeps it off the node, not only the first."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import yaml
from doctor.small_cluster import diagnosed, toolkit_pod

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Finding, FixOp
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.sim import build, load_scenario, scenario_names
from gpuchain.sim.build import SimCluster


@pytest.mark.parametrize("name", scenario_names())
def test_every_pod_a_fix_deletes_is_named_in_the_namespace_it_runs_in(name: str) -> None:
    sim = build(load_scenario(name))
    where = {name_of(p): namespace_of(p) for p in sim.cluster.list(POD)}
    for finding in run_doctor(sim.cluster, reader=sim.read_log).findings:
        action = finding.action
        if action is None or action.op is not FixOp.DELETE or action.changes.get("kind") != "Pod":
            continue
        pod = str(action.changes["name"])
        if pod in where:
            assert action.changes["namespace"] == where[pod], (finding.id, action)


def test_pods_of_several_namespaces_on_a_lost_gpu_are_each_deleted_in_their_own() -> None:
    """kubectl applies the last -n of a command to every name in it, so one delete per pod."""
    sim = build(load_scenario("dp-gpu-fell-off-bus"))
    victim = next(p for p in sim.cluster.list(POD) if name_of(p) == "infer-2")
    other = copy.deepcopy(victim)
    other["metadata"] = {"name": "train-7", "namespace": "ml", "labels": victim["metadata"].get("labels") or {}}
    other.pop("status", None)
    sim.cluster.create(other)
    sim.cluster.patch_status(POD, name="train-7", status=victim["status"], namespace="ml")
    lost = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == "gpu.lost")
    assert "kubectl delete pod -n default infer-2" in lost.fix
    assert "kubectl delete pod -n ml train-7" in lost.fix
    assert "-n ml train-7 -n" not in lost.fix and "infer-2 -n ml" not in lost.fix


def test_a_pending_daemonset_pod_gets_a_toleration_for_every_taint_it_does_not_tolerate() -> None:
    """The scheduler's message names one taint; the node has two the plugin does not tolerate (and one
    PreferNoSchedule, which keeps nothing off): the patch tolerates both, so the pod is placed."""
    sim = build(load_scenario("healthy-gpu-operator"))
    node = "gpu-0"
    taints = [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "team", "value": "ml", "effect": "NoExecute"},
        {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    ]
    sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": taints}})
    pod = next(
        p
        for p in sim.cluster.list(POD, namespace="gpu-operator")
        if name_of(p).startswith("nvidia-device-plugin-daemonset") and p["spec"].get("nodeName") == node
    )
    said = "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said}
    pending = {"phase": "Pending", "conditions": [condition], "containerStatuses": [], "initContainerStatuses": []}
    sim.cluster.patch_status(POD, name=name_of(pod), status=pending, namespace="gpu-operator")
    gone = {"nvidia.com/gpu": None}
    sim.cluster.patch_status(NODE, name=node, status={"capacity": gone, "allocatable": gone})
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.node == node and f.root)
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    tolerations = found.action.changes["spec"]["daemonsets"]["tolerations"]
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"key": "team", "operator": "Exists", "effect": "NoExecute"} in tolerations
    assert not any(t.get("key") == "spot" for t in tolerations)


def test_a_daemonset_kept_off_by_two_taints_is_patched_for_both() -> None:
    """With no pod at all (the DaemonSet controller makes none), the blocker is read from the node's
    taints against the DaemonSet's tolerations: every untolerated one is in the patch and the evidence."""
    sim = build(load_scenario("healthy-nvidia-device-plugin"))
    node = name_of(sim.cluster.list(NODE)[-1])
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "x", "effect": "NoExecute"}]
    sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": taints}})
    for p in sim.cluster.list(POD):
        if p["spec"].get("nodeName") == node and name_of(p).startswith("nvidia-device-plugin"):
            sim.cluster.delete(POD, name=name_of(p), namespace=namespace_of(p))
    gone = {"nvidia.com/gpu": None}
    sim.cluster.patch_status(NODE, name=node, status={"capacity": gone, "allocatable": gone})
    findings = run_doctor(sim.cluster, reader=sim.read_log).findings
    found = next(
        f for f in findings if f.node == node and f.action is not None and f.action.op is FixOp.PATCH_DAEMONSET
    )
    tolerations = found.action.changes["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "a", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"key": "b", "operator": "Exists", "effect": "NoExecute"} in tolerations
    assert any("a:NoSchedule, b=x:NoExecute" in e for e in found.evidence), found.evidence


MIG_NODE = (
    "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n"
)


def _mig_failed(layout: str, log: str, *more: object) -> Finding:
    report = diagnosed(
        MIG_NODE,
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": layout}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
        *more,  # type: ignore[arg-type]
    )
    return next(f for f in report.findings if f.id == "mig.failed")


def test_a_failed_mig_layout_is_repaired_through_the_mig_managers_config_not_by_turning_mig_off() -> None:
    """No line the catalog knows: the fix names the layout and the ConfigMap (namespace and name) the
    manager reads it from, and applies it again by restarting the manager in its own namespace."""
    found = _mig_failed("all-3g.40gb", 'level=fatal msg="Error applying MIG configuration: something odd"\n')
    assert "all-disabled" not in found.fix
    assert "ConfigMap gpu-operator/default-mig-parted-config" in found.fix and "'all-3g.40gb'" in found.fix
    assert "kubectl -n gpu-operator delete pod nvidia-mig-manager-" in found.fix
    assert found.action is not None and found.action.changes["fact"] == "mig-applied"


def test_a_layout_the_mig_managers_configmap_does_not_define_is_added_there() -> None:
    layouts = {"version": "v1", "mig-configs": {"all-disabled": [], "all-1g.10gb": [], "all-balanced": []}}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "custom-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": yaml.safe_dump(layouts)},
    }

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(configmap)
        patch = {"spec": {"migManager": {"config": {"name": "custom-mig-parted-config"}}}}
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name="cluster-policy", patch=patch)

    found = _mig_failed("all-3g.40gb", 'level=fatal msg="Unable to validate the selected MIG configuration"\n', edit)
    assert "kubectl -n gpu-operator edit configmap custom-mig-parted-config" in found.fix
    assert "'all-3g.40gb'" in found.fix and "all-1g.10gb|all-balanced|all-disabled" in found.fix
    assert any("layouts in gpu-operator/custom-mig-parted-config" in e for e in found.evidence)


def test_a_layout_that_stops_at_the_mig_mode_change_is_committed_by_a_reboot() -> None:
    """The MIG manager logs its mode-change step and never reaches the layout step: the mode change is what
    failed, so the repair is the reset or reboot it waits for, not the ConfigMap."""
    log = (
        'level=info msg="Applying the MIG mode change from the selected config to the node (and double checking it'
        ' took effect)"\n'
        'level=info msg="If the -r option was passed, the node will be automatically rebooted if this is not'
        ' successful"\n'
        'level=debug msg="Checking current MIG mode..."\n'
    )
    found = _mig_failed("all-1g.10gb", log)
    assert "reboot the node" in found.fix and "WITH_REBOOT=true" in found.fix
    assert "edit configmap" not in found.fix
    # the same lines followed by the layout step: the mode change took, so it is the layout that failed
    later = _mig_failed("all-1g.10gb", log + 'level=info msg="Applying the selected MIG config to the node"\n')
    assert "reboot the node" not in later.fix and "default-mig-parted-config" in later.fix


def test_the_mig_mode_a_layout_found_disabled_is_committed_by_a_reboot_and_applied_again() -> None:
    """mig-parted's reason (cmd/nvidia-mig-parted/apply/config.go@v0.12.1), as op-mig-failed carries it."""
    sim = build(load_scenario("op-mig-failed"))
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == "mig.failed")
    assert "catalog: mig-parted.mig-mode-disabled" in " ".join(found.evidence)
    assert "reboot" in found.fix and "WITH_REBOOT=true" in found.fix and "all-disabled" not in found.fix


def test_a_toolkit_that_cannot_parse_the_containerd_config_is_sent_to_the_toolkits_settings() -> None:
    """The toolkit wraps its cause in words the device plugin also writes ("unable to load config: ",
    NVIDIA/nvidia-container-toolkit tools/container/runtime/containerd/containerd.go@v1.17.4): the entry
    of the innermost words names the cause, so the fix is CONTAINERD_CONFIG, not the plugin's ConfigMap."""
    log = (
        'time="2026-01-01T00:00:00Z" level=info msg="Starting nvidia-toolkit"\n'
        'time="2026-01-01T00:00:01Z" level=fatal msg="error running nvidia-toolkit: unable to setup runtime: unable '
        'to load config: unable to load containerd config: toml: line 12 (last key \\"plugins\\"): expected key '
        'separator"\n'
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        toolkit_pod("n1", log),
    )
    root = next(f for f in report.findings if f.root)
    assert root.link == "toolkit", (root.id, root.link, root.fix)
    assert "catalog: nvidia-container-toolkit.load-containerd-config" in " ".join(root.evidence)
    assert "CONTAINERD_CONFIG" in root.fix and "device plugin" not in root.fix.lower()


def test_a_plugin_the_kubelet_refuses_for_its_api_version_gets_a_matching_release_not_a_restart() -> None:
    """gRPC's "unknown service v1beta1.Registration" (grpc-go server.go) under the plugin's "Could not
    register device plugin" (internal/plugin/server.go@v0.17.1): a new pod is refused the same way."""
    log = (
        "I0101 00:00:00.000000 1 main.go:1] Starting Plugins.\n"
        "E0101 00:00:01.000000 1 server.go:1] Could not register device plugin: rpc error: code = Unimplemented "
        "desc = unknown service v1beta1.Registration\n"
    )
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n",
        {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "n1",
            "logs": {"nvidia-device-plugin-ctr": log},
        },
    )
    root = next(f for f in report.findings if f.root)
    assert (root.id, root.link) == ("device-plugin.not-registered", "device-plugin")
    assert "catalog: kubelet.unknown-registration-service" in " ".join(root.evidence)
    assert "delete pod" not in root.fix and "release" in root.fix
    assert root.action is None or root.action.op is not FixOp.DELETE


def _plugin_reads(configs: dict[str, str]) -> Callable[[SimCluster], None]:
    """An edit: the standalone plugin's DaemonSet mounts ConfigMap nvdp-configs (as NVIDIA's chart mounts
    config.name for its config-manager) holding ``configs``."""

    def edit(sim: SimCluster) -> None:
        ds = next(d for d in sim.cluster.list(DAEMONSET) if name_of(d) == "nvidia-device-plugin-daemonset")
        ns = namespace_of(ds)
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "nvdp-configs", "namespace": ns},
                "data": configs,
            }
        )
        volume = {"name": "available-configs", "configMap": {"name": "nvdp-configs"}}
        sim.cluster.patch(
            DAEMONSET, name=name_of(ds), patch={"spec": {"template": {"spec": {"volumes": [volume]}}}}, namespace=ns
        )

    return edit


STANDALONE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n"
NOT_READY = {
    "do": "pod",
    "daemonset": "nvidia-device-plugin-daemonset",
    "node": "n1",
    "containers": [
        {"name": "nvidia-device-plugin-ctr", "state": {"waiting": "CrashLoopBackOff"}, "last": {"terminated": "Error"}}
    ],
}


def test_a_config_label_the_configmap_the_plugin_mounts_holds_is_not_a_missing_config() -> None:
    """No ClusterPolicy names the plugin's ConfigMap: the one its DaemonSet mounts is where the key is."""
    report = diagnosed(
        STANDALONE,
        _plugin_reads({"default": "version: v1\\n", "ts": "version: v1\\n"}),
        {"do": "node", "node": "n1", "labels": {"nvidia.com/device-plugin.config": "ts"}},
        NOT_READY,
    )
    assert "device-plugin.config-missing" not in report.ids


def test_a_config_label_the_mounted_configmap_lacks_names_that_configmap() -> None:
    report = diagnosed(
        STANDALONE,
        _plugin_reads({"default": "version: v1\\n"}),
        {"do": "node", "node": "n1", "labels": {"nvidia.com/device-plugin.config": "ts"}},
        NOT_READY,
    )
    found = next(f for f in report.findings if f.id == "device-plugin.config-missing")
    assert any("/nvdp-configs (keys: default)" in e for e in found.evidence), found.evidence


def test_an_exporter_without_the_runtime_class_the_plugin_gets_its_gpus_through_is_given_it() -> None:
    """A fault seen through its consumer: the exporter's NVML cannot load (dcgm-exporter
    internal/pkg/nvmlprovider/provider.go@4.2.3-4.1.1), while the plugin on the same node announces its
    GPUs through RuntimeClass nvidia: the driver and the runtime work, and the exporter's pod spec names
    no RuntimeClass, so the fix is that field on its DaemonSet, not the driver or the toolkit."""
    crash = {
        "name": "exporter",
        "restarts": 5,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    log = 'time=2026-01-01T00:00:00Z level=ERROR msg="Cannot init NVML library; err: ERROR_LIBRARY_NOT_FOUND"\n'

    def plugin_uses_runtime_class(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"},
                "handler": "nvidia",
            }
        )
        for p in sim.cluster.list(POD):
            if name_of(p).startswith("nvidia-device-plugin"):
                sim.cluster.patch(
                    POD, name=name_of(p), patch={"spec": {"runtimeClassName": "nvidia"}}, namespace=namespace_of(p)
                )

    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h}\n",
        plugin_uses_runtime_class,
        {
            "do": "add-daemonset",
            "namespace": "metrics",
            "name": "dcgm-exporter",
            "labels": {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "gpu-metrics"},
            "containers": ["exporter"],
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04",
            "nodes": ["h"],
        },
        {
            "do": "pod",
            "daemonset": "dcgm-exporter",
            "namespace": "metrics",
            "node": "h",
            "containers": [crash],
            "logs": {"exporter": log},
        },
    )
    root = next(f for f in report.findings if f.root and f.node == "h")
    assert root.link == "exporter", (root.id, root.link, root.fix)
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "metrics/dcgm-exporter"
    assert root.action.changes == {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}


def test_gfd_without_the_runtime_class_the_plugin_gets_its_gpus_through_is_given_it() -> None:
    """The same reading for feature discovery: its NVML fails (NVIDIA's factory.go line) while the plugin
    beside it announces GPUs through RuntimeClass nvidia that GFD's pod does not name."""
    crash = {
        "name": "gpu-feature-discovery",
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    log = "E0101 00:00:01.000000 1 factory.go:1] Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND.\n"

    def runtime_classes(sim: SimCluster) -> None:
        # The operator's RuntimeClass nvidia exists; the plugin runs with it, GFD without.
        for p in sim.cluster.list(POD):
            wanted = "nvidia" if name_of(p).startswith("nvidia-device-plugin") else None
            if name_of(p).startswith(("nvidia-device-plugin", "gpu-feature-discovery")):
                sim.cluster.patch(
                    POD, name=name_of(p), patch={"spec": {"runtimeClassName": wanted}}, namespace=namespace_of(p)
                )

    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        runtime_classes,
        {
            "do": "pod",
            "daemonset": "gpu-feature-discovery",
            "node": "n1",
            "containers": [crash],
            "logs": {"gpu-feature-discovery": log},
        },
    )
    root = next(f for f in report.findings if f.root and f.node == "n1")
    assert (root.id, root.link) == ("gfd.not-ready", "gfd"), (root.id, root.fix)
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.changes == {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}
