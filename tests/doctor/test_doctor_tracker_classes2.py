"""More classes of failure users report on the public trackers (issue 26), each on a small simulated cluster edited
the way the components leave it: the link the doctor names and the action that repairs. The report a class was read
from and the upstream source its facts stand on are named at each test."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import crashing_pod, diagnosed, no_gpus
from test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, OPERATOR_DRA, dra_release

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


# -- a container killed by its own probe before it serves ----------------------------------------------------------
# Reports: NVIDIA/dcgm-exporter#393 (a dcgm-exporter DaemonSet with livenessProbe initialDelaySeconds 5 "Failed to pass
# the health check", its log normal up to "DCGM successfully initialized!"), NVIDIA/gpu-monitoring-tools#180 (the same
# crash of the Helm-installed exporter with a clean log). Source: NVIDIA/dcgm-exporter
# deployment/templates/daemonset.yaml (the delay raised from 5 to 45 s in 2.2.9-2.4.1, "Bump liveness/readiness delay
# for resiliency on most systems"; set by livenessProbe.* values from chart 4.2.0, deployment/values.yaml@4.2.3-4.2.0);
# the kubelet's prober, kubernetes pkg/kubelet/prober/prober.go (Unhealthy "%s probe failed: %s", catalog
# kubelet.probe-failed) and pkg/kubelet/kuberuntime/kuberuntime_manager.go (the kill that follows);
# NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go (DriverSpec.StartupProbe, the only operand probe its
# ClusterPolicy sets) and assets/state-driver/0500_daemonset.yaml (its 60 s / 120 x 10 s default). The driver's case
# is the same mechanism read from that source; no tracker report of it was found to cite.

EXPORTER_LOG = (
    'time="2024-09-26T08:00:00Z" level=info msg="Starting dcgm-exporter"\n'
    'time="2024-09-26T08:00:02Z" level=info msg="DCGM successfully initialized!"\n'
    'time="2024-09-26T08:00:03Z" level=info msg="Collecting DCP Metrics"\n'
)
REFUSED = 'Get "http://10.42.0.17:9400/health": dial tcp 10.42.0.17:9400: connect: connection refused'


def _killed_by_probe(prefix: str, container: str, kind: str, probe: dict[str, Any], said: str) -> Any:
    """An edit: ``container`` of the pod ``prefix``-* (and its DaemonSet's template) runs ``probe`` as its ``kind``
    probe, which failed with ``said``; the kubelet killed it for that (Killing Event) and it restarts."""

    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith(prefix))
        ns, ds_name = namespace_of(pod), pod["metadata"]["ownerReferences"][0]["name"]
        ds = next(d for d in sim.cluster.list(DAEMONSET) if name_of(d) == ds_name and namespace_of(d) == ns)
        for obj, kind_of in ((ds["spec"]["template"], DAEMONSET), (pod, POD)):
            spec = copy.deepcopy(obj["spec"])
            next(c for c in spec["containers"] if c["name"] == container)[f"{kind}Probe"] = probe
            patch = {"spec": {"template": {"spec": spec}}} if kind_of is DAEMONSET else {"spec": spec}
            sim.cluster.patch(
                kind_of, name=name_of(ds) if kind_of is DAEMONSET else name_of(pod), namespace=ns, patch=patch
            )
        status = copy.deepcopy(pod["status"])
        for cs in status["containerStatuses"]:
            if cs["name"] == container:
                cs.update(
                    ready=False,
                    restartCount=7,
                    state={"waiting": {"reason": "CrashLoopBackOff"}},
                    lastState={"terminated": {"reason": "Error", "exitCode": 137}},
                )
        sim.cluster.patch_status(POD, name=name_of(pod), namespace=ns, status=status)
        for n, (reason, message) in enumerate(
            (
                ("Unhealthy", f"{kind.capitalize()} probe failed: {said}"),
                ("Killing", f"Container {container} failed {kind} probe, will be restarted"),
            )
        ):
            sim.cluster.create(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{name_of(pod)}.{n}", "namespace": ns},
                    "involvedObject": {
                        "kind": "Pod",
                        "name": name_of(pod),
                        "namespace": ns,
                        "fieldPath": f"spec.containers{{{container}}}",
                    },
                    "type": "Warning" if reason == "Unhealthy" else "Normal",
                    "reason": reason,
                    "message": message,
                    "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
                }
            )

    return edit


def _exporter_chart(chart: str, said: str = REFUSED, log: str = EXPORTER_LOG) -> Report:
    """dcgm-exporter's own Helm release (chart ``chart``) beside the standalone plugin, killed by its liveness probe."""
    probe = {"httpGet": {"path": "/health", "port": 9400}, "initialDelaySeconds": 5, "periodSeconds": 5}
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        {
            "do": "add-daemonset",
            "namespace": "monitoring",
            "name": "dcgm-exporter",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8-3.6.0-ubuntu22.04",
            "labels": {
                "app.kubernetes.io/name": "dcgm-exporter",
                "app.kubernetes.io/instance": "dcgm-exporter",
                "helm.sh/chart": chart,
            },
            "containers": ["exporter"],
            "nodes": ["h"],
        },
        _killed_by_probe("dcgm-exporter", "exporter", "liveness", probe, said),
        {"do": "pod", "daemonset": "dcgm-exporter", "node": "h", "logs": {"exporter": log}},
    )


def test_an_exporter_killed_by_its_liveness_probe_before_it_serves_gets_the_probes_delay_raised() -> None:
    (root,) = _roots(_exporter_chart("dcgm-exporter-3.6.0"))
    assert (root.link, root.node) == ("exporter", "h")
    assert "catalog: kubelet.probe-failed (kubernetes/kubernetes " in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "monitoring/dcgm-exporter"
    container = {"name": "exporter", "livenessProbe": {"initialDelaySeconds": 45}}
    assert root.action.changes == {"spec": {"template": {"spec": {"containers": [container]}}}}
    # A merge patch would replace the template's containers with this one: the rendered patch merges them by name.
    assert "patch ds dcgm-exporter --type strategic" in root.fix
    # The chart before 4.2.0 renders fixed probes: the release to move to, then its value.
    assert "--version 4.2.0 or later" in root.fix and "--set livenessProbe.initialDelaySeconds=45" in root.fix


def test_on_a_chart_with_probe_values_the_helm_value_keeps_it() -> None:
    (root,) = _roots(_exporter_chart("dcgm-exporter-4.2.0"))
    assert "--set livenessProbe.initialDelaySeconds=45, so the next upgrade keeps it" in root.fix
    assert "--version" not in root.fix


def test_a_probe_that_timed_out_gets_a_longer_timeout_not_a_longer_delay() -> None:
    said = 'Get "http://10.42.0.17:9400/health": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
    (root,) = _roots(_exporter_chart("dcgm-exporter-4.2.0", said=said))
    assert root.action is not None
    container = root.action.changes["spec"]["template"]["spec"]["containers"][0]
    assert container == {"name": "exporter", "livenessProbe": {"timeoutSeconds": 5}}


def test_an_exporter_whose_log_names_an_error_is_that_error_not_its_probe() -> None:
    log = (
        EXPORTER_LOG
        + 'time="2024-09-26T08:00:04Z" level=fatal msg="Error starting nv-hostengine: DCGM initialization error"\n'
    )
    (root,) = _roots(_exporter_chart("dcgm-exporter-4.2.0", log=log))
    assert root.link == "exporter" and "livenessProbe" not in root.fix
    assert "kubelet.probe-failed" not in " ".join(root.evidence)


def test_an_operator_driver_cut_short_by_its_startup_probe_gets_the_policys_startup_probe_raised() -> None:
    probe = {
        "exec": {"command": ["sh", "/usr/local/bin/startup-probe.sh"]},
        "initialDelaySeconds": 60,
        "failureThreshold": 120,
        "periodSeconds": 10,
        "timeoutSeconds": 60,
    }
    log = "Installing NVIDIA driver kernel modules...\nCompiling NVIDIA driver kernel modules...\n"
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        _killed_by_probe("nvidia-driver-daemonset", "nvidia-driver-ctr", "startup", probe, ""),
        no_gpus("n1"),
        {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "n1", "logs": {"nvidia-driver-ctr": log}},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"driver": {"startupProbe": {"failureThreshold": 240}}}}
    assert "failureThreshold 120" in root.cause


def test_the_operators_exporter_whose_probe_no_policy_field_sets_is_not_given_a_patch_the_operator_reverts() -> None:
    probe = {"httpGet": {"path": "/health", "port": 9400}, "initialDelaySeconds": 45, "periodSeconds": 5}
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: g}\n",
        _killed_by_probe("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "liveness", probe, REFUSED),
        {"do": "pod", "daemonset": "nvidia-dcgm-exporter", "node": "g", "logs": {"nvidia-dcgm-exporter": EXPORTER_LOG}},
    )
    (root,) = _roots(report)
    assert root.link == "exporter" and "livenessProbe" not in root.fix


# -- a GPU component without a GPU request, on a runtime that ignores NVIDIA_VISIBLE_DEVICES unprivileged -----------
# Reports: bottlerocket-os/bottlerocket#3992 (DCGM "will not run" on the NVIDIA variants; the reporter confirms it runs
# with CAP_SYS_ADMIN, the maintainers add the runtime setting), bottlerocket-os/bottlerocket#3849 (GPUs gone from
# unprivileged pods since 1.19). Source: bottlerocket-os/bottlerocket CHANGELOG.md@v1.19.5 (1.19.2: "Enable NVIDIA
# GPU isolation using volume mounts"), bottlerocket.dev settings.nvidia-container-runtime
# (visible-devices-envvar-when-unprivileged, default false); NVIDIA/nvidia-container-toolkit
# cmd/nvidia-ctk-installer/toolkit/toolkit.go (ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED); the exporter's
# words, catalog dcgm.init-error (NVIDIA/go-dcgm).

NO_GPU_LOG = (
    "Warning #2: dcgm-exporter doesn't have sufficient privileges to expose profiling metrics. To get profiling "
    "metrics with dcgm-exporter, use --cap-add SYS_ADMIN\n"
    'time="2024-05-29T10:00:00Z" level=info msg="Starting dcgm-exporter"\n'
    "Error: Failed to initialize NVML\n"
    'time="2024-05-29T10:00:00Z" level=fatal msg="Error starting nv-hostengine: DCGM initialization error"\n'
)


# Bottlerocket's NVIDIA variants run their own device plugin as a host service, so an operator there runs none of its
# own (a second one is a fault of its own, device-plugin.beside-host-plugin).
def _bottlerocket(
    os_image: str, policy: str = "{driver: {enabled: false}, toolkit: {enabled: false}, devicePlugin: {enabled: false}}"
) -> str:
    return (
        f"name: t\nstack: gpu-operator\npolicy: {policy}\nnodes:\n"
        f"  - name: b1\n    osImage: {os_image}\n    kernel: 6.1.90\n    hostDriver: 535.161.07\n"
    )


def _own_exporter(security: dict[str, Any]) -> Any:
    """An edit: a dcgm-exporter chart release of its own in namespace monitoring on b1, its container run with
    ``security``, crash-looping with NO_GPU_LOG."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            if name_of(pod).startswith("dcgm-exporter"):
                spec = copy.deepcopy(pod["spec"])
                spec["containers"][0]["securityContext"] = security
                sim.cluster.patch(POD, name=name_of(pod), namespace=namespace_of(pod), patch={"spec": spec})

    return edit


def _exporter_release(os_image: str, security: dict[str, Any]) -> Report:
    return diagnosed(
        _bottlerocket(os_image),
        {"do": "delete-daemonset", "name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"},
        {
            "do": "add-daemonset",
            "namespace": "monitoring",
            "name": "dcgm-exporter",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.0-ubuntu22.04",
            "labels": {"app.kubernetes.io/name": "dcgm-exporter", "helm.sh/chart": "dcgm-exporter-3.4.0"},
            "containers": ["exporter"],
            "nodes": ["b1"],
        },
        _own_exporter(security),
        {
            "do": "pod",
            "daemonset": "dcgm-exporter",
            "node": "b1",
            "containers": [{"name": "exporter", "restarts": 5, "state": {"waiting": "CrashLoopBackOff"}}],
            "logs": {"exporter": NO_GPU_LOG},
        },
    )


def test_an_exporter_without_sys_admin_on_bottlerocket_gets_the_capability_not_a_driver_mount() -> None:
    report = _exporter_release("Bottlerocket OS 1.20.0 (aws-k8s-1.29-nvidia)", {"runAsUser": 0})
    (root,) = [f for f in _roots(report) if f.link == "exporter"]
    assert root.node == "b1" and "osImage Bottlerocket OS 1.20.0 (aws-k8s-1.29-nvidia)" in root.evidence
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    grant = {"name": "exporter", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
    assert root.action.changes == {"spec": {"template": {"spec": {"containers": [grant]}}}}
    assert "visible-devices-envvar-when-unprivileged=true" in root.fix and "hostPath" not in root.fix


def test_before_bottlerocket_isolated_gpus_or_with_sys_admin_it_is_not_this() -> None:
    for os_image, security in (
        ("Bottlerocket OS 1.19.0 (aws-k8s-1.29-nvidia)", {"runAsUser": 0}),
        ("Bottlerocket OS 1.20.0 (aws-k8s-1.29-nvidia)", {"capabilities": {"add": ["SYS_ADMIN"]}}),
    ):
        (root,) = [f for f in _roots(_exporter_release(os_image, security)) if f.link == "exporter"]
        assert "SYS_ADMIN" not in str(root.action) and "visible-devices-envvar" not in root.fix


def test_the_operators_exporter_on_bottlerocket_gets_the_nodes_runtime_setting() -> None:
    report = diagnosed(
        _bottlerocket("Bottlerocket OS 1.26.2 (aws-k8s-1.31-nvidia)"),
        crashing_pod("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "b1", NO_GPU_LOG),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "b1")
    assert root.action is not None and root.action.op is FixOp.NODE and root.action.target == "b1"
    assert "apiclient set nvidia-container-runtime.visible-devices-envvar-when-unprivileged=true" in root.fix


def test_an_operator_toolkit_told_to_ignore_the_variable_gets_it_accepted_again() -> None:
    env = "[{name: ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, value: 'false'}]"
    report = diagnosed(
        f"name: t\nstack: gpu-operator\npolicy: {{toolkit: {{env: {env}}}}}\nnodes:\n  - {{name: n1}}\n",
        crashing_pod("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "n1", NO_GPU_LOG),
    )
    (root,) = _roots(report)
    assert root.link == "exporter" and root.action is not None and root.action.op is FixOp.PATCH_POLICY
    accepted = {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "true"}
    assert root.action.changes == {"spec": {"toolkit": {"env": [accepted]}}}


# -- NVIDIA's DRA kubelet plugin killed by its liveness probe before its health check serves ------------------------
# Report: NVIDIA/k8s-dra-driver-gpu#773 (the plugin killed within 30 s of its start while it discovers devices and
# writes CDI specs; repaired by the startup probe of #774). Source: NVIDIA/k8s-dra-driver-gpu
# deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml@v25.8.0 (gRPC liveness probe, 3 x 10 s, no startup
# probe) and @v25.8.1 ("Add startup probe to compute-domain and gpu kubelet plugins"); releases.yaml
# nvidia-dra-driver-gpu-chart.liveness-before-healthcheck.


def _dra_plugin_killed(chart: str) -> Report:
    probe = {"grpc": {"port": 51515, "service": "liveness"}, "failureThreshold": 3, "periodSeconds": 10}
    # The kubelet's gRPC prober where nothing serves the port yet (kubernetes pkg/probe/grpc/grpc.go@v1.34.4).
    said = 'timeout: failed to connect service ":51515" within 1s: context deadline exceeded'

    def labelled(sim: SimCluster) -> None:
        sim.cluster.patch(
            DAEMONSET,
            name=DRA_DS,
            namespace=DRA_NS,
            patch={"metadata": {"labels": {"helm.sh/chart": chart}}},
        )

    return diagnosed(
        OPERATOR_DRA,
        dra_release("n1", DONE, CRASH, "/run/nvidia/driver"),
        labelled,
        _killed_by_probe(DRA_DS, "gpus", "liveness", probe, said),
    )


def test_a_dra_plugin_killed_by_its_liveness_probe_on_chart_25_8_0_moves_to_the_release_with_a_startup_probe() -> None:
    (root,) = _roots(_dra_plugin_killed("nvidia-dra-driver-gpu-25.8.0"))
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "release: nvidia-dra-driver-gpu-chart.liveness-before-healthcheck" in " ".join(root.evidence)
    assert f"-n {DRA_NS} --version 25.8.1 --reuse-values" in root.fix
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    container = root.action.changes["spec"]["template"]["spec"]["containers"][0]
    assert container == {"name": "gpus", "livenessProbe": {"initialDelaySeconds": 45}}


def test_on_a_chart_with_the_startup_probe_the_probe_itself_is_raised() -> None:
    (root,) = _roots(_dra_plugin_killed("nvidia-dra-driver-gpu-25.12.0"))
    assert "--version 25.8.1" not in root.fix and "--set livenessProbe.initialDelaySeconds=45" in root.fix
