"""More classes of failure users report on the public trackers (issue 26), each on a small simulated cluster edited
the way the components leave it: the link the doctor names and the action that repairs. The report a class was read
from and the upstream source its facts stand on are named at each test."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import diagnosed, no_gpus

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
# kubelet.probe-failed) and pkg/kubelet/kuberuntime/kuberuntime_manager.go (the kill that follows); NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go (DriverSpec.StartupProbe, the only
# operand probe its ClusterPolicy sets) and assets/state-driver/0500_daemonset.yaml (its 60 s / 120 x 10 s default).

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
