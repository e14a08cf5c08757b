"""Fixes that fix: for every finding id a scenario expects, apply the doctor's own fix (the data,
not the text) to that scenario's simulated cluster, diagnose again, and the finding is gone from
the nodes it named. Findings with no command that can fix them (hardware) say so and name the
action, and the simulator applies that action too."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from doctor.sim_fixes import apply_fix
from doctor.small_cluster import diagnosed, no_gpus, plugin_pod, unschedulable

from gpuchain.doctor import Report, run_doctor
from gpuchain.doctor.model import NOT_SIMULATED, FixOp, Severity
from gpuchain.doctor.stacks import NVIDIA_DRIVER
from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import DAEMONSET, NODE, POD, Cluster
from gpuchain.kube.allocator import DRA
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim import Scenario, build, load_scenario, parse_scenario, scenario_names
from gpuchain.sim.build import SimCluster

#: Finding ids whose text is a consequence or an explanation, not a fault with a fix of its own.
NO_FIX = {
    "device-plugin.mig-resources",  # info: MIG slices explain the count
    "workload.insufficient-gpu",  # a consequence of the root cause (or a full cluster)
}


def _cases() -> list[tuple[str, str]]:
    return [(name, fid) for name in scenario_names() for fid in load_scenario(name).expect if fid not in NO_FIX]


def _diagnose(scenario: Scenario) -> Report:
    """As on a live cluster: list calls, then the logs the doctor asks for, through the port."""
    sim = build(scenario)
    return run_doctor(sim.cluster, reader=sim.read_log)


CASES = _cases()


def test_the_corpus_expects_every_fixable_finding_somewhere() -> None:
    ids = {fid for _, fid in CASES}
    for fid in (
        "driver.kernel-mismatch",
        "driver.host-driver-conflict",
        "driver.version-skew",
        "toolkit.runtime-not-configured",
        "device-plugin.config-missing",
        "toolkit.runtime-not-default",
        "mig.invalid-for-strategy",
        "gpu.lost",
        "node.opted-out",
        "operand.not-scheduled",
        "workload.nvml-lost",
        # fixes derived from what the failing component's own log or status says
        "driver.not-ready",
        "toolkit.not-ready",
        "device-plugin.not-ready",
        "gfd.not-ready",
        "exporter.not-ready",
        "device-plugin.not-registered",
        "gfd.labels-missing",
        "driver.missing",
        "stack.missing",
        "policy.missing",
        "node.not-ready",
        "node.pressure",
        "node.network-unavailable",
    ):
        assert fid in ids, fid


def pastes(fix: str) -> bool:
    """Is a fix one line that a shell reads as it is printed (``bash -n``: parsed, not run)? Work
    outside the cluster is said as a comment, so prose never runs as a command."""
    checked = subprocess.run(["bash", "-n", "-c", fix], capture_output=True, timeout=10, check=False)
    return "\n" not in fix and checked.returncode == 0


@pytest.mark.parametrize(("scenario", "finding_id"), CASES, ids=[f"{s}:{f}" for s, f in CASES])
def test_applying_the_fix_clears_the_finding(scenario: str, finding_id: str) -> None:
    sc = load_scenario(scenario)
    before = _diagnose(sc)
    found = [f for f in before.findings if f.id == finding_id]
    assert found, f"{scenario}: the doctor does not name {finding_id} ({sorted(before.ids)})"
    first = found[0]
    if first.action is None:
        pytest.fail(f"{finding_id} in {scenario} has no fix as data; its text is: {first.fix}")
    assert pastes(first.fix), f"{finding_id}: its fix does not paste into a shell: {first.fix}"
    if first.action.op is FixOp.HARDWARE:
        assert first.fix.count("hardware, no command fixes it") == 1 and first.action.changes["action"]
    if first.action.op is FixOp.NODE:
        # Work on the node, outside the cluster's objects: the text says where and names the action.
        assert "(outside the cluster):" in first.fix
        assert first.action.changes["action"] in first.fix
    fixed = sc
    targets = {f.action.target: f.action for f in found if f.action is not None}
    for action in targets.values():
        fixed = apply_fix(fixed, action)
    after = _diagnose(fixed)
    still = [f for f in after.findings if f.id == finding_id and f.severity is not Severity.INFO]
    assert not still, f"{finding_id} still named after {first.fix}: {[f.node for f in still]}"


def _operator_running(sim_cluster: Cluster, name: str) -> None:
    """The operator's pod, Running and ready (the simulator renders none for these stacks)."""
    sim_cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "gpu-operator"},
            "spec": {"containers": [{"name": "operator", "image": "operator"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "operator", "ready": True}]},
        }
    )


@pytest.mark.parametrize(
    ("scenario", "operator"),
    [("healthy", "gpuchain-operator-5c9f7d8b6-x2k4q"), ("healthy-gpu-operator", "gpu-operator-7d6d75f67c-jsrbx")],
)
def test_a_missing_runtime_class_restarts_the_operator_that_makes_it(scenario: str, operator: str) -> None:
    """toolkit.runtime-class-missing on an operator's stack: the operator makes the RuntimeClass, so the
    fix restarts the operator (it reconciles on start), never applies a copy by hand."""
    from gpuchain.kube import RUNTIME_CLASS, name_of

    sim = build(load_scenario(scenario))
    for rc in sim.cluster.list(RUNTIME_CLASS):
        sim.cluster.delete(RUNTIME_CLASS, name=name_of(rc))
    _operator_running(sim.cluster, operator)
    found = [f for f in run_doctor(sim.cluster).findings if f.id == "toolkit.runtime-class-missing"]
    assert found and all(f.action is not None and f.action.op is FixOp.DELETE for f in found)
    assert found[0].fix.startswith(f"kubectl -n gpu-operator delete pod {operator}")
    assert "apply" not in found[0].fix and found[0].action is not None
    assert "no operator" in found[0].action.changes[NOT_SIMULATED]


def test_the_runtime_class_a_plugin_chart_names_is_created_on_the_cluster() -> None:
    """toolkit.runtime-class-missing where no operator makes it (NVIDIA's device plugin chart with
    runtimeClassName set): the fix is the RuntimeClass itself, created through the API."""
    from doctor.sim_fixes import apply_to_cluster

    from gpuchain.kube import DAEMONSET, POD, name_of

    sim = build(load_scenario("healthy-nvidia-device-plugin"))
    for pod in sim.cluster.list(POD):
        if any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or []):
            sim.cluster.patch(
                POD,
                name=name_of(pod),
                patch={"spec": {"runtimeClassName": "nvidia"}},
                namespace=pod["metadata"]["namespace"],
            )
    assert sim.cluster.list(DAEMONSET)
    found = [f for f in run_doctor(sim.cluster).findings if f.id == "toolkit.runtime-class-missing"]
    assert found and all(f.action is not None and f.action.op is FixOp.CREATE for f in found)
    action = found[0].action
    assert action is not None and pastes(found[0].fix)
    apply_to_cluster(sim.cluster, action)
    after = run_doctor(sim.cluster)
    assert "toolkit.runtime-class-missing" not in after.ids and not after.broken


# -- ids whose scenario is a change made to a built cluster through the API -------------------------


def test_an_invalid_policy_is_reset_field_by_field_through_the_api() -> None:
    """policy.invalid: the operator refuses a spec; the fix merge-patches the refused fields away (their
    defaults apply), applied to the simulated cluster's ClusterPolicy."""
    from doctor.sim_fixes import apply_to_cluster

    from gpuchain.kube import CLUSTER_POLICY

    sim = build(load_scenario("healthy"))
    sim.cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"mig": {"strategy": "sometimes"}}})
    before = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in before.findings if f.id == "policy.invalid")
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    assert found.action.changes == {"spec": {"mig": {"strategy": None}}}
    apply_to_cluster(sim.cluster, found.action)
    after = run_doctor(sim.cluster, reader=sim.read_log)
    assert "policy.invalid" not in after.ids and not after.broken


def test_a_missing_gpuchain_daemonset_is_never_recreated_by_hand() -> None:
    """operand.not-deployed on gpuchain: the DaemonSet is its operator's, so the fix restarts the operator
    (which reconciles on start) and never applies a copy of the DaemonSet (issue 24: a 3,000-character
    kubectl apply the operator then overwrites)."""
    from gpuchain.kube import DAEMONSET, POD, name_of

    sim = build(load_scenario("healthy"))
    sim.cluster.delete(DAEMONSET, name="nvidia-dcgm-exporter", namespace="gpu-operator")
    for pod in sim.cluster.list(POD, namespace="gpu-operator"):
        if name_of(pod).startswith("nvidia-dcgm-exporter-"):
            sim.cluster.delete(POD, name=name_of(pod), namespace="gpu-operator")
    alone = next(f for f in run_doctor(sim.cluster).findings if f.id == "operand.not-deployed")
    assert alone.action is None and "kubectl apply" not in alone.fix and "scale it to 1" in alone.fix
    _operator_running(sim.cluster, "gpuchain-operator-5c9f7d8b6-x2k4q")
    found = next(f for f in run_doctor(sim.cluster).findings if f.id == "operand.not-deployed")
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.fix.startswith("kubectl -n gpu-operator delete pod gpuchain-operator-5c9f7d8b6-x2k4q")
    assert len(found.fix) < 200


def test_a_missing_gpu_operator_daemonset_restarts_the_operator_which_is_not_simulated() -> None:
    """operand.not-deployed on NVIDIA's operator: restart its pod (it reconciles on start); the
    simulator runs no operator, so the fix says it cannot be applied there, and why."""
    from doctor.sim_fixes import UnsupportedFix

    from gpuchain.kube import DAEMONSET, POD, name_of

    sc = load_scenario("healthy-gpu-operator")
    sim = build(sc)
    _operator_running(sim.cluster, "gpu-operator-7d6d75f67c-jsrbx")
    sim.cluster.delete(DAEMONSET, name="gpu-feature-discovery", namespace="gpu-operator")
    for pod in sim.cluster.list(POD, namespace="gpu-operator"):
        if name_of(pod).startswith("gpu-feature-discovery-"):
            sim.cluster.delete(POD, name=name_of(pod), namespace="gpu-operator")
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == "operand.not-deployed")
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.fix.startswith("kubectl -n gpu-operator delete pod gpu-operator-7d6d75f67c-jsrbx")
    assert "no operator" in found.action.changes[NOT_SIMULATED]
    with pytest.raises(UnsupportedFix, match="no operator"):
        apply_fix(sc, found.action)


def test_an_operator_pod_the_scheduler_places_nowhere_is_named_with_the_label_that_places_it() -> None:
    """Issue 24: with the operator's pod Pending the doctor said the driver DaemonSet 'does not exist
    although the policy enables it' and offered to restart (or re-create) things the operator owns.
    It now names the pod, its phase and the scheduler's words, and labels a node the pod accepts."""
    sc = load_scenario("op-operator-pending")
    found = next(f for f in _diagnose(sc).findings if f.id == "operator.not-running")
    assert found.root and found.link == "driver"
    assert found.evidence[:2] == (
        "pod gpu-operator-7d6d75f67c-jsrbx: Pending",
        "scheduler: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    )
    assert "enterprise.discover.com/shared" in found.evidence[2]
    assert found.action is not None and (found.action.op, found.action.target) == (FixOp.LABEL_NODE, "cpu")
    assert found.action.changes == {"enterprise.discover.com/shared": "true"}
    assert "apply" not in found.fix and "delete" not in found.fix
    after = _diagnose(apply_fix(sc, found.action))
    assert not after.findings and after.gpu_nodes == 2


@pytest.mark.parametrize(
    ("taint", "said", "fix"),
    [
        (
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}.",
            "# let the operator's Deployment tolerate the taint dedicated=gpu:NoSchedule (the chart's "
            "operator.tolerations)",
        ),
        (None, "0/3 nodes are available: 3 Insufficient cpu.", "# give the operator's pod what the scheduler says"),
    ],
)
def test_an_operator_no_label_places_names_the_taint_or_the_resources(
    taint: dict[str, str] | None, said: str, fix: str
) -> None:
    """No node label lets the operator's pod schedule: the fix names the taint (the chart's
    tolerations) or the resources the scheduler reports, as a comment: no command of gpuchain's
    changes a Deployment its chart owns."""
    from gpuchain.kube import DAEMONSET, NODE, POD, name_of

    sim = build(load_scenario("healthy-gpu-operator"))
    for ds in sim.cluster.list(DAEMONSET, namespace="gpu-operator"):
        sim.cluster.delete(DAEMONSET, name=name_of(ds), namespace="gpu-operator")
    for pod in sim.cluster.list(POD, namespace="gpu-operator"):
        sim.cluster.delete(POD, name=name_of(pod), namespace="gpu-operator")
    if taint is not None:
        for node in sim.cluster.list(NODE):
            sim.cluster.patch(NODE, name=name_of(node), patch={"spec": {"taints": [taint]}})
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said}
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-operator-7d6d75f67c-jsrbx", "namespace": "gpu-operator"},
            "spec": {"containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v24.9.0"}]},
            "status": {"phase": "Pending", "conditions": [condition]},
        }
    )
    found = next(f for f in run_doctor(sim.cluster).findings if f.id == "operator.not-running")
    assert found.evidence[1] == f"scheduler: {said}" and found.action is None
    assert found.fix.startswith(fix) and pastes(found.fix)


def test_a_crashing_operator_is_named_with_its_waiting_reason() -> None:
    """The operator's pod is scheduled but crashes: its waiting reason and its last line."""
    from gpuchain.kube import DAEMONSET, POD, name_of

    sim = build(load_scenario("healthy-gpu-operator"))
    for ds in sim.cluster.list(DAEMONSET, namespace="gpu-operator"):
        sim.cluster.delete(DAEMONSET, name=name_of(ds), namespace="gpu-operator")
    for pod in sim.cluster.list(POD, namespace="gpu-operator"):
        sim.cluster.delete(POD, name=name_of(pod), namespace="gpu-operator")
    last = "failed to get API group resources: unable to retrieve the complete list of server APIs"
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-operator-7d6d75f67c-jsrbx", "namespace": "gpu-operator"},
            "spec": {"nodeName": "cpu-0", "containers": [{"name": "gpu-operator", "image": "gpu-operator"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "gpu-operator",
                        "ready": False,
                        "restartCount": 12,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
                        "lastState": {"terminated": {"exitCode": 1, "message": last}},
                    }
                ],
            },
        }
    )
    found = next(f for f in run_doctor(sim.cluster).findings if f.id == "operator.not-running")
    assert found.evidence[0] == "pod gpu-operator-7d6d75f67c-jsrbx: CrashLoopBackOff (gpu-operator, 12 restarts)"
    # No catalog entry knows the line: quoted as unrecognised, and the fix runs it again without
    # pretending to repair it (never "read the log").
    assert f"unrecognised: {last}" in found.evidence
    assert found.fix.startswith("kubectl -n gpu-operator delete pod gpu-operator-7d6d75f67c-jsrbx   # ")
    assert "logs" not in found.fix and pastes(found.fix) and found.action is None


def test_a_runtime_the_toolkit_cannot_configure_is_node_work() -> None:
    """node.runtime-unsupported: a containerRuntimeVersion scheme NVIDIA's operator does not recognise
    (controllers/state_manager.go getRuntimeString); a constructed scheme, no upstream report."""
    sc = parse_scenario(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: g, containerRuntime: 'frakti://1.0.0'}\n  - {name: ok}\n"
    )
    before = _diagnose(sc)
    found = next(f for f in before.findings if f.id == "node.runtime-unsupported")
    assert found.root and found.node == "g" and "frakti://1.0.0" in found.evidence[0]
    assert found.action is not None and found.action.outside_cluster
    after = _diagnose(apply_fix(sc, found.action))
    assert "node.runtime-unsupported" not in after.ids and not after.broken


def test_a_toolkit_socket_on_an_unknown_distribution_is_named_node_work_not_simulated() -> None:
    """The toolkit cannot reach containerd on a kubeadm-like node: the socket path is a fact of that
    host, so the fix names the work and says why the simulator cannot apply it."""
    from doctor.sim_fixes import UnsupportedFix

    from gpuchain.kube import NODE

    sc = load_scenario("op-toolkit-k3s-socket")
    sim = build(sc)
    for name in ("gpu-0", "gpu-1"):
        node = sim.cluster.get(NODE, name=name)
        info = {**node["status"]["nodeInfo"], "kubeletVersion": "v1.36.0"}
        sim.cluster.patch_status(NODE, name=name, status={"nodeInfo": info})
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == "toolkit.not-ready")
    assert found.action is not None and found.action.op is FixOp.NODE
    assert "CONTAINERD_SOCKET" in found.fix and found.action.changes[NOT_SIMULATED]
    with pytest.raises(UnsupportedFix):
        apply_fix(sc, found.action)


def test_the_toolkit_socket_fix_sets_the_distributions_paths_in_the_policy() -> None:
    """NVIDIA/gpu-operator#406: on RKE2 the toolkit needs CONTAINERD_CONFIG/SOCKET of RKE2's containerd."""
    found = next(f for f in _diagnose(load_scenario("op-toolkit-k3s-socket")).findings if f.id == "toolkit.not-ready")
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    env = {e["name"]: e["value"] for e in found.action.changes["spec"]["toolkit"]["env"]}
    assert env == {
        "CONTAINERD_CONFIG": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        "CONTAINERD_SOCKET": "/run/k3s/containerd/containerd.sock",
    }
    assert "kubectl patch clusterpolicies.nvidia.com cluster-policy" in found.fix
    assert any("unable to dial: dial unix /runtime/sock-dir/containerd.sock" in e for e in found.evidence)


def test_an_unknown_failure_has_no_invented_fix() -> None:
    """A log line gpuchain does not know: the finding says so and carries no action."""
    from gpuchain.doctor.snapshot import gather
    from gpuchain.doctor.structs import Snapshot

    sim = build(load_scenario("op-plugin-inotify"))
    snap = gather(sim.cluster)
    pods = []
    for pod in snap.pods:
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            term = (cs.get("lastState") or {}).get("terminated")
            if term and "FS watcher" in term.get("message", ""):
                term["message"] = "panic: something nobody has seen before"
        pods.append(pod)
    from gpuchain.doctor import diagnose

    report = diagnose(Snapshot(**{**snap.__dict__, "pods": pods}))
    found = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert found.action is None and "does not recognise" in found.cause


# -- failures read from pod state and the message catalog (issue 26), on a built cluster ---------


def _fail(
    sim: object, ds: str, node: str, *, init: str | None = None, main: str | None = None, **state: object
) -> None:
    """Give the DaemonSet ``ds``'s pod on ``node`` a failing init or main container, as the kubelet writes it."""
    from gpuchain.kube import POD

    cluster = sim.cluster  # type: ignore[attr-defined]
    pod = next(p for p in cluster.list(POD) if p["metadata"]["name"].startswith(ds) and p["spec"]["nodeName"] == node)
    status = pod["status"]
    key, name = ("initContainerStatuses", init) if init else ("containerStatuses", main)
    entries = status.setdefault(key, [])
    entry = next((e for e in entries if e["name"] == name), None) or entries[0]
    entry.update(ready=False, restartCount=7, state={"waiting": {"reason": "CrashLoopBackOff"}}, **state)
    if init:  # the init containers after it have not run, nor has the main container
        later = entries[entries.index(entry) + 1 :]
        for e in later:
            e.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
        for e in status.get("containerStatuses") or []:
            e.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
    status["phase"] = "Pending" if init else "Running"
    status["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster.patch_status(POD, name=pod["metadata"]["name"], status=status, namespace=pod["metadata"]["namespace"])


def _failing(ds: str, node: str, **how: Any) -> Callable[[SimCluster], None]:
    """`_fail` as an edit of `diagnosed`'s small cluster."""
    return lambda sim: _fail(sim, ds, node, **how)


def _start_error(message: str) -> dict[str, Any]:
    """A container's last state when the runtime could not start it: containerd's CRI ends such a task
    terminated StartError, exit 128, with the runtime's words (internal/cri/server/container_start.go@v2.0.5)."""
    return {"terminated": {"reason": "StartError", "exitCode": 128, "message": message}}


def test_a_failing_toolkit_validation_is_the_toolkit_not_the_plugin_waiting_behind_it() -> None:
    """NVIDIA/gpu-operator#1518's shape: toolkit-validation ends in StartError (the runtime hook exits 1)."""
    hook = "failed to create shim task: OCI runtime create failed: error running prestart hook #0: exit status 1"
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _failing(
            "nvidia-operator-validator",
            "b",
            init="toolkit-validation",
            lastState=_start_error(hook),
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("toolkit.validation-failed", "toolkit", "b")
    assert "StartError" in found.evidence[0] and hook in found.evidence[1]
    assert found.action is not None and found.action.op is FixOp.NODE and NOT_SIMULATED in found.action.changes
    assert "toolkit" in found.fix and "delete pod" in found.fix
    assert [f.node for f in report.findings if f.severity is Severity.ERROR] == ["b"]


def test_a_failing_cuda_validation_past_a_passed_toolkit_validation_is_the_driver_not_the_toolkit() -> None:
    """The validator's cuda-validation runs after toolkit-validation has run nvidia-smi in a container the toolkit
    set up (assets/state-operator-validation/0500_daemonset.yaml: driver, toolkit, cuda, plugin, in that order), so
    its CUDA sample failing, in words no catalog entry knows, is past the toolkit: the driver's side of CUDA."""
    unknown = {"terminated": {"reason": "Error", "exitCode": 1, "message": "vectorAdd: an error nobody has seen yet"}}
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _failing("nvidia-operator-validator", "b", init="cuda-validation", lastState=unknown),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("driver.validation-failed", "driver", "b")
    assert "cuda-validation" in found.evidence[0]
    assert "Fabric Manager" in found.fix and "kernel packages" not in found.fix and "delete pod" in found.fix
    assert [f.node for f in report.findings if f.severity is Severity.ERROR] == ["b"]


def test_an_operand_the_runtime_hook_refuses_to_start_is_the_toolkit_not_the_operand() -> None:
    """The plugin's own container, refused by the NVIDIA runtime hook: containerd's CRI ends a task the OCI
    runtime could not create in terminated StartError, exit 128, with runc's words (containerd
    internal/cri/server/container_start.go@v2.0.5), and the kubelet shows it as CrashLoopBackOff with that
    last state. The plugin never ran; the toolkit is the root and the fix acts on the toolkit."""
    hook = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: error running prestart hook #0: "
        "exit status 1, stdout: , stderr: : unknown"
    )
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _failing(
            "nvidia-device-plugin-daemonset",
            "b",
            main="nvidia-device-plugin",
            lastState=_start_error(hook),
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("toolkit.hook-failed", "toolkit", "b")
    assert "CrashLoopBackOff (last: StartError)" in found.evidence[0] and hook in found.evidence[1]
    assert "catalog: runc.prestart-hook-failed" in found.evidence[2]
    assert found.action is not None and found.action.op is FixOp.NODE and NOT_SIMULATED in found.action.changes
    assert "nvidia-container-toolkit-daemonset" in found.fix and "restart containerd" in found.fix
    assert not [f for f in report.findings if f.id == "device-plugin.not-ready"]
    assert [f.node for f in report.findings if f.severity is Severity.ERROR] == ["b"]


def test_a_hook_refusal_on_a_cri_o_node_names_cri_os_hooks_dir_and_service_not_containerd() -> None:
    """The same refusal on a node whose kubelet reports cri-o://: CRI-O runs the toolkit's OCI hook only from
    a directory of its hooks_dir (the toolkit's CRI-O hook mode writes oci-nvidia-hook.json to
    /usr/share/containers/oci/hooks.d, NVIDIA/nvidia-container-toolkit's CRIO_HOOKS_DIR default), and CRI-O
    restarts as crio: a fix that restarts containerd repairs nothing there."""
    hook = (
        "OCI runtime create failed: runc create failed: unable to start container process: error during container "
        "init: error running prestart hook #0: exit status 1, stdout: , stderr: : unknown"
    )
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b, containerRuntime: cri-o://1.30.4}\n",
        _failing(
            "nvidia-device-plugin-daemonset",
            "b",
            main="nvidia-device-plugin",
            lastState=_start_error(hook),
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("toolkit.hook-failed", "toolkit", "b")
    assert "containerd" not in found.fix
    assert "systemctl restart crio" in found.fix and "hooks_dir" in found.fix
    assert "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json" in found.fix
    assert "nvidia-container-toolkit-daemonset" in found.fix


def test_a_toolkit_validation_that_says_only_not_ready_on_a_cri_o_node_sets_cri_o_up_not_containerd() -> None:
    """The operator validator's toolkit-validation says "toolkit is not ready" and why nvidia-smi did not run
    (NVIDIA/gpu-operator validator/main.go@v25.3.0: the line, and "error validating toolkit installation: %w"),
    neither of which names the runtime: on a node whose kubelet reports cri-o:// the repair is CRI-O's (its
    runtime drop-in or hooks_dir, restarted as crio), never containerd's config and service."""
    log = (
        "toolkit is not ready\n"
        'time="2026-12-01T10:00:00Z" level=info msg="Error: error validating toolkit installation: exec: '
        '\\"nvidia-smi\\": executable file not found in $PATH"\n'
    )
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b, containerRuntime: cri-o://1.30.4}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "b",
            "init": [
                {"name": "driver-validation", "state": {"terminated": "Completed", "exitCode": 0}, "ready": True},
                {
                    "name": "toolkit-validation",
                    "restarts": 6,
                    "state": {"waiting": "CrashLoopBackOff"},
                    "last": {"terminated": "Error", "exitCode": 1},
                },
            ],
            "logs": {"toolkit-validation": log},
        },
        no_gpus("b"),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("toolkit.validation-failed", "toolkit", "b")
    assert "catalog: gpu-operator.validator-toolkit-not-ready" in found.evidence[-1]
    assert "containerd" not in found.fix
    assert "systemctl restart crio" in found.fix and "hooks_dir" in found.fix


def test_a_plugin_without_nvml_on_a_cri_o_node_makes_nvidia_cri_os_default_runtime() -> None:
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 4, "state": {"waiting": "CrashLoopBackOff"}}
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        "  - {name: h, hostDriver: 550.54.15, containerRuntime: cri-o://1.30.4}\n",
        {"do": "node", "node": "h", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "h",
            "containers": [{**crash, "last": {"terminated": "Error"}}],
            "logs": {
                "nvidia-device-plugin-ctr": "E0101 00:00:00.000000 1 main.go:1] error starting plugins: "
                "failed to construct NVML resource managers\n"
            },
        },
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("toolkit.runtime-not-default", "toolkit")
    assert "nvidia-ctk runtime configure --runtime=crio --set-as-default" in root.fix
    assert "systemctl restart crio" in root.fix and "containerd" not in root.fix + root.cause


def _waits_in(ds: str, node: str, inits: dict[str, str]) -> Callable[[SimCluster], None]:
    """The pod of ``ds`` on ``node`` in its init phase as the kubelet writes it (kubernetes
    pkg/kubelet/kubelet_pods.go@v1.34.4 convertToAPIContainerStatuses): phase Pending, each init container
    ``done`` (terminated, exit 0, Completed), ``running`` (the loop that waits for the ready file) or
    ``PodInitializing`` (waiting, not started), the main containers waiting in PodInitializing."""

    def edit(sim: SimCluster) -> None:
        pod = next(
            p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith(ds) and p["spec"]["nodeName"] == node
        )
        shapes: dict[str, dict[str, Any]] = {
            "done": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            "running": {"running": {"startedAt": "2026-06-05T18:00:00Z"}},
            "PodInitializing": {"waiting": {"reason": "PodInitializing"}},
        }
        status = pod["status"]
        status["phase"] = "Pending"
        status["initContainerStatuses"] = [
            {"name": n, "ready": how == "done", "restartCount": 0, "state": shapes[how]} for n, how in inits.items()
        ]
        for cs in status.get("containerStatuses") or []:
            cs.update(ready=False, started=False, state=shapes["PodInitializing"])
        sim.cluster.patch_status(
            POD, name=pod["metadata"]["name"], status=status, namespace=pod["metadata"]["namespace"]
        )

    return edit


#: The operands that wait for the toolkit's ready file (gpu-operator assets: their toolkit-validation init
#: container loops until /run/nvidia/validations/toolkit-ready exists).
GATED = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter")


def test_operands_waiting_behind_a_validation_the_validator_never_completes_name_that_link() -> None:
    """The validator is at driver-validation (its loop Running) while the driver pod runs: the plugin, GFD and
    exporter wait in toolkit-validation for a file only the validator writes, so none of them is the root."""
    validator = {
        "driver-validation": "running",
        "toolkit-validation": "PodInitializing",
        "cuda-validation": "PodInitializing",
        "plugin-validation": "PodInitializing",
    }
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _waits_in("nvidia-operator-validator", "b", validator),
        *(_waits_in(ds, "b", {"toolkit-validation": "running"}) for ds in GATED),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("driver.not-validated", "driver", "b")
    assert found.evidence[0].endswith("Init:0/4, at driver-validation")
    assert sum("waiting in toolkit-validation" in e for e in found.evidence) == len(GATED)
    assert found.action is not None and found.action.op is FixOp.DELETE and NOT_SIMULATED in found.action.changes
    assert "delete pod nvidia-operator-validator-" in found.fix
    assert [f.node for f in report.findings if f.severity is Severity.ERROR] == ["b"]
    assert not {"device-plugin.not-ready", "gfd.not-ready", "exporter.not-ready"} & set(report.ids)
    # One validation further (the driver proven, toolkit-validation running): the toolkit link.
    validator |= {"driver-validation": "done", "toolkit-validation": "running"}
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        _waits_in("nvidia-operator-validator", "a", validator),
        *(_waits_in(ds, "a", {"toolkit-validation": "running"}) for ds in GATED),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("toolkit.not-validated", "toolkit")


def _no_validator(sim: SimCluster) -> None:
    pod = next(p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("nvidia-operator-validator"))
    sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])


def test_operands_waiting_for_a_validator_kept_off_the_node_get_the_validator_placed() -> None:
    """No validator pod on the node writes the ready file: what keeps it off is the root, with its fix."""
    waits = [_waits_in(ds, "a", {"toolkit-validation": "running"}) for ds in GATED]

    def opted(sim: SimCluster) -> None:
        sim.cluster.patch(
            NODE, name="a", patch={"metadata": {"labels": {"nvidia.com/gpu.deploy.operator-validator": "false"}}}
        )

    report = diagnosed("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n", _no_validator, opted, *waits)
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("toolkit.not-validated", "toolkit")
    assert found.action is not None and found.action.op is FixOp.LABEL_NODE
    assert found.action.changes == {"nvidia.com/gpu.deploy.operator-validator": None}
    # A taint the validator does not tolerate (the others do, by their own tolerations): the toleration.
    taint = {"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}

    def tainted(sim: SimCluster) -> None:
        sim.cluster.patch(NODE, name="a", patch={"spec": {"taints": [taint]}})

    report = diagnosed("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n", _no_validator, tainted, *waits)
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("operand.not-scheduled", "toolkit")
    assert any("waiting in toolkit-validation" in e for e in found.evidence)
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    assert "example.com/dedicated" in json.dumps(found.action.changes)


def test_the_toolkits_own_driver_validation_does_not_wait_on_the_validator_pod() -> None:
    """The toolkit's driver-validation runs the validation itself (gpu-operator
    assets/state-container-toolkit/0500_daemonset.yaml: nvidia-validator, COMPONENT=driver, WITH_WAIT=true), so
    with it alone waiting, the validator's absence is not what it waits on."""

    def opted(sim: SimCluster) -> None:
        sim.cluster.patch(
            NODE, name="a", patch={"metadata": {"labels": {"nvidia.com/gpu.deploy.operator-validator": "false"}}}
        )

    waits = _waits_in("nvidia-container-toolkit-daemonset", "a", {"driver-validation": "running"})
    report = diagnosed("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n", _no_validator, opted, waits)
    assert not {"driver.not-validated", "toolkit.not-validated"} & set(report.ids)
    assert not any(f.root and "operator-validator" in f.fix for f in report.findings)


def test_operands_waiting_for_a_validator_the_scheduler_cannot_place_get_room_made_for_it() -> None:
    """The validator's DaemonSet pod is Pending on its node (the pod as the scheduler leaves it: no nodeName, the
    DaemonSet's matchFields affinity for the node, PodScheduled=False Unschedulable with kube-scheduler's
    message, the shape NVIDIA/gpu-operator issues quote from kubectl describe): the room it needs is the fix."""
    said = (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod."
    )

    waits = [_waits_in(ds, "a", {"toolkit-validation": "running"}) for ds in GATED]
    pending = unschedulable("nvidia-operator-validator", "a", said)
    report = diagnosed("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n", pending, *waits)
    (found,) = [f for f in report.findings if f.root]
    assert (found.id, found.link, found.node) == ("toolkit.not-validated", "toolkit", "a")
    assert f"scheduler: {said}" in found.evidence
    assert sum("waiting in toolkit-validation" in e for e in found.evidence) == len(GATED)
    assert "cpu" in found.fix and "restart" not in found.fix


def test_a_daemonset_whose_pods_the_api_refuses_gets_the_namespace_it_may_create_them_in() -> None:
    """The plugin's DaemonSet selects and tolerates the node but has no pod there: the DaemonSet controller's
    Warning Event (kubernetes pkg/controller/daemon, reason FailedCreate, "Error creating: %v") quotes Pod Security
    admission's refusal (pod-security-admission admission.go: "violates PodSecurity %q: %s"). The namespace's
    enforce level is the repair, never a restart of a DaemonSet whose every pod is refused."""
    refused = (
        'Error creating: pods "nvidia-device-plugin-daemonset-x7k2p" is forbidden: violates PodSecurity '
        '"baseline:latest": privileged (container "nvidia-device-plugin" must not set securityContext.privileged=true)'
    )

    def no_pod(sim: SimCluster) -> None:
        pod = next(
            p
            for p in sim.cluster.list(POD)
            if p["metadata"]["name"].startswith("nvidia-device-plugin") and p["spec"]["nodeName"] == "b"
        )
        sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
        gone = {"nvidia.com/gpu": None}
        sim.cluster.patch_status(NODE, name="b", status={"capacity": gone, "allocatable": gone})
        ds = {"kind": "DaemonSet", "name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "nvidia-device-plugin-daemonset.1", "namespace": "gpu-operator"},
            "involvedObject": ds,
            "type": "Warning",
            "reason": "FailedCreate",
            "message": refused,
            "source": {"component": "daemonset-controller"},
        }
        sim.cluster.create(event)

    report = diagnosed("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n", no_pod)
    (found,) = [f for f in report.findings if f.root]
    assert (found.id, found.link, found.node) == ("operand.not-created", "device-plugin", "b")
    assert f"event FailedCreate (daemonset-controller): {refused}" in found.evidence
    assert found.action is not None and found.action.op is FixOp.LABEL_NAMESPACE
    assert found.fix.startswith(
        "kubectl label namespace gpu-operator pod-security.kubernetes.io/enforce=privileged --overwrite"
    )
    assert "restart" not in found.fix and NOT_SIMULATED in found.action.changes


def test_a_driver_library_version_mismatch_anywhere_is_the_driver_and_wants_a_reboot() -> None:
    """NVIDIA/k8s-device-plugin#1431: the plugin's runtime hook prints NVML's version mismatch; the node's
    loaded module is older than its libraries, which only a reboot (or a module reload) repairs."""
    line = "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown"
    report = diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: a, hostDriver: 570.195.03}\n",
        _failing(
            "nvidia-device-plugin",
            "a",
            main="nvidia-device-plugin-ctr",
            lastState=_start_error("exit status 1\n" + line),
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("driver.version-mismatch", "driver")
    assert f"says: {line}" in found.evidence and any(e.startswith("catalog: ") for e in found.evidence)
    assert found.action is not None and found.action.op is FixOp.NODE and "reboot" in found.action.changes["action"]
    assert NOT_SIMULATED in found.action.changes


def test_no_nvml_on_a_managed_node_image_is_the_image_not_the_toolkit() -> None:
    """awslabs/amazon-eks-ami#1817: a standard AL2023 AMI under a GPU node group; the plugin exits with
    'Incompatible platform detected'. The fix is the accelerated AMI, never 'configure the toolkit'."""
    report = diagnosed(
        "name: x\nstack: eks\nnodes:\n  - {name: a}\n",
        _failing(
            "nvidia-device-plugin",
            "a",
            main="nvidia-device-plugin-ctr",
            lastState={
                "terminated": {
                    "reason": "Error",
                    "exitCode": 1,
                    "message": "I0519 factory.go:104] Detected non-NVML platform: could not load NVML library: "
                    "libnvidia-ml.so.1: cannot open shared object file\nE0519 factory.go:112] Incompatible platform "
                    "detected",
                }
            },
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("driver.not-on-node-image", "driver")
    assert found.action is not None and "accelerated AMI" in found.action.changes["action"]
    # The standalone chart on the user's own hosts has no node image to blame: not this finding.
    report = diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: a, hostDriver: 550.54.15}\n",
        _failing(
            "nvidia-device-plugin",
            "a",
            main="nvidia-device-plugin-ctr",
            lastState={"terminated": {"reason": "Error", "exitCode": 1, "message": "Incompatible platform detected"}},
        ),
    )
    assert "driver.not-on-node-image" not in report.ids


def test_gpu_pods_the_runtime_hook_refuses_to_start_are_the_toolkit_and_node_work() -> None:
    """NVIDIA/libnvidia-container src/cli/configure.c: the hook's 'mount error: ...' ends every GPU
    container in StartError while the chain's operands run. The toolkit link is the root, on the node the
    pods run on, and on a stack whose node image carries the hook the repair is another image release."""
    sim = build(
        parse_scenario(
            "name: x\nstack: eks\nnodes:\n  - {name: a}\n  - {name: b}\nworkloads:\n  - {name: job, gpus: 1, node: b}\n"
        )
    )
    pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith("job"))
    refused = (
        "OCI runtime create failed: runc create failed: error running hook #0: error running hook: exit status 1, "
        "stdout: , stderr: nvidia-container-cli: mount error: file creation failed: /rootfs/usr/bin/nvidia-smi: "
        "file exists: unknown"
    )
    status = copy.deepcopy(pod["status"])
    status["containerStatuses"][0].update(
        ready=False,
        restartCount=3,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState=_start_error(refused),
    )
    sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))
    roots = [f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("workload.runtime-hook-failed", "toolkit", "b")]
    (found,) = roots
    assert found.action is not None and found.action.op is FixOp.NODE
    assert NOT_SIMULATED in found.action.changes and "accelerated AMI" in found.action.changes["action"]
    assert any("libnvidia-container.mount-error" in e for e in found.evidence)


def test_a_plugin_failing_on_a_node_without_gpus_gets_an_affinity_for_the_gpu_nodes() -> None:
    """awslabs/amazon-eks-ami#1470 shape: a plugin DaemonSet with no node selector lands on a node with no
    NVIDIA GPU and fails there; nodes without GPUs are not walked, so the finding comes from the pod itself,
    and the repair is the DaemonSet's placement (the GPU nodes' label), never the node."""
    sim = build(parse_scenario("name: x\nstack: gpu-operator\nnodes:\n  - {name: g}\n  - {name: c, gpu: false}\n"))
    ds = sim.cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="gpu-operator")
    pod = copy.deepcopy(
        next(p for p in sim.cluster.list(POD) if name_of(p).startswith("nvidia-device-plugin-daemonset"))
    )
    pod["metadata"] = {
        "name": "nvidia-device-plugin-daemonset-zz9",
        "namespace": "gpu-operator",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name_of(ds), "controller": True}],
    }
    pod["spec"]["nodeName"] = "c"
    pod["status"]["containerStatuses"][0].update(
        ready=False,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={
            "terminated": {
                "reason": "StartError",
                "exitCode": 128,
                "message": "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
            }
        },
    )
    sim.cluster.create(pod)
    found = [f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == "device-plugin.off-gpu-node"]
    assert [(f.node, f.root, f.severity) for f in found] == [("c", True, Severity.ERROR)]
    action = found[0].action
    assert action is not None and action.op is FixOp.PATCH_DAEMONSET
    assert action.target == "gpu-operator/nvidia-device-plugin-daemonset"
    term = action.changes["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term["operator"] == "Exists" and term["key"] not in sim.cluster.get(NODE, name="c")["metadata"]["labels"]


def _failing_cuda_validation(host_driver: str, log: str) -> SimCluster:
    """Node ``a`` on its host's driver, with the pod the validator starts itself (no DaemonSet owns it) whose
    cuda-validation init container crash-loops printing ``log``."""
    sim = build(
        parse_scenario(
            "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
            f"nodes:\n  - {{name: a, hostDriver: {host_driver}}}\n"
        )
    )
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "nvidia-cuda-validator-x1", "namespace": "gpu-operator"},
            "spec": {
                "nodeName": "a",
                "initContainers": [{"name": "cuda-validation", "image": "validator"}],
                "containers": [{"name": "nvidia-cuda-validator", "image": "validator"}],
            },
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [
                    {
                        "name": "cuda-validation",
                        "ready": False,
                        "restartCount": 6,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                    }
                ],
            },
        }
    )
    sim.cluster.set_logs("nvidia-cuda-validator-x1", namespace="gpu-operator", container="cuda-validation", text=log)
    return sim


def test_a_cuda_validation_pod_refused_for_forward_compatibility_names_the_driver_too_old() -> None:
    """The validator starts nvidia-cuda-validator itself (no DaemonSet owns it); its vectorAdd prints CUDA's
    error 804 over a host driver older than its CUDA. The driver is the root, not the toolkit its init
    container's name stands for, and the repair is a newer driver on the host."""
    sim = _failing_cuda_validation(
        "450.80.02",
        "Failed to allocate device vector A (error code forward compatibility was attempted on non supported HW)!\n",
    )
    roots = [f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("driver.too-old", "driver", "a")]
    action = roots[0].action
    assert action is not None and action.op is FixOp.NODE and NOT_SIMULATED in action.changes
    assert "upgrade the host's NVIDIA driver" in action.changes["action"]


def test_a_driver_that_cannot_unload_under_gpu_pods_is_drained_not_turned_off() -> None:
    """NVIDIA/gpu-operator#2166: the driver pod restarts while GPU pods run; 'driver is in use' then means
    drain the node, not 'a host driver conflicts' (which would turn the driver container off)."""
    sc = parse_scenario(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\nworkloads:\n  - {name: train, gpus: 8, node: a}\n"
    )
    sim = build(sc)
    _fail(
        sim,
        "nvidia-driver-daemonset",
        "a",
        main="nvidia-driver-ctr",
        lastState={
            "terminated": {
                "reason": "Error",
                "exitCode": 1,
                "message": "Unloading NVIDIA driver kernel modules...\n"
                "Could not unload NVIDIA driver kernel modules, driver is in use",
            }
        },
    )
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.root)
    assert (found.id, found.link) == ("driver.in-use", "driver")
    assert found.evidence[-1] == "GPU pods on a: train" and "kubectl drain a" in found.fix
    assert found.action is not None and found.action.op is FixOp.NODE and NOT_SIMULATED in found.action.changes


#: The kubelet's FailedCreatePodSandBox Event (kuberuntime_manager.go "Failed to create pod sandbox: %v") with
#: containerd's CNI error around containernetworking/cni pkg/invoke/find.go's "failed to find plugin %q in path %s".
NO_CNI_PLUGIN = (
    'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "9f2c": '
    'plugin type="calico" failed (add): failed to find plugin "calico" in path [/opt/cni/bin]'
)


def _no_sandbox(node: str, *daemonsets: str) -> list[dict[str, Any]]:
    """Edits: each DaemonSet's pod on ``node`` waiting in ContainerCreating with the kubelet's Event."""
    creating = {"waiting": "ContainerCreating"}
    return [
        {
            "do": "pod",
            "daemonset": ds,
            "node": node,
            "containers": [{"name": c, "state": creating}],
            "events": [{"reason": "FailedCreatePodSandBox", "message": NO_CNI_PLUGIN, "count": 40}],
        }
        for ds, c in daemonsets
    ]


def test_operands_without_a_sandbox_after_the_toolkit_rewrote_containerd_are_the_runtime_config() -> None:
    """Every operand but the toolkit (which started before its rewrite) waits for a sandbox: the Event says
    why; the root is the runtime's config the toolkit wrote, not an operand that 'left no log line'."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        *_no_sandbox(
            "b",
            ("nvidia-device-plugin-daemonset", "nvidia-device-plugin"),
            ("gpu-feature-discovery", "gpu-feature-discovery"),
            ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter"),
        ),
    )
    (root,) = [f for f in report.findings if f.root]
    assert (root.id, root.link, root.node) == ("node.sandbox-failed", "toolkit", "b")
    assert any('failed to find plugin "calico" in path [/opt/cni/bin]' in e for e in root.evidence)
    assert "catalog: cni.plugin-not-found (containernetworking/cni pkg/invoke/find.go@" in " ".join(root.evidence)
    assert "bin_dir" in root.fix and "RUNTIME_DROP_IN_CONFIG" in root.fix and "no log line" not in root.cause
    assert root.action is not None and root.action.op is FixOp.NODE and NOT_SIMULATED in root.action.changes


def without_sys_admin(**labels: str) -> Report:
    """The report on a standalone plugin whose DaemonSet (with ``labels`` added) runs the volume-mounts device list
    strategy in a container stripped of every capability, crash-looping on NVML (internal/plugin/manager/
    factory.go@v0.16.2)."""
    from gpuchain.kube import DAEMONSET

    def locked_down(sim: SimCluster) -> None:
        ds = sim.cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="kube-system")
        container = copy.deepcopy(ds["spec"]["template"]["spec"]["containers"][0])
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        container["env"] = [*(container.get("env") or []), {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
        patch = {"metadata": {"labels": labels}, "spec": {"template": {"spec": {"containers": [container]}}}}
        sim.cluster.patch(DAEMONSET, name="nvidia-device-plugin-daemonset", patch=patch, namespace="kube-system")
        for pod in sim.cluster.list(POD, namespace="kube-system"):
            if pod["metadata"]["name"].startswith("nvidia-device-plugin-daemonset"):
                sim.cluster.patch(
                    POD,
                    name=pod["metadata"]["name"],
                    patch={"spec": {"containers": [container]}},
                    namespace="kube-system",
                )

    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 4, "state": {"waiting": "CrashLoopBackOff"}}
    log = (
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: error creating plugin manager: "
        "unable to create plugin manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND\n"
    )
    return diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        locked_down,
        no_gpus("h"),
        plugin_pod("h", crash, log),
    )


def test_a_plugin_whose_settings_need_sys_admin_and_run_without_it_gets_the_capability() -> None:
    """NVIDIA's chart adds SYS_ADMIN for volume-mounts or a MIG strategy (deployments/helm/nvidia-device-plugin
    _helpers.tpl@v0.16.2 requiresCapSysAdmin); values that override the securityContext drop it, and the plugin
    exits on NVML (internal/plugin/manager/factory.go@v0.16.2): its own DaemonSet, not the node's runtime."""
    (root,) = [f for f in without_sys_admin().findings if f.root]
    assert (root.id, root.link) == ("device-plugin.privileges-missing", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    grant = root.action.changes["spec"]["template"]["spec"]["containers"][0]
    assert grant["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}


def test_a_plugin_whose_nvml_fails_with_unknown_error_at_every_start_is_the_low_level_runtime() -> None:
    """The plugin's 'Failed to initialize NVML: Unknown Error.' (NVIDIA/k8s-device-plugin internal/plugin/
    factory.go@v0.17.1) on every restart, host driver fine: the runtime under the NVIDIA runtime does not grant
    the devices, so the fix is that runtime's setting, never 'delete the plugin pod, it registers anew'."""
    crash = {
        "name": "nvidia-device-plugin-ctr",
        "restarts": 9,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    log = (
        "I0101 00:00:00.000000 1 main.go:1] Retrieving plugins.\n"
        "E0101 00:00:00.000000 1 factory.go:1] Failed to initialize NVML: Unknown Error.\n"
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: nvml init failed: Unknown Error\n"
    )
    report = diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        no_gpus("h"),
        plugin_pod("h", crash, log),
    )
    (root,) = [f for f in report.findings if f.root]
    assert (root.id, root.link, root.node) == ("toolkit.devices-denied", "toolkit", "h")
    assert "catalog: k8s-device-plugin.nvml-unknown-error" in " ".join(root.evidence)
    assert 'runtimes = ["runc"]' in root.fix and "delete pod" not in root.fix.split("#")[0]
    assert root.action is not None and root.action.op is FixOp.NODE and NOT_SIMULATED in root.action.changes


def _unload_refused(lsmod: str, **how: Any) -> Report:
    """A driver pod on an operator node with no GPU pod whose entrypoint printed ``lsmod`` and then
    "driver is in use" (NVIDIA/gpu-driver-container ubuntu22.04/nvidia-driver@25.01.21, ``_unload_driver``)."""
    sim = build(parse_scenario("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n"))
    message = (
        "Unloading NVIDIA driver kernel modules...\n"
        + lsmod
        + "Could not unload NVIDIA driver kernel modules, driver is in use"
    )
    _fail(
        sim,
        "nvidia-driver-daemonset",
        "b",
        main="nvidia-driver-ctr",
        lastState={"terminated": {"reason": "Error", "exitCode": 1, "message": message}},
        **how,
    )
    return run_doctor(sim.cluster, reader=sim.read_log)


def test_a_driver_that_cannot_unload_because_gdrdrv_holds_the_module_restarts_its_pod_not_turned_off() -> None:
    """gdrdrv (GPUDirect copy, loaded by the driver pod's gdrcopy sidecar) uses ``nvidia`` and the entrypoint does
    not unload it: the repair frees it with the whole driver pod, never 'a host driver' (deploy.driver=false)."""
    lsmod = (
        "nvidia_uvm           1794048  0\n"
        "gdrdrv                 24576  0\n"
        "nvidia              56807424  3 gdrdrv,nvidia_uvm,nvidia_modeset\n"
    )
    (found,) = [f for f in _unload_refused(lsmod).findings if f.root]
    assert (found.id, found.link, found.node) == ("driver.module-held", "driver", "b")
    assert "lsmod: nvidia              56807424  3 gdrdrv,nvidia_uvm,nvidia_modeset" in found.evidence
    assert found.action is not None and found.action.op is FixOp.DELETE and found.action.changes["kind"] == "Pod"
    assert (
        found.fix.startswith("kubectl -n gpu-operator delete pod nvidia-driver-daemonset-")
        and "rmmod gdrdrv" in found.fix
    )
    assert "deploy.driver=false" not in found.fix


def test_a_driver_that_cannot_unload_with_nothing_of_the_operators_holding_it_is_the_host_driver() -> None:
    """No GPU pod, no GPUDirect module, no sidecar: the module is the host's own driver."""
    lsmod = "nvidia_drm             77824  4\nnvidia              56807424  90 nvidia_modeset\n"
    (found,) = [f for f in _unload_refused(lsmod).findings if f.root]
    assert found.id == "driver.host-driver-conflict" and "nvidia.com/gpu.deploy.driver=false" in found.fix


def test_a_daemonset_pod_pending_on_an_untolerated_taint_gets_the_toleration_to_add() -> None:
    """Issue 26 (fixes that act): the scheduler names the taint; the fix is that toleration in the
    policy's daemonsets.tolerations, rendered as the patch, never 'add a toleration' in words."""
    from gpuchain.kube import NODE, POD

    sim = build(load_scenario("healthy-gpu-operator"))
    node = "gpu-0"
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": [taint]}})
    pod = next(
        p
        for p in sim.cluster.list(POD, namespace="gpu-operator")
        if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset") and p["spec"].get("nodeName") == node
    )
    said = "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said}
    pending = {"phase": "Pending", "conditions": [condition], "containerStatuses": [], "initContainerStatuses": []}
    sim.cluster.patch_status(POD, name=pod["metadata"]["name"], status=pending, namespace="gpu-operator")
    gone = {"nvidia.com/gpu": None}  # no plugin has run here, so the node announces no GPU
    sim.cluster.patch_status(NODE, name=node, status={"capacity": gone, "allocatable": gone})
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.node == node and f.root)
    assert found.id == "device-plugin.not-ready" and f"scheduler: {said}" in found.evidence
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    tolerations = found.action.changes["spec"]["daemonsets"]["tolerations"]
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert found.fix.startswith("kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge") and pastes(
        found.fix
    )


def crio_without_nvidia(sim: SimCluster) -> Report:
    """The doctor's report on ``sim`` with its sandbox Events' containerd "no runtime for nvidia" in CRI-O's words
    (cri-o internal/oci/oci.go), as a node whose runtime is CRI-O shows it."""
    from gpuchain.doctor import diagnose
    from gpuchain.doctor.snapshot import gather
    from gpuchain.doctor.structs import Snapshot

    snap = gather(sim.cluster)
    crio = (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime handler nvidia "
        "from runtime list map[crun:0xc000 runc:0xc001]"
    )
    events = [{**e, "message": crio} if 'no runtime for "nvidia"' in str(e.get("message")) else e for e in snap.events]
    return diagnose(Snapshot(**{**snap.__dict__, "events": events}))


def test_a_cri_o_node_without_the_nvidia_handler_gets_cri_os_repair() -> None:
    """The sandbox Events carry CRI-O's words (cri-o internal/oci/oci.go), not containerd's: the finding
    names CRI-O, cites its catalog entry, and the repair configures CRI-O, not containerd."""
    found = next(
        f
        for f in crio_without_nvidia(build(load_scenario("op-runtime-not-configured"))).findings
        if f.id == "toolkit.runtime-not-configured"
    )
    assert found.cause.startswith("CRI-O on this node has no 'nvidia' runtime handler")
    assert any(e.startswith("catalog: cri-o.runtime-handler-not-found") for e in found.evidence)
    assert found.action is not None and "--runtime=crio" in found.action.changes["action"]
    assert "systemctl restart crio" in found.fix and "containerd" not in found.fix


# NVIDIADriver conditions.
# NVIDIADriver conditions: the GPU Operator's driver CRD says why it deployed no driver.
#
# The controller (NVIDIA/gpu-operator ``controllers/nvidiadriver_controller.go@v25.10.1``) stops a
# reconcile on an error and records it as two conditions (``internal/conditions/nvidiadriver.go``):
# ``Ready=False`` (reason ``Error``) and ``Error=True`` with the reason and message. Two NVIDIADrivers
# whose node selectors share a node both stop with reason ``ConflictingNodeSelector`` and the message
# of ``internal/validator/validator.go``: "conflicting NVIDIADriver NodeSelectors found for resource:
# %s, nodeSelector: %q". No driver DaemonSet is made for either, so nothing above the driver starts.
NVIDIADRIVER_SAMPLE = Path(__file__).parent / "fixtures" / "gpu-operator-nvidia_v1alpha1_nvidiadriver.yaml"


def _driver(name: str, created: str, node_selector: dict[str, str] | None, error: tuple[str, str] | None) -> Any:
    obj = copy.deepcopy(yaml.safe_load(NVIDIADRIVER_SAMPLE.read_text()))
    obj["metadata"] = {"name": name, "creationTimestamp": created}
    if node_selector is None:
        obj["spec"].pop("nodeSelector", None)
    else:
        obj["spec"]["nodeSelector"] = node_selector
    if error is not None:
        reason, message = error
        obj["status"] = {
            "state": "notReady",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Error", "message": ""},
                {"type": "Error", "status": "True", "reason": reason, "message": message},
            ],
        }
    return obj


def _without_driver_daemonset() -> Any:
    sim = build(load_scenario("healthy-gpu-operator"))
    for ds in sim.cluster.list(DAEMONSET):
        if name_of(ds) == "nvidia-driver-daemonset":
            sim.cluster.delete(DAEMONSET, name=name_of(ds), namespace=namespace_of(ds))
    for pod in sim.cluster.list(POD):
        if name_of(pod).startswith("nvidia-driver-daemonset"):
            sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))
    return sim


def test_two_nvidiadrivers_selecting_the_same_node_lose_the_newer_one() -> None:
    sim = _without_driver_daemonset()
    message = 'conflicting NVIDIADriver NodeSelectors found for resource: {}, nodeSelector: "map[]"'
    sim.cluster.create(
        _driver("default", "2026-01-01T00:00:00Z", None, ("ConflictingNodeSelector", message.format("default")))
    )
    sim.cluster.create(_driver("gold", "2026-03-01T00:00:00Z", {}, ("ConflictingNodeSelector", message.format("gold"))))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert [g.id for g in report.root_causes] == ["driver.nvidiadriver-conflict"], report.ids()
    finding = next(f for f in report.findings if f.id == "driver.nvidiadriver-conflict")
    assert "default" in finding.cause and "gold" in finding.cause
    assert any("ConflictingNodeSelector" in e for e in finding.evidence)
    assert finding.fix.startswith("kubectl delete nvidiadriver gold   #")
    assert finding.action is not None and finding.action.op is FixOp.DELETE and NOT_SIMULATED in finding.action.changes


def test_an_nvidiadriver_that_selects_other_nodes_is_not_blamed() -> None:
    sim = _without_driver_daemonset()
    sim.cluster.create(
        _driver("elsewhere", "2026-01-01T00:00:00Z", {"pool": "other"}, ("ReconcileFailed", "Error syncing state"))
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not any(f.id.startswith("driver.nvidiadriver") for f in report.findings)


def test_a_failed_reconcile_is_quoted_and_the_fix_edits_that_nvidiadriver() -> None:
    sim = _without_driver_daemonset()
    failure = "Error syncing state state-driver: failed to get image path: image repository is required"
    sim.cluster.create(_driver("default", "2026-01-01T00:00:00Z", None, ("ReconcileFailed", failure)))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert [g.id for g in report.root_causes] == ["driver.nvidiadriver-error"], report.ids()
    finding = next(f for f in report.findings if f.id == "driver.nvidiadriver-error")
    assert any(failure in e for e in finding.evidence)
    assert NVIDIA_DRIVER.kind == "NVIDIADriver"
    assert finding.fix.startswith("kubectl edit nvidiadriver default")


# -- the exporter's trust signals: its scrape, read beside the cluster ------------------------------


class _ExporterNode:
    """One simulated node's GPUs and the exporter process its exporter pod runs (gpuchain's own
    collector), which the DaemonSet replaces when the pod is deleted."""

    def __init__(self, node: str) -> None:
        from gpuchain.gpu.sim import SimBackend

        self.node = node
        self.gpus = SimBackend.from_preset("a100-80gb-x8")
        self.collector = self.start()

    def start(self) -> Any:
        """A new exporter process over the node's GPUs; feature discovery counted 8."""
        from gpuchain.exporter.collector import GpuMetricsCollector
        from gpuchain.exporter.counters import load_collectors

        return GpuMetricsCollector(
            self.gpus, counters=load_collectors(), hostname=self.node, expected_gpus=lambda: (8, "gfd")
        )

    def scrape(self, at: float | None = None) -> Any:
        import time

        from gpuchain.doctor.structs import Scrape
        from gpuchain.exporter.exposition import render

        return Scrape(render(self.collector.registry).decode(), time.time() if at is None else at)


def _trust_report(sim: Any, exporter: _ExporterNode, at: float | None = None) -> Report:
    from gpuchain.doctor import diagnose
    from gpuchain.doctor.snapshot import gather
    from gpuchain.doctor.structs import Snapshot

    snap = gather(sim.cluster)
    return diagnose(Snapshot(**{**snap.__dict__, "scrapes": {exporter.node: exporter.scrape(at)}}))


def _restart_exporter(sim: Any, exporter: _ExporterNode, report: Report, finding_id: str) -> None:
    """Apply the finding's fix to the cluster; the DaemonSet makes a new pod, which runs a new exporter."""
    from doctor.sim_fixes import apply_to_cluster
    from fakes.operand_simulator import OperandSimulator

    found = next(f for f in report.findings if f.id == finding_id and f.node == exporter.node)
    assert found.action is not None and found.action.op is FixOp.DELETE and pastes(found.fix)
    assert NOT_SIMULATED not in found.action.changes
    pod = str(found.action.changes["name"])
    apply_to_cluster(sim.cluster, found.action)
    assert sim.cluster.get_or_none(POD, name=pod, namespace=str(found.action.changes["namespace"])) is None
    OperandSimulator(sim.cluster, str(found.action.changes["namespace"])).settle()
    exporter.collector = exporter.start()
    exporter.collector.collect_once()


def _reset_gpu(exporter: _ExporterNode, report: Report, finding_id: str, gpu: int) -> None:
    """Apply the finding's fix, host work on the GPU: the reset brings it back, and the running
    exporter's next collection (it lists the GPUs every time) sees it."""
    found = next(f for f in report.findings if f.id == finding_id and f.node == exporter.node)
    assert found.action is not None and found.action.op is FixOp.HARDWARE and found.action.target == exporter.node
    assert "nvidia-smi -r" in found.action.changes["action"] and pastes(found.fix)
    exporter.gpus.recover_gpu(gpu)
    exporter.collector.collect_once()


def test_a_gpu_the_driver_stopped_listing_is_the_gpus_to_reset() -> None:
    """exporter.gpus-missing: GPU 3 was off the bus when the exporter started (it never saw it) and
    feature discovery counts 8; the scrape carries 7 until the GPU is reset."""
    sim = build(load_scenario("healthy"))
    exporter = _ExporterNode("gpu-0")
    exporter.gpus.lose_gpu(3)
    exporter.collector.collect_once()
    before = _trust_report(sim, exporter)
    assert {f.id for f in before.findings} == {"exporter.gpus-missing"}
    _reset_gpu(exporter, before, "exporter.gpus-missing", 3)
    after = _trust_report(sim, exporter)
    assert not after.findings and not after.broken


def test_a_stopped_collection_collects_again_in_a_new_exporter_pod() -> None:
    """exporter.stale: the exporter answers scrapes with samples from long ago (its loop stopped)."""
    import time

    from gpuchain.doctor.trust import STALE_INTERVALS
    from gpuchain.exporter import COLLECT_INTERVAL

    sim = build(load_scenario("healthy"))
    exporter = _ExporterNode("gpu-0")
    exporter.collector.collect_once()
    later = time.time() + (STALE_INTERVALS + 1) * COLLECT_INTERVAL
    before = _trust_report(sim, exporter, at=later)
    assert {f.id for f in before.findings} == {"exporter.stale"}
    _restart_exporter(sim, exporter, before, "exporter.stale")
    assert not _trust_report(sim, exporter).findings


def test_a_gpu_that_stopped_answering_the_exporter_is_reset() -> None:
    """exporter.gpu-down: GPU 3 fell off the bus under a running exporter, which keeps its series at
    gpuchain_gpu_up 0 (visible, not just gone); after the GPU's reset it answers again."""
    sim = build(load_scenario("healthy"))
    exporter = _ExporterNode("gpu-0")
    exporter.collector.collect_once()
    exporter.gpus.lose_gpu(3)
    exporter.collector.collect_once()
    before = _trust_report(sim, exporter)
    assert {f.id for f in before.findings} == {"exporter.gpu-down"}
    _reset_gpu(exporter, before, "exporter.gpu-down", 3)
    after = _trust_report(sim, exporter)
    assert not after.findings and not after.broken


def _warn(cluster: Cluster, pod: dict[str, Any], reason: str, message: str) -> None:
    """A kubelet Warning Event about ``pod``, as `kubectl get events` lists it."""
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name_of(pod)}.{reason.lower()}", "namespace": namespace_of(pod)},
            "involvedObject": {"kind": "Pod", "name": name_of(pod), "namespace": namespace_of(pod)},
            "type": "Warning",
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
        }
    )


def _creating(cluster: Cluster, ds: str, node: str) -> dict[str, Any]:
    """The ``ds`` pod on ``node`` left in ContainerCreating (its volumes never mounted)."""
    pod = next(p for p in cluster.list(POD) if p["metadata"]["name"].startswith(ds) and p["spec"]["nodeName"] == node)
    status = pod["status"]
    for e in status.get("containerStatuses") or []:
        e.update(ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    status.update(phase="Pending", conditions=[{"type": "Ready", "status": "False"}])
    cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))
    return pod


def test_an_operand_waiting_on_the_driver_root_is_the_driver_not_the_operand() -> None:
    """Any operand that cannot mount the driver's host directory waits on the driver (issue 26, item 2):
    on GKE the plugin's FailedMount for /home/kubernetes/bin/nvidia means no driver was installed."""
    report = diagnosed(
        "name: x\nstack: gke\nnodes:\n  - {name: a}\n  - {name: b}\n",
        lambda sim: _warn(
            sim.cluster,
            _creating(sim.cluster, "nvidia-gpu-device-plugin", "b"),
            "FailedMount",
            'MountVolume.SetUp failed for volume "nvidia" : hostPath type check failed: /home/kubernetes/bin/nvidia '
            "is not a directory",
        ),
    )
    roots = [f for f in report.findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("driver.not-installed", "driver", "b")]
    assert "kubelet.hostpath-not-directory" in " ".join(roots[0].evidence)
    assert "gpu-driver-version" in roots[0].fix and "daemonset-preloaded" in roots[0].fix


def test_gpu_pods_refused_because_nvml_fails_at_allocation_are_the_driver() -> None:
    """NVML failing under the plugin's Allocate (kubelet UnexpectedAdmissionError) is the driver's fault,
    with the driver's repair (reboot, GSP firmware off), not a kubelet restart."""
    pod = {"metadata": {"name": "job-0", "namespace": "default"}, "spec": {"nodeName": "a"}}
    report = diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: a, hostDriver: 570.195.03}\n",
        lambda sim: _warn(
            sim.cluster,
            pod,
            "UnexpectedAdmissionError",
            "Pod Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc error: code = "
            "Unknown desc = error getting list of preferred allocation devices: unable to retrieve list of available "
            "devices: error creating nvml.Device 0: nvml: Unknown Error, which is unexpected",
        ),
    )
    roots = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert [(f.id, f.link) for f in roots] == [("driver.gpu-unavailable", "driver")]
    assert "NVreg_EnableGpuFirmware=0" in roots[0].fix and "restart kubelet" not in roots[0].fix
    assert not any(f.id == "workload.admission-failed" for f in report.findings), "no kubelet restart beside it"
    assert roots[0].action is not None and roots[0].action.op is FixOp.NODE


def test_mig_on_gpus_no_mig_manager_manages_is_the_mig_link() -> None:
    """NVIDIA/gpu-operator#287's class: MIG mode set on the host before the operator; the plugin and GFD
    both fail and the MIG manager was never placed, so the fix puts it there with a layout."""
    unset = dict.fromkeys(("nvidia.com/gpu.deploy.mig-manager", "nvidia.com/mig.config", "nvidia.com/mig.config.state"))
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a, preset: a100-40gb-x8}\n",
        lambda sim: sim.cluster.patch(NODE, name="a", patch={"metadata": {"labels": unset}}),
        _failing("nvidia-device-plugin-daemonset", "a"),
        _failing("gpu-feature-discovery", "a"),
    )
    roots = [f for f in report.findings if f.root]
    assert [(f.id, f.link) for f in roots] == [("mig.unmanaged", "mig")]
    assert roots[0].action is not None and roots[0].action.changes.get("nvidia.com/gpu.deploy.mig-manager") == "true"


def test_the_plugins_panic_on_a_mig_gpu_with_no_instance_is_the_mig_link() -> None:
    """The single strategy's panic when MIG mode is on and no instance is carved (NVIDIA/k8s-device-plugin
    internal/mig/mig.go@v0.12.3, wrapped by its mig-strategy.go): the MIG layout, not the plugin's registration. No
    MIG manager serves a standalone plugin's node, so no label would carve it: mig-parted on the host does, and its
    nvidia-mig-manager.service keeps the layout across reboots (NVIDIA/mig-parted deployments/systemd)."""
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 6, "state": {"waiting": "CrashLoopBackOff"}}
    log = (
        "2026/01/01 00:00:00 Starting FS watcher.\n"
        "panic: At least one device with migEnabled=true was not configured correctly: "
        "No MIG devices associated with /dev/nvidia3: GPU-0f0e0d0c-1111-2222-3333-444455556666\n"
    )
    report = diagnosed(
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-80gb-x8, hostDriver: 550.54.15}\n",
        no_gpus("m"),
        plugin_pod("m", crash, log),
    )
    (root,) = [f for f in report.findings if f.root]
    assert (root.id, root.link, root.node) == ("mig.no-instances", "mig", "m")
    assert "catalog: k8s-device-plugin.mig-no-instances" in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "nvidia-mig-parted apply" in root.fix and "nvidia-mig-manager.service" in root.fix
    assert "nvidia-smi -mig 0" in root.fix and "kubectl label" not in root.fix


def _released_beside(tmp_path: Path, ds: str, namespace: str, image: str, log: str, labels: str = "") -> Report:
    """A standalone-plugin cluster with a release of its own of ``ds`` (in ``namespace``) whose one pod runs
    ready and logs ``log``; the doctor's report on it. Built with the held-out sets' edits (tests/sim/heldout)."""
    from sim.heldout import harness

    doc = f"""
name: x
source: gpuchain#0
base:
  stack: nvidia-device-plugin
  nodes: [{{name: a, preset: l4-x2, hostDriver: 550.90.07}}]
edits:
  - {{do: add-daemonset, namespace: {namespace}, name: {ds}, image: {image}, containers: [main], nodes: [a]}}
  - {{do: pod, daemonset: {ds}, namespace: {namespace}, node: a, logs: {{main: {json.dumps(log)}}}}}
{labels}
expect: {{root: none, nodes: []}}
"""
    path = tmp_path / "x.yaml"
    path.write_text(doc)
    case = harness.load(path)
    return run_doctor(case.cluster, reader=case.read_log)


def test_a_running_exporter_release_whose_log_says_it_fails_is_the_exporter(tmp_path: Path) -> None:
    """NVIDIA/dcgm-exporter's pod-resources client cannot reach the kubelet's socket: the pod runs, no
    metrics carry pods; its own link, with the catalog's repair (the chart's kubeletPath)."""
    line = (
        "level=error msg=\"Failed to collect metrics; err: failure connecting to '/var/lib/kubelet/pod-resources/"
        "kubelet.sock'; err: context deadline exceeded\""
    )
    report = _released_beside(tmp_path, "dcgm-exporter", "monitoring", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3", line)
    roots = [f for f in report.findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("exporter.running-with-errors", "exporter", "a")]
    assert "kubeletPath" in roots[0].fix and "dcgm-exporter.pod-resources-connect" in " ".join(roots[0].evidence)


def test_a_running_gfd_without_labels_whose_log_says_why_is_gfd(tmp_path: Path) -> None:
    """gpu-feature-discovery that found no GPU at its start runs on with no label written: its own link."""
    unlabel = "  - {do: node, node: a, labels: {nvidia.com/gpu.product: null}}"
    report = _released_beside(
        tmp_path,
        "gpu-feature-discovery",
        "node-feature-discovery",
        "nvcr.io/nvidia/gpu-feature-discovery:v0.8.2",
        "W0101 00:00:00.000000 1 main.go:275] No labels generated from any source",
        unlabel,
    )
    roots = [f for f in report.findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("gfd.running-with-errors", "gfd", "a")]
    assert "delete pod" in roots[0].fix


def test_a_driver_failure_no_entry_knows_quotes_the_line_and_names_the_next_action() -> None:
    """Issue 26, item 3: a driver log line the catalog does not know is quoted in the fix with the action a
    person takes for the driver link (packages, precompiled driver), never "run it again" alone."""
    line = "Error: Unable to frobnicate the widget for kernel 9.9.9"
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        _failing(
            "nvidia-driver-daemonset",
            "a",
            main="nvidia-driver-ctr",
            lastState={"terminated": {"reason": "Error", "exitCode": 1, "message": line}},
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("driver.not-ready", "driver")
    assert line in found.fix and "usePrecompiled" in found.fix
    assert "knows no repair" not in found.fix and pastes(found.fix)


def test_a_failing_validation_whose_message_the_catalog_knows_gets_the_entrys_repair() -> None:
    """The validator's driver-validation without a host driver: the driver link, with the catalog entry's
    repair (install the host driver or let the operator install it), not a rerun of the validation."""
    line = 'time="2026-01-01T00:00:00Z" level=error msg="failed to find an executable \'nvidia-smi\' on the host"'
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        _failing(
            "nvidia-operator-validator",
            "a",
            init="driver-validation",
            lastState={"terminated": {"reason": "Error", "exitCode": 1, "message": line}},
        ),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link) == ("driver.validation-failed", "driver")
    assert "gpu-operator.validator-no-host-nvidia-smi" in " ".join(found.evidence)
    assert "spec.driver.enabled=true" in found.fix and found.action is not None


def _gpu_node(sim: Any) -> str:
    return next(name_of(n) for n in sim.cluster.list(NODE) if node_gpu_resources(n))


def test_a_node_whose_gpus_a_device_plugin_and_a_dra_driver_both_announce_goes_to_one(tmp_path: Path) -> None:
    """gpuchain's DRA driver publishes while the device plugin is not registered yet (capacity 0),
    then the plugin registers and the driver has not seen the Node since: both announce. The fix, the
    label the doctor names applied as `kubectl label` would, makes the real driver withdraw its devices."""
    sim = build(load_scenario("healthy"))
    node = _gpu_node(sim)
    registered = sim.cluster.get(NODE, name=node)["status"]["capacity"]
    sim.cluster.patch_status(NODE, name=node, status={"capacity": {"nvidia.com/gpu": "0"}})
    config = DriverConfig(node=node, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", unlabelled=DRA)
    driver = DraDriver(SimBackend.from_preset("h100-80gb-x8", node=node), cluster=sim.cluster, config=config)
    assert driver.publish().devices
    sim.cluster.patch_status(NODE, name=node, status={"capacity": registered})
    report = run_doctor(sim.cluster, reader=sim.read_log)
    (finding,) = [f for f in report.findings if f.id == "device-plugin.dra-conflict"]
    assert finding.node == node and finding.severity is Severity.ERROR and finding.root
    assert finding.fix.startswith(f"kubectl label node {node} gpuchain.io/gpu.allocator=device-plugin --overwrite")
    assert finding.action is not None and finding.action.op is FixOp.LABEL_NODE
    labelled = sim.cluster.patch(NODE, name=node, patch={"metadata": {"labels": finding.action.changes}})
    assert driver.node_changed(labelled) is not None  # the driver follows its Node: it withdraws
    after = run_doctor(sim.cluster, reader=sim.read_log)
    assert not [f for f in after.findings if f.id == "device-plugin.dra-conflict"]


def test_another_dra_driver_beside_the_device_plugin_takes_the_plugin_off_the_node() -> None:
    sim = build(load_scenario("healthy"))
    node = _gpu_node(sim)
    device = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"}}
    slice_["spec"] = {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node}, "devices": [device]}
    sim.cluster.create(slice_)
    finding = next(f for f in run_doctor(sim.cluster).findings if f.id == "device-plugin.dra-conflict")
    assert "gpu.nvidia.com: 1 devices" in finding.cause
    assert finding.fix.startswith(f"kubectl label node {node} nvidia.com/gpu.deploy.device-plugin=false --overwrite")


def test_a_node_handed_to_dra_is_not_a_device_plugin_that_failed_to_register() -> None:
    """Its device plugin announces 0 by design (kube.allocator) and gpuchain's DRA plugin publishes its GPUs in a
    ResourceSlice: the link is fine, nothing to fix."""
    sim = build(load_scenario("healthy"))
    node = _gpu_node(sim)
    sim.cluster.patch(NODE, name=node, patch={"metadata": {"labels": {"gpuchain.io/gpu.allocator": "dra"}}})
    zero = {"nvidia.com/gpu": "0"}
    sim.cluster.patch_status(NODE, name=node, status={"capacity": zero, "allocatable": zero})
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.gpuchain.io"},
        "spec": {"driver": "gpu.gpuchain.io", "nodeName": node, "devices": [{"name": "gpu-0"}]},
    }
    sim.cluster.create(slice_)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    chain = next(c for c in report.chains if c.node == node)
    link = next(lk for lk in chain.links if lk.name == "device-plugin")
    assert link.state.value == "ok" and "DRA driver" in link.summary, link
    assert not [f for f in report.findings if f.node == node and f.severity is Severity.ERROR], report.ids()


def test_a_node_handed_to_dra_whose_gpus_no_slice_publishes_gets_the_dra_plugin_turned_on() -> None:
    """The DRA chain, followed where the label hands the GPUs to it: no ResourceSlice for the node and no
    gpuchain-dra-plugin DaemonSet is the chart's dra.enabled off, not a device plugin that failed to register."""
    sim = build(load_scenario("healthy"))
    node = _gpu_node(sim)
    sim.cluster.patch(NODE, name=node, patch={"metadata": {"labels": {"gpuchain.io/gpu.allocator": "dra"}}})
    zero = {"nvidia.com/gpu": "0"}
    sim.cluster.patch_status(NODE, name=node, status={"capacity": zero, "allocatable": zero})
    report = run_doctor(sim.cluster, reader=sim.read_log)
    (found,) = [f for f in report.findings if f.node == node and f.severity is Severity.ERROR]
    assert (found.id, found.link) == ("device-plugin.dra-unpublished", "device-plugin")
    assert "--set dra.enabled=true" in found.fix and found.fix.startswith("helm upgrade --install gpuchain")


def _upgrading(tmp_path: Path, state: str, driver_pod: str) -> Report:
    """Three GPU Operator nodes in a rolling driver upgrade (one at a time): a-0 done, a-1 in ``state`` with
    its driver pod as ``driver_pod`` (held-out edit YAML), a-2 waiting its turn."""
    from sim.heldout import harness

    doc = f"""
name: x
source: gpuchain#0
base:
  stack: gpu-operator
  nodes: [{{name: a, count: 3, preset: l4-x2}}]
edits:
  - {{do: node, node: a-0, labels: {{nvidia.com/gpu-driver-upgrade-state: upgrade-done}}}}
  - {{do: node, node: a-1, labels: {{nvidia.com/gpu-driver-upgrade-state: {state}}}, unschedulable: true}}
  - {{do: node, node: a-2, labels: {{nvidia.com/gpu-driver-upgrade-state: upgrade-required}}}}
  - {{do: pod, daemonset: nvidia-driver-daemonset, node: a-1, {driver_pod}}}
expect: {{root: none, nodes: []}}
"""
    path = tmp_path / "x.yaml"
    path.write_text(doc)
    case = harness.load(path)
    return run_doctor(case.cluster, reader=case.read_log)


@pytest.mark.parametrize("state", ["pod-restart-required", "validation-required"])
def test_a_driver_pod_the_upgrade_restarts_is_information_not_a_fault(tmp_path: Path, state: str) -> None:
    """NVIDIA's upgrade controller deleted the old driver pod (pod-restart-required) or waits for the new one
    to validate: the new pod in its driver-manager init container is the upgrade at work."""
    starting = "phase: Pending, init: [{name: k8s-driver-manager, state: {running: true}}]"
    report = _upgrading(tmp_path, state, starting)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], report.ids()
    (info,) = [f for f in report.findings if f.id == "driver.upgrading"]
    assert (info.node, info.severity, info.action) == ("a-1", Severity.INFO, None)
    chain = next(c for c in report.chains if c.node == "a-1")
    assert [lk.state.value for lk in chain.links][:2] == ["broken", "not-reached"]  # the links above wait


def test_a_driver_pod_that_fails_during_the_upgrade_is_still_judged(tmp_path: Path) -> None:
    crash = "containers: [{name: nvidia-driver-ctr, state: {waiting: CrashLoopBackOff}, last: {terminated: Error}}]"
    report = _upgrading(tmp_path, "pod-restart-required", crash)
    assert [f.id for f in report.findings if f.root and f.severity is Severity.ERROR] == ["driver.not-ready"]
    assert not [f for f in report.findings if f.id == "driver.upgrading"]


def test_cuda_not_initialised_on_a_running_driver_is_the_fabric_manager_not_the_toolkit() -> None:
    """CUDA's error 802 in the cuda validation (vectorAdd's line): the driver runs and the toolkit started
    the container, so neither the toolkit its init container stands for nor a restart repairs it; on an
    NVSwitch system it is the Fabric Manager of the driver's version that is missing."""
    sim = _failing_cuda_validation(
        "550.127.05", "Failed to allocate device vector A (error code system not yet initialized)!\n"
    )
    roots = [f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.root]
    assert [(f.id, f.link, f.node) for f in roots] == [("driver.fabric-manager", "driver", "a")]
    assert "nvidia-fabricmanager" in roots[0].fix and "catalog: cuda.system-not-ready" in " ".join(roots[0].evidence)
