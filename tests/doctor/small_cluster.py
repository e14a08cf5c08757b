"""The small cluster the doctor's rule and fix tests start from: a scenario of a few nodes on one stack,
edited the way the real components would leave it, then diagnosed as on a live cluster (the list calls,
then the logs the doctor asks for, through the port)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sim.heldout import harness
from sim.heldout9 import harness as ninth

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

#: A change to the built cluster: a held-out edit (tests/sim/heldout's format: pod states, logs, labels)
#: or a function of the simulation.
Edit = Mapping[str, Any] | Callable[[SimCluster], object]


def built(scenario: str, *edits: Edit) -> SimCluster:
    """``scenario`` (its YAML text) built, after ``edits`` in order."""
    sim = build(parse_scenario(scenario))
    for edit in edits:
        if callable(edit):
            edit(sim)
        else:
            harness._apply(sim.cluster, dict(edit))
    return sim


def diagnosed(scenario: str, *edits: Edit) -> Report:
    """The doctor's report on ``scenario`` (its YAML text) built, after ``edits`` in order."""
    sim = built(scenario, *edits)
    return run_doctor(sim.cluster, reader=sim.read_log)


def unschedulable(prefix: str, node: str, message: str, **spec: Any) -> Callable[[SimCluster], None]:
    """An edit: the DaemonSet pod ``prefix``-* of ``node`` Pending as kube-scheduler leaves it (no nodeName, the
    DaemonSet controller's matchFields affinity for its node, PodScheduled=False Unschedulable with ``message``),
    its spec merged with ``spec`` (e.g. containers)."""

    def edit(sim: SimCluster) -> None:
        pod = next(
            p
            for p in sim.cluster.list(POD)
            if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName") == node
        )
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        patch = {"nodeName": None, "affinity": {"nodeAffinity": required}, **spec}
        sim.cluster.patch(POD, name=name, patch={"spec": patch}, namespace=ns)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        status = {
            "phase": "Pending",
            "containerStatuses": None,
            "initContainerStatuses": None,
            "conditions": [condition],
        }
        sim.cluster.patch_status(POD, name=name, status=status, namespace=ns)

    return edit


def pending_gpu_pod(gpus: int, message: str, name: str = "big") -> dict[str, Any]:
    """A pod (to ``create``) in namespace ml asking for ``gpus`` nvidia.com/gpu that kube-scheduler left Pending:
    PodScheduled=False Unschedulable with ``message``, no node."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending", "conditions": [condition]},
    }


def no_gpus(node: str) -> dict[str, Any]:
    """An edit: ``node`` announces no nvidia.com/gpu at all (no plugin ever registered there)."""
    return {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}


def crash_looping(container: str, restarts: int = 5) -> dict[str, Any]:
    """A container (held-out format) that exits at every start: waiting CrashLoopBackOff, last run Error."""
    return {
        "name": container,
        "restarts": restarts,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }


def plugin_pod(node: str, container: Mapping[str, Any], log: str | None = None) -> dict[str, Any]:
    """An edit: the standalone plugin's pod on ``node`` with its ``nvidia-device-plugin-ctr`` in the state
    ``container`` gives (held-out format) and, where given, ``log`` as its log."""
    edit: dict[str, Any] = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": node,
        "containers": [dict(container)],
    }
    if log is not None:
        edit["logs"] = {"nvidia-device-plugin-ctr": log}
    return edit


def crashing_pod(daemonset: str, container: str, node: str, log: str, restarts: int = 5) -> dict[str, Any]:
    """An edit: ``daemonset``'s pod on ``node`` whose ``container`` exits at every start (``crash_looping``),
    with ``log`` as that container's log: the component's own words, which its tests read as its own."""
    return {
        "do": "pod",
        "daemonset": daemonset,
        "node": node,
        "containers": [crash_looping(container, restarts)],
        "logs": {container: log},
    }


def toolkit_pod(node: str, log: str, restarts: int = 5) -> dict[str, Any]:
    """An edit: the GPU Operator's toolkit pod on ``node`` crash-looping with ``log`` (`crashing_pod`)."""
    return crashing_pod("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", node, log, restarts)


def gke_installer_on(*nodes: str) -> dict[str, Any]:
    """An edit: GKE's driver installer DaemonSet (kube-system/nvidia-driver-installer, cos-gpu-installer v2.1.0)
    with a pod on each of ``nodes``."""
    return {
        "do": "add-daemonset",
        "namespace": "kube-system",
        "name": "nvidia-driver-installer",
        "image": "gcr.io/cos-cloud/cos-gpu-installer:v2.1.0",
        "labels": {"k8s-app": "nvidia-driver-installer"},
        "containers": ["pause"],
        "nodes": list(nodes),
    }


def plugin_image(image: str) -> Callable[[SimCluster], None]:
    """An edit: the standalone plugin's pods run ``image``."""
    return pod_image("nvidia-device-plugin", image)


def pod_image(prefix: str, image: str) -> Callable[[SimCluster], None]:
    """An edit: the first container of the pods ``prefix``-* runs ``image``."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            if name_of(pod).startswith(prefix):
                spec = copy.deepcopy(pod["spec"])
                spec["containers"][0]["image"] = image
                sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    return edit


def refused_at_start(prefix: str, message: str) -> Callable[[SimCluster], None]:
    """An edit: the pod ``prefix``-* whose first container the runtime refused to start, as the kubelet shows it
    (waiting CrashLoopBackOff, last state terminated StartError, exit 128, with the runtime's ``message``)."""

    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith(prefix))
        status = copy.deepcopy(pod["status"])
        status["containerStatuses"][0].update(
            ready=False,
            restartCount=3,
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            lastState={"terminated": {"reason": "StartError", "exitCode": 128, "message": message}},
        )
        sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))

    return edit


def diagnosed_case(tmp_path: Path, doc: str) -> Report:
    """A whole held-out case file (heldout9's format: ``base``, ``edits``, a placeholder ``expect``) written to
    ``tmp_path`` and diagnosed with the logs its edits give, for rules whose state the scenario schema cannot say."""
    path = tmp_path / "case.yaml"
    path.write_text(doc)
    case = ninth.load(path)
    return run_doctor(case.cluster, reader=case.read_log)
