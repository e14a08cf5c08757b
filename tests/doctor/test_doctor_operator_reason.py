"""The GPU Operator's own log and ClusterPolicy conditions, and Node Feature Discovery's pods, read where the operator
deploys nothing or on no node: the finding names the operator's reason (catalog.yaml, component
``gpu-operator (operator)``) and NFD's pod state, with the repair they call for.

Log lines are written as the operator writes them: controller-runtime's zap JSON (NVIDIA/gpu-operator
cmd/gpu-operator/main.go@v25.3.4, the chart's default epoch time encoding), the messages of
controllers/clusterpolicy_controller.go and object_controls.go@v25.3.4 and controller-runtime's "Reconciler error";
the ClusterPolicy's conditions as clusterpolicy_controller.go sets them (internal/conditions: type Ready/Error,
reasons NFDLabelsMissing, NoGPUNodes, ReconcileFailed). Pod states as the kubelet reports them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doctor.small_cluster import diagnosed
from doctor.test_doctor_state_rules import PLUGIN_ON_NFD
from sim.heldout import harness

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.operator_says import operator_says
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.kube.kinds import Kind
from gpuchain.kube.objects import name_of
from gpuchain.operator.reconcile import active_policy
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

NS = "gpu-operator"
OPERATOR = "gpu-operator-6b8c8f7d9-xk2lp"
NVIDIA_POLICY = Kind(api_version="nvidia.com/v1", kind="ClusterPolicy", plural="clusterpolicies", namespaced=False)
#: The Kyverno denial the API server returns for a privileged DaemonSet (the webhook's name and the policy's words
#: as Kyverno's disallow-privileged-containers policy writes them).
DENIED = (
    'admission webhook "validate.kyverno.svc-fail" denied the request: \n\nresource '
    "DaemonSet/gpu-operator/nvidia-driver-daemonset was blocked due to the following policies \n\n"
    "disallow-privileged-containers:\n  privileged-containers: 'validation error: Privileged mode is disallowed.'"
)


def _zap(level: str, msg: str, ts: float, **fields: Any) -> str:
    """One line of the operator's log as controller-runtime's zap JSON encoder writes it."""
    line = {"level": level, "ts": ts, "logger": "controllers.ClusterPolicy", "msg": msg, **fields}
    return json.dumps(line, separators=(",", ":"))


NFD_MISSING_LOG = "\n".join(
    [
        _zap("info", "Kubernetes version detected", 1733490000.1, version="v1.31.4"),
        _zap("info", "Number of nodes with GPU label", 1733490000.4, NodeCount=0),
        _zap("info", "WARNING: NFD labels missing in the cluster, GPU nodes cannot be discovered.", 1733490000.5),
        _zap("info", "No GPU node can be found in the cluster.", 1733490000.5),
        _zap("info", "No NFD label found, polling for new nodes.", 1733490009.2, requeueAfter=45),
    ]
)


def _operator(log: str, nodes: str = "cpu") -> Any:
    """An edit: NVIDIA's operator Deployment pod, Running and ready on ``nodes``, its log ``log``."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": OPERATOR, "namespace": NS, "labels": {"app": "gpu-operator"}},
                "spec": {
                    "nodeName": nodes,
                    "containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.3.4"}],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": "gpu-operator",
                            "ready": True,
                            "restartCount": 0,
                            "image": "nvcr.io/nvidia/gpu-operator:v25.3.4",
                            "state": {"running": {"startedAt": "2026-12-06T12:00:00Z"}},
                        }
                    ],
                },
            }
        )
        sim.cluster.set_logs(OPERATOR, namespace=NS, container="gpu-operator", text=log)

    return edit


def _conditions(*conditions: tuple[str, str, str, str], state: str = "ready") -> Any:
    """An edit: the nvidia.com ClusterPolicy's status as the operator writes it."""

    def edit(sim: SimCluster) -> None:
        stamp = "2026-12-06T12:00:10Z"
        status = {
            "state": state,
            "namespace": NS,
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": stamp}
                for t, s, r, m in conditions
            ],
        }
        sim.cluster.patch_status(NVIDIA_POLICY, name="cluster-policy", status=status)

    return edit


def _nfd(worker_nodes: list[str], master_ready: bool = True) -> list[Any]:
    """Edits: the operator chart's bundled NFD (worker DaemonSet on ``worker_nodes``, master as a pod)."""
    image = "registry.k8s.io/nfd/node-feature-discovery:v0.17.2"
    worker = {
        "do": "add-daemonset",
        "namespace": NS,
        "name": "gpu-operator-node-feature-discovery-worker",
        "containers": ["worker"],
        "image": image,
        "nodes": worker_nodes,
    }
    master = {
        "do": "add-daemonset",
        "namespace": NS,
        "name": "gpu-operator-node-feature-discovery-master",
        "containers": ["master"],
        "image": image,
        "nodes": ["cpu"],
    }
    edits: list[Any] = [worker, master]
    if not master_ready:
        crash = {
            "name": "master",
            "ready": False,
            "restarts": 9,
            "state": {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"},
        }
        edits.append(
            {
                "do": "pod",
                "daemonset": "gpu-operator-node-feature-discovery-master",
                "namespace": NS,
                "containers": [crash],
                "logs": {
                    "master": 'E1206 12:00:01.000000       1 main.go:164] "error while running" err="failed to '
                    'start the master: nfd-master is not able to talk to the API server"'
                },
            }
        )
    return edits


BARE_METAL = "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g, nfd: false}\n"
NFD_MISSING = _conditions(("Ready", "True", "NFDLabelsMissing", "No NFD labels found"), ("Error", "False", "Ready", ""))


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_an_operator_placing_nothing_because_an_nfd_worker_cannot_pull_its_image_names_the_image() -> None:
    pull = {
        "name": "worker",
        "ready": False,
        "state": {
            "waiting": "ImagePullBackOff",
            "message": 'Back-off pulling image "registry.k8s.io/nfd/node-feature-discovery:v0.17.2"',
        },
    }
    report = diagnosed(
        BARE_METAL,
        _operator(NFD_MISSING_LOG),
        NFD_MISSING,
        *_nfd(["cpu", "g"]),
        {"do": "pod", "daemonset": "gpu-operator-node-feature-discovery-worker", "node": "g", "containers": [pull]},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("nfd.not-labelled", "gfd")
    assert "ImagePullBackOff" in root.cause and "image.repository" in root.fix
    assert any("catalog: gpu-operator.nfd-labels-missing" in e for e in root.evidence)
    assert any(e.startswith("ClusterPolicy Ready=True (NFDLabelsMissing)") for e in root.evidence)


def test_an_nfd_master_that_crash_loops_is_named_with_its_unrecognised_line() -> None:
    report = diagnosed(BARE_METAL, _operator(NFD_MISSING_LOG), NFD_MISSING, *_nfd(["cpu", "g"], master_ready=False))
    (root,) = _roots(report)
    assert root.id == "nfd.not-labelled" and "master" in root.cause and "CrashLoopBackOff" in root.cause
    assert any(e.startswith("nfd-master log, unrecognised:") for e in root.evidence)
    assert root.action is not None and root.action.op is FixOp.DELETE


def test_no_nfd_at_all_installs_it() -> None:
    report = diagnosed(BARE_METAL, _operator(NFD_MISSING_LOG), NFD_MISSING)
    (root,) = _roots(report)
    assert root.id == "nfd.not-labelled" and root.action is not None and root.action.op is FixOp.INSTALL


def test_nfd_running_and_labelling_nodes_without_nvidia_devices_is_no_fault() -> None:
    """A GPU pool scaled to zero: NFD labels every node, none has an NVIDIA device; the operator waits for one."""
    log = _zap("info", "No GPU node found, watching for new nodes to join the cluster.", 1733490010.0)
    report = diagnosed(
        BARE_METAL,
        _operator(log),
        _conditions(
            ("Ready", "True", "NoGPUNodes", "No GPU node found, watching for new nodes to join the cluster."),
            ("Error", "False", "Ready", ""),
        ),
        *_nfd(["cpu", "g"]),
        {"do": "node", "node": "g", "labels": {"feature.node.kubernetes.io/kernel-version.full": "6.8.0-49-generic"}},
    )
    assert not _roots(report)


WEBHOOK_LOG = "\n".join(
    [
        _zap(
            "info",
            "Couldn't create DaemonSet",
            1733490001.2,
            DaemonSet="nvidia-driver-daemonset",
            Namespace=NS,
            Name="nvidia-driver-daemonset",
            Error=DENIED,
        ),
        json.dumps(
            {
                "level": "error",
                "ts": 1733490001.2,
                "msg": "Reconciler error",
                "controller": "clusterpolicy-controller",
                "object": {"name": "cluster-policy"},
                "namespace": "",
                "name": "cluster-policy",
                "reconcileID": "8d6c3f0e-5b1a-4c43-9a55-2f7b1c0e9d11",
                "error": DENIED,
            },
            separators=(",", ":"),
        ),
    ]
)


def _no_driver_daemonset() -> dict[str, str]:
    return {"do": "delete-daemonset", "namespace": NS, "name": "nvidia-driver-daemonset"}


def test_a_daemonset_an_admission_webhook_denies_gets_the_exemption_not_an_operator_restart() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
        _no_driver_daemonset(),
        _operator(WEBHOOK_LOG),
        _conditions(
            ("Ready", "False", "Error", ""),
            ("Error", "True", "ReconcileFailed", f"Failed to reconcile state-driver: {DENIED}"),
            state="notReady",
        ),
    )
    root = next(f for f in _roots(report) if f.node == "g")
    assert (root.id, root.link) == ("operand.not-deployed", "driver")
    assert "admission webhook" in root.cause and "PolicyException" in root.fix and "delete pod" not in root.fix
    assert any("catalog: gpu-operator.create-denied-by-webhook" in e for e in root.evidence)


def test_an_operator_error_the_catalog_does_not_know_is_quoted_as_unrecognised() -> None:
    odd = json.dumps(
        {"level": "error", "ts": 1733490001.2, "msg": "Reconciler error", "error": "state-driver: quux exploded"},
        separators=(",", ":"),
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
        _no_driver_daemonset(),
        _operator(odd),
        _conditions(("Ready", "False", "Error", ""), ("Error", "True", "ReconcileFailed", "quux"), state="notReady"),
    )
    root = next(f for f in _roots(report) if f.node == "g")
    assert root.id == "operand.not-deployed"
    assert f"operator log, unrecognised: {odd}" in root.evidence and "catalog does not know" in root.cause


def test_the_operator_log_is_read_from_a_dump_too(tmp_path: Path) -> None:
    sim = build(parse_scenario(BARE_METAL))
    for edit in [_operator(NFD_MISSING_LOG), NFD_MISSING, *_nfd(["cpu"])]:
        edit(sim) if callable(edit) else harness._apply(sim.cluster, dict(edit))
    write_dump(sim.cluster, tmp_path)
    report = diagnose(read_dump(tmp_path))
    (root,) = _roots(report)
    assert root.id == "nfd.not-labelled"
    assert any("catalog: gpu-operator.nfd-labels-missing" in e for e in root.evidence)


NFD_WORKER = {
    "do": "add-daemonset",
    "namespace": "nfd",
    "name": "nfd-worker",
    "containers": ["worker"],
    "image": "registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
    "nodes": ["cpu", "g"],
}
EKS = "name: t\nstack: eks\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n"
UNLABELLED = [
    {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"},
    PLUGIN_ON_NFD,
    NFD_WORKER,
    {"do": "node", "node": "g", "labels": {"feature.node.kubernetes.io/pci-10de.present": None}},
    {"do": "node", "node": "g", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
]


def test_a_gpu_node_whose_nfd_worker_is_pending_gets_what_the_scheduler_asks_for() -> None:
    said = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
    report = diagnosed(
        EKS,
        *UNLABELLED,
        {"do": "pod", "daemonset": "nfd-worker", "namespace": "nfd", "node": "g", "unschedulable": said},
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("nfd.not-labelled", "gfd", "g")
    assert "Pending" in root.cause and f"scheduler: {said}" in root.evidence and "Insufficient cpu" in root.fix


def test_a_gpu_node_whose_nfd_worker_crashes_on_its_config_gets_the_config_corrected() -> None:
    crash = {"name": "worker", "ready": False, "restarts": 4, "state": {"waiting": "CrashLoopBackOff"}}
    # kubernetes-sigs/node-feature-discovery cmd/nfd-worker/main.go and pkg/nfd-worker/nfd-worker.go@v0.17.3, as klog
    # writes an ErrorS line; the YAML error is sigs.k8s.io/yaml's for a worker.config indented wrongly.
    log = (
        'E1206 12:00:01.000000       1 main.go:73] "error while running" err="failed to parse config file: error '
        'converting YAML to JSON: yaml: line 4: mapping values are not allowed in this context"'
    )
    report = diagnosed(
        EKS,
        *UNLABELLED,
        {
            "do": "pod",
            "daemonset": "nfd-worker",
            "namespace": "nfd",
            "node": "g",
            "containers": [crash],
            "logs": {"worker": log},
        },
    )
    (root,) = _roots(report)
    assert root.id == "nfd.not-labelled" and "CrashLoopBackOff" in root.cause
    assert any(e.startswith("nfd-worker log: ") for e in root.evidence)
    assert any(e.startswith("catalog: node-feature-discovery.worker-config-unparsable") for e in root.evidence)
    assert "worker.config" in root.fix and "nfd/nfd-worker-" in root.fix


def _driver_on_deploy_label(sim: SimCluster) -> None:
    """The operator's driver DaemonSet as NVIDIA renders it (assets/state-driver/0500_daemonset.yaml@v25.3.4:
    nodeSelector nvidia.com/gpu.deploy.driver=true), with no pod on g, which has neither that label nor
    nvidia.com/gpu.present (the operator sets both from NFD's pci-10de label); g is a GPU instance type."""
    selector = {"nvidia.com/gpu.deploy.driver": "true"}
    patch = {"spec": {"template": {"spec": {"nodeSelector": selector}}}}
    sim.cluster.patch(DAEMONSET, name="nvidia-driver-daemonset", namespace=NS, patch=patch)
    for pod in sim.cluster.list(POD):
        if pod["metadata"]["name"].startswith("nvidia-driver-daemonset") and pod["spec"].get("nodeName") == "g":
            sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=NS)
    labels = {k: None for k in sim.cluster.get(NODE, name="g")["metadata"].get("labels", {}) if "nvidia.com/" in k}
    labels |= {"node.kubernetes.io/instance-type": "g5.12xlarge"}
    sim.cluster.patch(NODE, name="g", patch={"metadata": {"labels": labels}})


def test_a_gpu_node_the_operator_never_labelled_for_its_driver_names_nfd_s_worker() -> None:
    pull = {
        "name": "worker",
        "ready": False,
        "state": {"waiting": "ErrImagePull", "message": "rpc error: code = NotFound desc = failed to pull and unpack"},
    }
    report = diagnosed(
        BARE_METAL,
        *_nfd(["cpu", "g"]),
        {"do": "pod", "daemonset": "gpu-operator-node-feature-discovery-worker", "node": "g", "containers": [pull]},
        _driver_on_deploy_label,
    )
    root = next(f for f in _roots(report) if f.node == "g")
    assert (root.id, root.link) == ("nfd.not-labelled", "gfd")
    assert "ErrImagePull" in root.cause and "image.repository" in root.fix
    assert any("nvidia.com/gpu.deploy.driver" in e and "set from" in e for e in root.evidence)


def _driver_crd(sim: SimCluster) -> None:
    """The ClusterPolicy hands the driver to NVIDIADriver objects (api/nvidia/v1 clusterpolicy_types.go@v25.3.4
    driver.useNvidiaDriverCRD), and the operator removed its own driver DaemonSet."""
    patch = {"spec": {"driver": {"useNvidiaDriverCRD": True, "version": "570.124.06"}}}
    sim.cluster.patch(NVIDIA_POLICY, name="cluster-policy", patch=patch)


def test_a_driver_handed_to_nvidiadriver_objects_none_of_which_selects_the_node_gets_one() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
        _no_driver_daemonset(),
        _operator(
            _zap(
                "info",
                "NVIDIADriver CRD is enabled, cleaning up all NVIDIA driver daemonsets owned by ClusterPolicy",
                1733490001.0,
            )
        ),
        _driver_crd,
    )
    root = next(f for f in _roots(report) if f.node == "g")
    assert (root.id, root.link) == ("operand.not-deployed", "driver")
    assert "no NVIDIADriver selects this node" in root.cause
    assert (
        '"kind":"NVIDIADriver"' in root.fix and '"version":"570.124.06"' in root.fix and '"nodeSelector":{}' in root.fix
    )


def test_an_nvidiadriver_that_selects_the_node_is_not_called_missing() -> None:
    nvidiadriver = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "default"},
        "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "570.124.06"},
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
        _no_driver_daemonset(),
        _operator(""),
        _driver_crd,
        lambda sim: sim.cluster.create(nvidiadriver),
    )
    assert report.findings and not any("no NVIDIADriver selects" in f.cause for f in report.findings)


def test_a_runtime_the_operator_does_not_recognise_quotes_the_operator_s_line() -> None:
    """state_manager.go@v25.3.4 getRuntime: "Unable to get runtime info for node %s: %v", the error getRuntimeString's
    "runtime not recognized: %s"; it then configures containerd. The scheme is a constructed one."""
    line = _zap("info", "Unable to get runtime info for node g: runtime not recognized: frakti://1.0.0", 1733490000.3)
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: g, containerRuntime: 'frakti://1.0.0'}\n  - {name: ok}\n",
        _operator(line, nodes="ok"),
        _conditions(("Ready", "False", "Error", ""), state="notReady"),
    )
    found = next(f for f in report.findings if f.id == "node.runtime-unsupported")
    assert f"operator log: {line}" in found.evidence
    assert any(e.startswith("catalog: gpu-operator.runtime-unknown") for e in found.evidence)


def test_an_error_condition_the_catalog_does_not_know_is_quoted_where_the_log_was_not_read() -> None:
    """A dump of the ClusterPolicy without the operator's log: the Error condition's message is the operator's word."""
    said = "Failed to reconcile state-container-toolkit: quux exploded"
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: g}\n",
        _no_driver_daemonset(),
        _operator(""),
        _conditions(("Ready", "False", "Error", ""), ("Error", "True", "ReconcileFailed", said), state="notReady"),
    )
    root = next(f for f in _roots(report) if f.node == "g")
    assert root.id == "operand.not-deployed" and "catalog does not know" in root.cause
    assert f"ClusterPolicy status, unrecognised: ClusterPolicy Error=True (ReconcileFailed): {said}" in root.evidence
    assert root.action is not None and root.action.op is FixOp.DELETE  # the operator, run again


def test_of_two_clusterpolicies_the_one_the_operator_reconciles_is_read_and_the_other_named_ignored() -> None:
    """controllers/clusterpolicy_controller.go@v25.3.4: a ClusterPolicy other than the operator's singleton is left
    without status; an older one applied by hand that turns the driver off must not be read as the user's policy."""
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "aaa-driver-off"},
        "spec": {"driver": {"enabled": False}},
    }
    sim = build(parse_scenario("name: t\nstack: gpu-operator\nnodes:\n  - {name: g}\n"))
    sim.cluster.create(policy)
    harness._apply(sim.cluster, _no_driver_daemonset())
    # Created in the same second, the oldest-then-by-name rule alone would read the ignored one.
    assert name_of(active_policy(sim.cluster.list(NVIDIA_POLICY)) or {}) == "aaa-driver-off"
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert report.stack["policy"].endswith("/cluster-policy")
    assert any("aaa-driver-off ignored" in n for n in report.stack["notes"])
    assert any(f.id == "operand.not-deployed" and f.node == "g" for f in report.findings)


def test_the_operator_s_own_cause_wins_over_the_api_error_it_wraps() -> None:
    """state_manager.go@v25.3.4 wraps the refused namespace patch ("unable to label namespace %s with pod security
    levels: %v") in clusterpolicy_controller.go's "failed to initialize ClusterPolicy controller: %v"; the API
    server's RBAC words inside it name no repair of their own here."""
    refused = (
        'namespaces "gpu-operator" is forbidden: User "system:serviceaccount:gpu-operator:gpu-operator" cannot patch '
        'resource "namespaces" in API group "" in the namespace "gpu-operator"'
    )
    line = _zap(
        "error",
        "failed to initialize ClusterPolicy controller: unable to label namespace gpu-operator with pod security "
        f"levels: {refused}",
        1733490000.2,
    )
    pod = {
        "metadata": {"name": OPERATOR, "namespace": NS},
        "spec": {"containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.3.4"}]},
    }
    said = operator_says([pod], namespace=NS, policy=None, log=lambda _pod, _container: line)
    assert said is not None and said.match is not None
    assert said.match.entry.id == "gpu-operator.namespace-psa-label-refused"
    assert "pod-security.kubernetes.io/enforce=privileged" in said.match.entry.repair(namespace=NS)


def test_a_running_nfd_master_the_api_refuses_gets_its_node_permissions() -> None:
    """nfd-master runs ready but may not patch nodes (pkg/nfd-master/nfd-master.go@v0.17.3 "failed to update node",
    klog's ErrorS with the API server's RBAC refusal); the operator finds no NFD label anywhere."""
    refused = (
        'E1206 12:00:05.000000       1 nfd-master.go:920] "failed to update node" err="nodes \\"g\\" is forbidden: '
        'User \\"system:serviceaccount:gpu-operator:node-feature-discovery\\" cannot patch resource \\"nodes\\" in '
        'API group \\"\\" at the cluster scope" nodeName="g"'
    )
    master_log = {
        "do": "pod",
        "daemonset": "gpu-operator-node-feature-discovery-master",
        "namespace": NS,
        "containers": [{"name": "master", "ready": True, "state": {"running": True}}],
        "logs": {"master": refused},
    }
    report = diagnosed(BARE_METAL, _operator(NFD_MISSING_LOG), NFD_MISSING, *_nfd(["cpu", "g"]), master_log)
    (root,) = _roots(report)
    assert root.id == "nfd.not-labelled" and "may not patch or update nodes" in root.cause
    assert any(e.startswith("catalog: node-feature-discovery.master-node-update-forbidden") for e in root.evidence)
    assert "master.rbac.create=true" in root.fix
