"""The upper links' messages read from their source (catalog.yaml, scripts/upstream-messages) reach the doctor's
findings by each way a component's words arrive: a crash-looping operand's log (the device plugin's, GFD's and the
exporter's in test_doctor_upstream_messages' CRASHES; the MIG manager's here, crashing or leaving a layout failed),
the kubelet's admission Event relaying the plugin's Allocate answer, and the kubelet's FailedPrepareDynamicResources
Event relaying NVIDIA's DRA plugin. Each finding names its link and the entry's
repairing action (the key to set), never a restart that changes nothing.

The lines are the components' format strings, wrapper by wrapper as each layer writes them:
- the plugin (NVIDIA/k8s-device-plugin@v0.17.1): cmd/nvidia-device-plugin/main.go "unable to load config: %v",
  "error starting plugins: %v", plugin-manager.go "unable to create plugin manager: %v"; api/config/v1/config.go
  "unable to parse config file: %v", "error parsing config file: %v", "unknown version: %v"; internal/rm
  device_map.go "error building device map: %v", "error building MIG device map: %v", "more than one MIG device
  type present on node"; rm.go "%w: maximum request size for shared resources is 1; found %d";
- the kubelet (kubernetes pkg/kubelet/cm/admission/errors.go@v1.34.4) "Allocate failed due to %v, which is
  unexpected", with the gRPC status "rpc error: code = Unknown desc = %s", or its device manager's own
  (pkg/kubelet/cm/devicemanager/manager.go@v1.34.4) "cannot allocate unregistered device %s";
- dcgm-exporter internal/pkg/dcgmprovider/dcgm.go@4.5.3-4.8.2 "Failed to connect to remote hostengine" (logrus,
  with go-dcgm's error as error=); internal/pkg/counters/counter_config.go@4.2.3-4.1.1 "could not find DCGM field;
  err: %w" around "unknown ExporterCounter field '%s'", which pkg/cmd/app.go logs as it is (slog.Error);
- the MIG manager cmd/nvidia-mig-manager/main.go@v0.15.0 "failed to setup MIG config: %w" around "failed to read
  custom config %s: %w";
- NVIDIA's GPU kubelet plugin cmd/gpu-kubelet-plugin/device_state.go@v25.8.1 "MIG profile %v does not exist on GPU:
  %v" and cmd/compute-domain-kubelet-plugin/device_state.go "only opaque parameters are supported by this driver",
  inside the kubelet's words (see test_doctor_dra_prepare).
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import crashing_pod, diagnosed
from test_doctor_dra_prepare import KUBELET, PLUGIN_SAYS, claim_pod, dra_node, kubelet_event

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report
from gpuchain.sim.build import SimCluster

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n"
MIG = "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n"


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _cites(finding: Finding, entry: str) -> bool:
    return any(e.startswith(f"catalog: {entry} (") for e in finding.evidence)


def test_a_mig_manager_that_cannot_read_its_custom_layouts_is_the_mig_link_with_the_configmap_to_create() -> None:
    log = (
        'time="2026-12-06T10:00:00Z" level=fatal msg="failed to setup MIG config: failed to read custom config '
        '/mig-parted-config/config.yaml: stat /mig-parted-config/config.yaml: no such file or directory"\n'
    )
    for labels in ({"nvidia.com/mig.config": "all-3g.40gb"}, {"nvidia.com/mig.config.state": "pending"}):
        report = diagnosed(
            MIG,
            {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-3g.40gb", **labels}},
            crashing_pod("nvidia-mig-manager", "nvidia-mig-manager", "m", log),
        )
        (root,) = _roots(report)
        assert (root.id, root.link, root.node) == ("mig.not-ready", "mig", "m")
        assert _cites(root, "mig-manager.custom-config-missing")
        # Its repair is the ConfigMap the manager reads, not cancelling the change the label asks for.
        assert "spec.migManager.config.name" in root.fix and "mig.config-" not in root.fix


def _refused(message: str) -> Any:
    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "job-0.admission", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "job-0", "namespace": "default"},
                "type": "Warning",
                "reason": "UnexpectedAdmissionError",
                "message": message,
                "source": {"component": "kubelet", "host": "n1"},
            }
        )

    return edit


#: (what the device manager or the plugin says inside the kubelet's admission words, the entry, a key of its repair)
REFUSALS = [
    ("invalid request: maximum request size for shared resources is 1; found 2", "k8s-device-plugin.shared-request-too-big",
     "failRequestsGreaterThanOne"),
    ("cannot allocate unregistered device nvidia.com/gpu", "kubelet.device-plugin-unregistered",
     "delete pod nvidia-device-plugin-daemonset-"),
]  # fmt: skip


@pytest.mark.parametrize(("said", "entry", "key"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_a_pod_the_kubelet_refuses_for_what_a_restart_does_not_change_gets_that_repair(
    said: str, entry: str, key: str
) -> None:
    message = f"Allocate failed due to rpc error: code = Unknown desc = {said}, which is unexpected"
    if entry.startswith("kubelet."):
        message = f"Allocate failed due to {said}, which is unexpected"
    report = diagnosed(OPERATOR, _refused(message))
    (found,) = [f for f in report.findings if f.id == "workload.admission-failed"]
    assert (found.link, found.node) == ("device-plugin", "n1")
    assert _cites(found, entry) and _cites(found, "kubelet.allocate-failed")
    assert key in found.fix and "restart kubelet" not in found.fix
    assert found.action is None


@pytest.mark.parametrize(
    ("said", "entry", "key"),
    [
        ("prepare devices failed: MIG profile 3g.40gb does not exist on GPU: GPU-0aa1b2c3", "mig-profile-missing",
         "nvidia-smi mig -lgip"),
        ("prepare devices failed: error applying config: only opaque parameters are supported by this driver",
         "claim-config-invalid", "resource.nvidia.com/v1beta1"),
    ],
)  # fmt: skip
def test_a_claim_the_dra_plugin_refuses_for_its_own_content_is_repaired_in_the_claim(
    said: str, entry: str, key: str
) -> None:
    report = dra_node(claim_pod(), kubelet_event(KUBELET + PLUGIN_SAYS + said))
    (found,) = [f for f in report.findings if f.id == "device-plugin.dra-prepare-failed"]
    assert found.root and _cites(found, f"k8s-dra-driver-gpu.{entry}")
    # Restarting the plugin would prepare the same claim the same way: the claim is what changes.
    assert key in found.fix and found.action is None and "delete pod" not in found.fix


#: mig-parted's words under the MIG manager's wrapper (cmd/nvidia-mig-parted/apply/apply.go@v0.15.0 "error applying MIG
#: configuration with hooks: %v", pkg/mig/config/config.go "error creating GPU instance for '%v': %v" with NVML's text
#: for ERROR_INSUFFICIENT_RESOURCES; apply.go "error parsing config file: %v" around "unmarshal error: %v").
FAILED_LAYOUTS = [
    (
        "error applying MIG configuration with hooks: error creating GPU instance for '3g.40gb': Insufficient Resources",
        "mig-parted.instance-create-failed",
        "nvidia-smi mig -lgip",
    ),
    (
        "error parsing config file: unmarshal error: error converting YAML to JSON: yaml: line 4: did not find "
        "expected key",
        "mig-parted.config-unmarshal",
        "spec.migManager.config.name",
    ),
]


@pytest.mark.parametrize(("said", "entry", "key"), FAILED_LAYOUTS, ids=[f[1] for f in FAILED_LAYOUTS])
def test_a_layout_mig_parted_refuses_is_repaired_as_its_words_say(said: str, entry: str, key: str) -> None:
    log = f'time="2026-12-06T10:00:00Z" level=fatal msg="{said}"\n'
    report = diagnosed(
        MIG,
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-3g.40gb"}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    # The MIG manager's own entry, never the device plugin's for the same words about its own config file.
    assert _cites(root, entry) and key in root.fix and "devicePlugin" not in root.fix


def _nfd_master(log: str) -> Any:
    """An edit: the operator's bundled NFD master pod (Deployment, image node-feature-discovery v0.17.3), running
    ready, with ``log`` as its container's log."""

    def edit(sim: SimCluster) -> None:
        name = "gpu-operator-node-feature-discovery-master-6d4f8b9c7-x2k4p"
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "gpu-operator"},
                "spec": {
                    "containers": [{"name": "master", "image": "registry.k8s.io/nfd/node-feature-discovery:v0.17.3"}]
                },
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": "master", "ready": True, "restartCount": 0, "state": {"running": {}}}
                    ],
                },
            }
        )
        sim.cluster.set_logs(name, namespace="gpu-operator", container="master", text=log)

    return edit


def test_gfd_labels_nfd_master_drops_get_nfd_masters_config_not_a_new_gfd_pod() -> None:
    """nfd-master's klog line (pkg/nfd-master/nfd-master.go@v0.17.3: klog.ErrorS(err, "ignoring label", ...) with
    filterFeatureLabel's "namespace %q is not allowed")."""
    said = (
        'E1206 10:00:00.000000       1 nfd-master.go:539] "ignoring label" err="namespace \\"nvidia.com\\" is not '
        'allowed" labelKey="nvidia.com/gpu.product" labelValue="NVIDIA-A100-SXM4-80GB"\n'
    )
    unlabel = {"do": "node", "node": "n1", "labels": {"nvidia.com/gpu.product": None}}
    (found,) = [f for f in diagnosed(OPERATOR, unlabel, _nfd_master(said)).findings if f.id == "gfd.labels-missing"]
    assert found.node == "n1" and _cites(found, "node-feature-discovery.label-denied")
    assert "extraLabelNs" in found.fix and "delete pod" not in found.fix
    # Without that line the repair stays a new GFD pod.
    (plain,) = [f for f in diagnosed(OPERATOR, unlabel, _nfd_master("")).findings if f.id == "gfd.labels-missing"]
    assert "delete pod" in plain.fix and not _cites(plain, "node-feature-discovery.label-denied")
