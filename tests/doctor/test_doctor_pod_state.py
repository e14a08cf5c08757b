"""The walk reasons from pod and DaemonSet state, whatever stack runs the cluster (issue 26): pods the
scheduler cannot place, driver DaemonSets made per kernel, an operand's second release elsewhere."""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed, unschedulable

from gpuchain.common.remember import answers_remembered
from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.model import LinkState
from gpuchain.doctor.pods import pod_state
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

SCHEDULER = (
    "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod."
)


def _pod(sim: object, prefix: str, node: str) -> dict:  # type: ignore[type-arg]
    cluster = sim.cluster  # type: ignore[attr-defined]
    return next(
        p for p in cluster.list(POD) if p["metadata"]["name"].startswith(prefix) and p["spec"]["nodeName"] == node
    )


def test_a_daemonset_pod_the_scheduler_cannot_place_is_the_root_of_its_link() -> None:
    sim = build(parse_scenario("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: full}\n"))
    pod = _pod(sim, "nvidia-device-plugin-daemonset", "full")
    affinity = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["full"]}]}
    sim.cluster.patch(
        POD,
        name=pod["metadata"]["name"],
        patch={
            "spec": {
                "nodeName": None,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [affinity]}
                    }
                },
            }
        },
        namespace="gpu-operator",
    )
    sim.cluster.patch_status(
        POD,
        name=pod["metadata"]["name"],
        status={
            "phase": "Pending",
            "containerStatuses": None,
            "initContainerStatuses": None,
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHEDULER}
            ],
        },
        namespace="gpu-operator",
    )
    state = pod_state(sim.cluster.get(POD, name=pod["metadata"]["name"], namespace="gpu-operator"))
    assert (state.status, state.failing, state.unschedulable) == ("Pending", True, True)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.root)
    assert (found.link, found.node) == ("device-plugin", "full")
    assert f"scheduler: {SCHEDULER}" in found.evidence
    assert "cpu" in found.fix and "restart" not in found.fix


def test_precompiled_driver_daemonsets_per_kernel_are_the_driver() -> None:
    """NVIDIA/gpu-operator#682: with usePrecompiled the operator names a driver DaemonSet per kernel and OS."""
    sim = build(parse_scenario("name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n"))
    ds = sim.cluster.get(DAEMONSET, name="nvidia-driver-daemonset", namespace="gpu-operator")
    pod = _pod(sim, "nvidia-driver-daemonset", "a")
    new = "nvidia-driver-daemonset-5.15.0-1041-azure-ubuntu22.04"
    sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace="gpu-operator")
    sim.cluster.delete(DAEMONSET, name="nvidia-driver-daemonset", namespace="gpu-operator")
    keep = ("labels", "annotations")
    ds["metadata"] = {
        **{k: v for k, v in ds["metadata"].items() if k in keep},
        "name": new,
        "namespace": "gpu-operator",
    }
    sim.cluster.create(ds)
    pod["metadata"] = {
        **{k: v for k, v in pod["metadata"].items() if k in keep},
        "name": f"{new}-hv26g",
        "namespace": "gpu-operator",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": new, "controller": True}],
    }
    sim.cluster.create(pod)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not report.broken, report.ids
    assert report.chains[0].links[0].summary.startswith("driver pod Running")


def test_a_second_exporter_release_in_another_namespace_is_read() -> None:
    """dcgm-exporter's own chart beside the operator (its exporter off): its crash is the exporter link's."""
    sim = build(
        parse_scenario(
            "name: x\nstack: gpu-operator\npolicy: {dcgmExporter: {enabled: false}}\nnodes:\n  - {name: a}\n"
        )
    )
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.1-ubuntu22.04"
    sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}})
    sim.cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "dcgm-exporter", "namespace": "monitoring", "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "exporter", "image": image}]}}},
        }
    )
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "dcgm-exporter-x1",
                "namespace": "monitoring",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter"}],
            },
            "spec": {"nodeName": "a", "containers": [{"name": "exporter", "image": image}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "exporter",
                        "ready": False,
                        "restartCount": 4,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                    }
                ],
            },
        }
    )
    line = 'level=fatal msg="Failed to watch metrics: Error watching fields: The third-party Profiling module returned an unrecoverable error"'
    sim.cluster.set_logs("dcgm-exporter-x1", namespace="monitoring", container="exporter", text=line + "\n")
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("exporter.not-ready", "exporter", "a")
    assert found.action is not None and found.action.changes["namespace"] == "monitoring"
    assert "kubectl -n monitoring delete pod dcgm-exporter-x1" in found.fix


#: runc's words when a prestart hook exits non-zero (opencontainers/runc libcontainer/configs/config.go@v1.2.5,
#: "error running %s hook #%d: %w"), as containerd's CRI wraps them.
HOOK = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running prestart hook #0: exit status 1, "
    "stdout: , stderr: : unknown"
)


def _refused(prefix: str, node: str, container: str, message: str) -> Callable[[SimCluster], None]:
    """The pod's main container as the kubelet leaves it when the runtime cannot start it: waiting
    ``RunContainerError`` with the runtime's error as message (kubernetes pkg/kubelet/container/sync_result.go
    ErrRunContainer, the reason the kubelet's status manager writes for a failed StartContainer), phase Running
    with its init containers done."""

    def edit(sim: SimCluster) -> None:
        pod = _pod(sim, prefix, node)
        status = pod["status"]
        for cs in status["containerStatuses"]:
            if cs["name"] == container:
                cs.update(
                    ready=False,
                    restartCount=2,
                    state={"waiting": {"reason": "RunContainerError", "message": message}},
                )
        sim.cluster.patch_status(
            POD, name=pod["metadata"]["name"], status=status, namespace=pod["metadata"]["namespace"]
        )

    return edit


def test_an_operand_the_runtime_hook_will_not_start_is_a_toolkit_fault_whatever_the_operand() -> None:
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _refused("gpu-feature-discovery", "a", "gpu-feature-discovery", HOOK),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "a")
    assert root.evidence[0].endswith("container gpu-feature-discovery RunContainerError, 2 restarts")
    assert "gfd.not-ready" not in report.ids
    # The links above the toolkit are not reached: the plugin on that node is not judged on its own.
    chain = next(c for c in report.chains if c.node == "a")
    assert [lk.name for lk in chain.links if lk.state is LinkState.BROKEN] == ["toolkit"]


def test_the_toolkits_own_refused_container_and_a_refusal_the_toolkit_did_not_write_stay_with_their_pod() -> None:
    # The toolkit's own container is judged by the toolkit's check, not as its own victim.
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        _refused("nvidia-container-toolkit-daemonset", "a", "nvidia-container-toolkit-ctr", HOOK),
    )
    assert "toolkit.hook-failed" not in report.ids and "toolkit.not-ready" in report.ids
    # A refusal whose message is not the toolkit's (a missing executable in the plugin's own image) is the plugin's.
    own = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
        'unable to start container process: exec: "nvidia-device-plugin": executable file not found in $PATH: unknown'
    )
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        _refused("nvidia-device-plugin-daemonset", "a", "nvidia-device-plugin", own),
    )
    root = next(f for f in report.findings if f.root)
    assert (root.link, root.id) == ("device-plugin", "device-plugin.not-ready")


def _init_waiting(prefix: str, reason: str, message: str) -> Callable[[SimCluster], None]:
    """The pod's first init container waiting with ``reason`` as the kubelet writes a container it never handed
    to the runtime (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4: CreateContainerConfigError
    when it cannot build the container's config from a ConfigMap or Secret, pkg/kubelet/images: ImagePullBackOff),
    the later init containers and the main ones waiting in PodInitializing, phase Pending."""

    def edit(sim: SimCluster) -> None:
        pod = _pod(sim, prefix, "a")
        status = pod["status"]
        inits = status["initContainerStatuses"]
        inits[0].update(ready=False, state={"waiting": {"reason": reason, "message": message}})
        for cs in [*inits[1:], *status["containerStatuses"]]:
            cs.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
        status["phase"] = "Pending"
        sim.cluster.patch_status(
            POD, name=pod["metadata"]["name"], status=status, namespace=pod["metadata"]["namespace"]
        )

    return edit


ONE = "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n"


def test_a_validation_init_container_the_kubelet_never_started_proves_nothing_of_the_link_it_validates() -> None:
    # The plugin's toolkit-validation cannot get its config: the plugin pod's own ConfigMap is the repair.
    report = diagnosed(
        ONE,
        _init_waiting(
            "nvidia-device-plugin-daemonset", "CreateContainerConfigError", 'configmap "plugin-config" not found'
        ),
    )
    root = next(f for f in report.findings if f.root)
    assert (root.link, root.id) == ("device-plugin", "device-plugin.not-ready")
    assert root.fix.startswith("kubectl -n gpu-operator create configmap plugin-config")
    # The validator's own driver-validation, likewise: nothing about the driver; its Secret is created.
    report = diagnosed(
        ONE, _init_waiting("nvidia-operator-validator", "CreateContainerConfigError", 'secret "ngc-secret" not found')
    )
    root = next(f for f in report.findings if f.root)
    assert root.link == "toolkit" and "driver.validation-failed" not in report.ids
    assert root.fix.startswith("kubectl -n gpu-operator create secret generic ngc-secret")
    # A validator image the node cannot pull is the validator pod's, reported at the link it sits under.
    pull = 'Back-off pulling image "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v99.0.0"'
    report = diagnosed(ONE, _init_waiting("nvidia-operator-validator", "ImagePullBackOff", pull))
    root = next(f for f in report.findings if f.root)
    assert (root.link, root.id) == ("toolkit", "toolkit.not-ready")
    assert "ImagePullBackOff (driver-validation)" in root.evidence[0] and "imagePullSecrets" in root.fix


def test_a_plugin_daemonset_with_no_pod_on_an_admitted_node_is_never_told_to_restart() -> None:
    """No taint, selector or FailedCreate explains the missing pod: a restart of a DaemonSet that makes no pod
    here makes none either, so the fix names no restart and quotes the DaemonSet's own counts."""

    def no_pod(sim: SimCluster) -> None:
        pod = _pod(sim, "nvidia-device-plugin-daemonset", "a")
        sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
        gone = {"nvidia.com/gpu": None}
        sim.cluster.patch_status(NODE, name="a", status={"capacity": gone, "allocatable": gone})

    report = diagnosed(ONE, no_pod)
    root = next(f for f in report.findings if f.root)
    assert (root.id, root.node) == ("device-plugin.not-registered", "a")
    assert "rollout restart" not in root.fix and root.fix.startswith(
        "# nvidia-device-plugin-daemonset admits this node"
    )
    assert root.action is None and "desired 1, current 1, ready 1" in root.fix


def test_a_daemonset_pod_pending_for_a_host_port_names_the_pod_that_holds_it() -> None:
    """kube-scheduler's NodePorts filter says only "didn't have free ports for the requested pod ports": the pod
    on the node that holds the port (here a second dcgm-exporter release's, in its own namespace) is named."""
    said = (
        "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) didn't "
        "match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 No preemption victims found."
    )
    port = [{"name": "metrics", "containerPort": 9400, "hostPort": 9400, "protocol": "TCP"}]

    def crowded(sim: SimCluster) -> None:
        pod = _pod(sim, "nvidia-dcgm-exporter", "a")
        containers = [{**pod["spec"]["containers"][0], "ports": port}]
        unschedulable("nvidia-dcgm-exporter", "a", said, containers=containers)(sim)
        sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}})
        owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter", "controller": True}]
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "dcgm-exporter-q8x2m", "namespace": "monitoring", "ownerReferences": owner},
                "spec": {"nodeName": "a", "containers": [{"name": "exporter", "image": "busybox", "ports": port}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "exporter", "ready": True}]},
            }
        )

    report = diagnosed(ONE, crowded)
    root = next(f for f in report.findings if f.root)
    assert (root.link, root.node) == ("exporter", "a")
    assert "pod monitoring/dcgm-exporter-q8x2m (dcgm-exporter) holds host port 9400 on a" in root.evidence
    assert "dcgm-exporter-q8x2m" in root.fix and "restart" not in root.fix


def test_a_diagnosis_works_out_each_pods_state_once_and_no_longer_than_it_runs() -> None:
    # Several links ask about the same operand pod; within a diagnosis the first answer serves them
    # all. The answers are by the pod object: an equal pod is another pod, and nothing is kept after.
    crashing = {
        "metadata": {"name": "plugin-a"},
        "status": {"containerStatuses": [{"name": "p", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    }
    twin = {**crashing, "metadata": {"name": "plugin-b"}}
    with answers_remembered():
        first = pod_state(crashing)
        assert pod_state(crashing) is first and first.status == "CrashLoopBackOff"
        assert pod_state(twin).name == "plugin-b"
    assert pod_state(crashing) is not first and pod_state(crashing) == first


def _crashing_release(sim: SimCluster, namespace: str, ds: str, image: str, container: str, log: str) -> None:
    """A DaemonSet of a chain component's own release in ``namespace``, named as its chart names it, with
    its pod on node ``a`` crash-looping and ``log`` as its container's log."""
    sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    template = {"spec": {"containers": [{"name": container, "image": image}]}}
    sim.cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": ds, "namespace": namespace},
            "spec": {"template": template},
        }
    )
    crash = {
        "name": container,
        "ready": False,
        "restartCount": 5,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
    }
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{ds}-x1",
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds}],
            },
            "spec": {"nodeName": "a", "containers": [{"name": container, "image": image}]},
            "status": {"phase": "Running", "containerStatuses": [crash]},
        }
    )
    sim.cluster.set_logs(f"{ds}-x1", namespace=namespace, container=container, text=log)


def test_nvidias_dra_kubelet_plugin_in_its_own_namespace_is_read_as_the_device_plugin_link() -> None:
    """NVIDIA's DRA driver (its chart's kubelet plugin DaemonSet, image nvcr.io/nvidia/k8s-dra-driver-gpu) beside
    the operator, whose device plugin is off: it is what announces the GPUs to the kubelet, so its crash is the
    device-plugin link's, found by its image whatever namespace and name it has."""
    sim = build(
        parse_scenario(
            "name: x\nstack: gpu-operator\npolicy: {devicePlugin: {enabled: false}}\nnodes:\n  - {name: a}\n"
        )
    )
    log = "E0101 00:00:00.000000 1 main.go:1] error: nvml init failed: ERROR_NO_PERMISSION\n"
    _crashing_release(
        sim,
        "nvidia-dra-driver-gpu",
        "nvidia-dra-driver-gpu-kubelet-plugin",
        "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.0",
        "gpus",
        log,
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.root)
    assert (found.link, found.node) == ("device-plugin", "a")
    assert "catalog: nvml.no-permission" in " ".join(found.evidence)
    assert any("nvidia-dra-driver-gpu-kubelet-plugin-x1" in e for e in found.evidence)
    assert "privileged" in found.fix


def test_the_device_plugin_charts_gfd_daemonset_is_gfd_though_it_runs_the_plugins_image() -> None:
    """NVIDIA/k8s-device-plugin's chart runs GFD from the plugin's own image (nvcr.io/nvidia/k8s-device-plugin)
    in a DaemonSet named <release>-gpu-feature-discovery: read by its name as GFD, not as a second plugin."""
    sim = build(
        parse_scenario("name: x\nstack: gpu-operator\npolicy: {gfd: {enabled: false}}\nnodes:\n  - {name: a}\n")
    )
    _crashing_release(
        sim,
        "gpu-tools",
        "nvdp-gpu-feature-discovery",
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
        "gpu-feature-discovery-ctr",
        "E0101 00:00:00.000000 1 main.go:1] nvml init failed: ERROR_NO_PERMISSION\n",
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.root)
    assert (found.link, found.node) == ("gfd", "a")
    assert any("nvdp-gpu-feature-discovery-x1" in e for e in found.evidence)


def test_a_dra_kubelet_plugin_kept_off_tainted_gpu_nodes_gets_tolerations_for_exactly_those_taints() -> None:
    """NVIDIA's DRA kubelet plugin installed in its own namespace without tolerations, on a cluster whose GPU
    nodes carry two NoSchedule taints (the operator's operands tolerate them; its device plugin is off): DESIRED 0, no pod, so the
    device-plugin link is missing; the fix patches that DaemonSet, in its namespace, to tolerate those taints."""
    taints = "[{key: nvidia.com/gpu, value: present, effect: NoSchedule}, {key: pool, value: gpu, effect: NoSchedule}]"
    tolerated = "[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}, {key: pool, operator: Exists}]"
    sim = build(
        parse_scenario(
            "name: x\nstack: gpu-operator\npolicy:\n  devicePlugin: {enabled: false}\n"
            f"  daemonsets: {{tolerations: {tolerated}}}\nnodes:\n"
            f"  - {{name: a, taints: {taints}}}\n"
        )
    )
    sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dra"}})
    image = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.0"
    sim.cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin", "namespace": "dra"},
            "spec": {"template": {"spec": {"containers": [{"name": "gpus", "image": image}]}}},
            "status": {"desiredNumberScheduled": 0, "currentNumberScheduled": 0, "numberReady": 0},
        }
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.root and f.link == "device-plugin")
    assert (found.id, found.node) == ("operand.not-scheduled", "a")
    assert found.action is not None and found.action.target == "dra/nvidia-dra-driver-gpu-kubelet-plugin"
    tolerations = found.action.changes["spec"]["template"]["spec"]["tolerations"]
    assert tolerations == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "operator": "Exists", "effect": "NoSchedule"},
    ]
