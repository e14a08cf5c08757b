"""Checks on hand-made snapshots: what a live cluster looks like when the simulator is not the source."""

from __future__ import annotations

import copy

from doctor.small_cluster import diagnosed, pending_gpu_pod

from gpuchain.doctor import diagnose, run_doctor
from gpuchain.doctor.model import Severity
from gpuchain.doctor.ready_gpu_logs import ready_gpu_probes
from gpuchain.doctor.snapshot import MAX_LOGS, gather, needs_logs, with_logs
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube import CLUSTER_POLICY, NODE, MemoryCluster
from gpuchain.sim import build, load_scenario


def _strip_termination_messages(snapshot: Snapshot) -> Snapshot:
    pods = copy.deepcopy(snapshot.pods)
    for pod in pods:
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            cs.pop("lastState", None)
    return Snapshot(**{**snapshot.__dict__, "pods": pods})


def test_kernel_mismatch_is_found_from_kernels_alone_without_any_log() -> None:
    sim = build(load_scenario("friday-scale-out"))
    snap = _strip_termination_messages(gather(sim.cluster))
    report = diagnose(snap)
    root = report.root_causes[0]
    assert root.id == "driver.kernel-mismatch"
    assert not any(e.startswith("log:") for e in root.first.evidence)


def test_logs_are_read_only_for_a_few_failing_pods_lacking_a_termination_message() -> None:
    sim = build(load_scenario("host-driver-conflict"))
    snap = _strip_termination_messages(gather(sim.cluster))
    assert diagnose(snap).root_causes[0].id == "driver.not-ready"  # no log: the cause is unknown
    reads: list[tuple[str, str, str]] = []

    def reader(ns: str, pod: str, container: str) -> str | None:
        reads.append((ns, pod, container))
        return sim.read_log(ns, pod, container)

    snap2, n = with_logs(snap, reader=reader)
    assert n == 1 and reads == needs_logs(snap)
    assert reads[0][2] == "nvidia-driver-ctr"
    assert diagnose(snap2).root_causes[0].id == "driver.host-driver-conflict"


def test_log_reads_are_capped_however_many_pods_fail() -> None:
    from gpuchain.sim import parse_scenario

    sim = build(parse_scenario("name: x\nnodes:\n  - {name: g, count: 40, hostDriver: 535.161.08}\n"))
    snap = _strip_termination_messages(gather(sim.cluster))
    assert len(needs_logs(snap)) == MAX_LOGS


def test_gpu_nodes_and_no_stack_at_all_is_a_root_cause_not_a_missing_policy() -> None:
    # No ClusterPolicy of either group and no device plugin: no stack runs; the fix installs
    # gpuchain into its own namespace (never NVIDIA's gpu-operator namespace).
    cluster = MemoryCluster(
        [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "g", "labels": {"nvidia.com/gpu.present": "true"}}}]
    )
    report = run_doctor(cluster)
    assert report.ids == {"stack.missing"} and report.broken
    assert "-n gpuchain" in report.findings[0].fix and "gpu-operator" not in report.findings[0].fix


def test_missing_runtimeclass_breaks_the_toolkit_link() -> None:
    sim = build(load_scenario("healthy"))
    snap = gather(sim.cluster)
    snap = Snapshot(**{**snap.__dict__, "runtime_classes": []})
    report = diagnose(snap)
    assert {g.id for g in report.root_causes} == {"toolkit.runtime-class-missing"}


def test_device_plugin_running_without_capacity_is_not_registered() -> None:
    sim = build(load_scenario("healthy"))
    gone = {"nvidia.com/gpu": None}
    sim.cluster.patch_status(NODE, name="gpu-1", status={"capacity": gone, "allocatable": gone})
    reads: list[str] = []

    def reader(ns: str, pod: str, container: str) -> str | None:
        reads.append(pod)
        return "Retrying registration: kubelet.sock not found\nerror: failed to register with kubelet"

    report = run_doctor(sim.cluster, reader=reader)
    finding = next(f for f in report.findings if f.node == "gpu-1")
    assert finding.id == "device-plugin.not-registered"
    # The plugin's log once; beside it only the stack's exporter where GPU pods run (its pod-resources client), and
    # the probe of one ready GPU pod on each of a few GPU nodes (a pod whose GPUs a systemd reload took says so only
    # in its log).
    plugin = [p for p in reads if p.startswith("nvidia-device-plugin-daemonset-")]
    snap = gather(sim.cluster)
    ready = {key[1] for key in ready_gpu_probes(snap, detect(snap).namespace)}
    assert len(plugin) == 1 and [p for p in reads if p not in plugin and p not in ready] == [
        p for p in reads if p.startswith("nvidia-dcgm-exporter-")
    ]
    # No catalog entry knows the line: it is quoted as unrecognised, never passed off as a known message.
    assert "unrecognised: error: failed to register with kubelet" in finding.evidence


def test_pending_pods_on_a_full_healthy_cluster_are_information_not_an_error() -> None:
    sim = build(load_scenario("healthy"))
    pod = pending_gpu_pod(8, "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.")
    sim.cluster.create(pod)
    report = run_doctor(sim.cluster)
    f = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    # Issue 26: a healthy cluster whose GPUs are all allocated is capacity, not a broken chain.
    assert f.severity is Severity.INFO and not f.root and "every schedulable GPU is in use" in f.cause
    assert report.exit_code == 0


def test_a_full_cluster_stays_information_beside_a_fault_that_takes_no_gpu_away() -> None:
    """The exporter crashing on one node is its own error; the GPUs are still offered, so pods Pending on
    Insufficient nvidia.com/gpu are capacity (info), not a consequence of it."""
    waiting = pending_gpu_pod(8, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    crash = {"name": "nvidia-dcgm-exporter", "state": {"waiting": "CrashLoopBackOff"}, "last": {"terminated": "Error"}}
    exporter = {"do": "pod", "daemonset": "nvidia-dcgm-exporter", "node": "n2", "containers": [crash]}
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n",
        exporter,
        lambda sim: sim.cluster.create(waiting),
    )
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert pending.severity is Severity.INFO and not pending.root
    assert [(f.link, f.node) for f in report.findings if f.root] == [("exporter", "n2")]
    # A fault that does take GPUs away (the plugin on n2) makes the same pods an error again.
    plugin = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "n2",
        "containers": [crash | {"name": "nvidia-device-plugin"}],
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n",
        plugin,
        {"do": "node", "node": "n2", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        lambda sim: sim.cluster.create(waiting),
    )
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert pending.severity is Severity.ERROR and "consequence of" in pending.cause


def test_namespace_comes_from_the_clusterpolicy_status() -> None:
    sim = build(load_scenario("healthy"))
    sim.cluster.patch_status(CLUSTER_POLICY, name="cluster-policy", status={"namespace": "elsewhere"})
    report = run_doctor(sim.cluster)
    # Nothing of the operator lives in "elsewhere": the doctor says so instead of calling the node healthy.
    # The driver is enabled in the policy, so its missing DaemonSet is the first broken link (it
    # used to read as "driver container off, host driver assumed").
    f = report.findings[0]
    assert (f.id, f.link) == ("operand.not-deployed", "driver")
    assert "DaemonSet elsewhere/nvidia-driver-daemonset does not exist" in f.evidence[0]
    assert report.broken


def test_a_fault_published_by_gpu_health_is_lost_gpu_even_when_counts_still_match() -> None:
    from gpuchain.remediation.model import FAULTS_ANNOTATION, PODS_ANNOTATION, Fault, encode_faults, encode_pods

    sim = build(load_scenario("healthy"))
    fault = Fault(uuid="GPU-aaa", gpu="GPU-aaa", xids=(48,), covers=("GPU-aaa",))
    node = sim.cluster.get(NODE, name="gpu-3")
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "GPUHealthy"]
    conditions.append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError", "message": "XID 48"})
    sim.cluster.patch_status(NODE, name="gpu-3", status={"conditions": conditions})
    annotations = {
        FAULTS_ANNOTATION: encode_faults({"GPU-aaa": fault}),
        PODS_ANNOTATION: encode_pods({"GPU-aaa": ("ml/job/c",)}),
    }
    sim.cluster.patch(NODE, name="gpu-3", patch={"metadata": {"annotations": annotations}})
    report = run_doctor(sim.cluster)
    f = next(f for f in report.findings if f.node == "gpu-3")
    assert f.id == "gpu.lost" and "-n ml job" in f.fix
    assert any("GPUHealthy=False (GPUXidError)" in e for e in f.evidence)


def test_a_policy_default_naming_a_missing_config_breaks_every_unlabelled_node() -> None:
    from gpuchain.sim import parse_scenario

    text = (
        "name: x\npolicy: {devicePlugin: {config: {name: dp, default: gone}}}\n"
        "devicePluginConfigs: {shared: {}}\nnodes:\n  - {name: gpu, count: 2}\n"
    )
    sim = build(parse_scenario(text))
    assert sim.plans[0].plugin == "config-missing"
    report = run_doctor(sim.cluster, reader=sim.read_log)
    group = report.root_causes[0]
    assert (group.id, group.nodes) == ("device-plugin.config-missing", ("gpu-0", "gpu-1"))
    assert "spec.devicePlugin.config.default=gone" in group.first.cause
    assert '"default":"shared"' in group.first.fix


def test_driver_container_off_without_a_host_driver_is_driver_missing() -> None:
    from gpuchain.sim import parse_scenario

    sim = build(parse_scenario("name: x\npolicy: {driver: {enabled: false}}\nnodes:\n  - {name: gpu}\n"))
    report = run_doctor(sim.cluster)
    f = report.root_causes[0].first
    assert f.id == "driver.missing" and "spec.driver.enabled=false" in f.cause
    assert any("driver-validation not done" in e for e in f.evidence)
