"""Pods of a RuntimeClass whose handler the node's containerd lacks, on a real kubelet (v1.37.2, containerd v2:
peers/node.py).

This is the state of NVIDIA/gpu-operator#730: the nvidia RuntimeClass exists, containerd has no "nvidia" runtime, and
every operand pod of that class waits for a sandbox that never comes. The simulator writes it (``sim.shapes.no_sandbox``
and ``sandbox_event``) and the doctor reads it (``doctor.pods.sandbox_created``, the toolkit link's
``runtime_evidence``); both were written from the kubelet's source. Here the real kubelet and containerd make it:

- the simulator's pod status and Event agree with what they write;
- the doctor, given the operand pods' status as they write it, names the toolkit's missing runtime on that node, from
  their Event and, once the API server has dropped the Events (``--event-ttl``, one hour), from the pods' state alone.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from gpuchain.doctor.diagnose import run_doctor
from gpuchain.doctor.model import Severity
from gpuchain.doctor.pods import sandbox_created
from gpuchain.kube import EVENT, POD
from gpuchain.kube.objects import READY_TO_START, Obj
from gpuchain.sim import build, load_scenario
from gpuchain.sim.shapes import no_sandbox, sandbox_event
from peers.node import BUSYBOX_IMAGE, POD_TOLERATIONS, RealNode, busybox_pod, wait_for

SCENARIO = "op-runtime-not-configured"
"""The simulator's cluster with this state: node gpu-kops's containerd has no nvidia runtime."""
BROKEN_NODE = "gpu-kops"
HANDLER = "nvidia"
RUNTIME_CLASSES = "/apis/node.k8s.io/v1/runtimeclasses"
NAMESPACE = "default"


def _operand_pods(sim: Any) -> list[Obj]:
    """The simulated operand pods of the nvidia RuntimeClass on the broken node."""
    pods = [
        p
        for p in sim.cluster.list(POD)
        if p["spec"].get("nodeName") == BROKEN_NODE and p["spec"].get("runtimeClassName") == HANDLER
    ]
    assert pods, f"{SCENARIO}: no pod of RuntimeClass {HANDLER} on {BROKEN_NODE}"
    return pods


def _twin(node: RealNode, pod: Obj) -> Obj:
    """A pod on the real node with ``pod``'s RuntimeClass and container names, busybox in each container."""
    spec = pod["spec"]
    inits = [
        {"name": c["name"], "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["true"]}
        for c in spec.get("initContainers") or []
    ]
    mains = [
        {"name": c["name"], "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
        for c in spec["containers"]
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["metadata"]["name"]},
        "spec": {
            "nodeName": node.name,
            "runtimeClassName": HANDLER,
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "tolerations": POD_TOLERATIONS,
            "initContainers": inits,
            "containers": mains,
        },
    }


def _events_of(node: RealNode, name: str) -> list[Obj]:
    selector = f"involvedObject.name={name},involvedObject.kind=Pod"
    found = node.api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector={selector}")
    return list(found.get("items") or [])


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def _shape(status: Obj) -> dict[str, Any]:
    """What of a pod's status the doctor and the held-out harness read: the phase, the conditions in their order with
    status, reason and message, each container's state with its reason, ready flag and restart count."""

    def container(cs: Obj) -> tuple[Any, ...]:
        ((state, detail),) = (cs.get("state") or {"waiting": {}}).items()
        return (state, (detail or {}).get("reason"), cs.get("ready"), cs.get("restartCount", 0))

    return {
        "phase": status.get("phase"),
        "conditions": [
            (c["type"], c["status"], c.get("reason"), c.get("message")) for c in status.get("conditions") or []
        ],
        "initContainerStatuses": {c["name"]: container(c) for c in status.get("initContainerStatuses") or []},
        "containerStatuses": {c["name"]: container(c) for c in status.get("containerStatuses") or []},
    }


@pytest.fixture(scope="module")
def written(node: RealNode) -> Iterator[tuple[list[Obj], dict[str, list[Obj]], Obj, list[Obj]]]:
    """The simulator's operand pods, the real kubelet's status and Events for their twins on the real node, and a
    pod of the default runtime beside them."""
    sim = build(load_scenario(SCENARIO))
    pods = _operand_pods(sim)
    node.api.request(
        "POST",
        RUNTIME_CLASSES,
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": HANDLER}, "handler": HANDLER},
    )
    witness = busybox_pod("default-runtime-witness", "sleep 3600", nodeName=node.name, restartPolicy="Always")
    names = [p["metadata"]["name"] for p in pods]
    try:
        node.create_pod(NAMESPACE, witness)
        for pod in pods:
            node.create_pod(NAMESPACE, _twin(node, pod))

        def settled() -> list[Obj] | None:
            real = [node.get_pod(NAMESPACE, n) for n in names]
            if all(_condition(p, READY_TO_START) and _events_of(node, p["metadata"]["name"]) for p in real):
                return real
            return None

        real = wait_for("the twins' sandbox condition and Events", settled, 90, 0.5)
        events = {n: _events_of(node, n) for n in names}
        running = node.wait_pod_phase(NAMESPACE, "default-runtime-witness", ("Running",))
        yield pods, events, running, real
    finally:
        for name in [*names, "default-runtime-witness"]:
            node.delete_pod(NAMESPACE, name)
        node.api.request("DELETE", f"{RUNTIME_CLASSES}/{HANDLER}")


def test_the_kubelet_writes_the_simulators_state_for_a_pod_without_a_sandbox(written) -> None:
    pods, _, witness, real = written
    for pod, got in zip(pods, real, strict=True):
        spec = pod["spec"]
        simulated = no_sandbox(
            [c["name"] for c in spec.get("initContainers") or []],
            mains=[c["name"] for c in spec["containers"]],
            ip="10.0.0.1",
        )
        assert _shape(got["status"]) == _shape(simulated), got["metadata"]["name"]
        assert sandbox_created(got) is False
    assert sandbox_created(witness) is True
    assert _condition(witness, READY_TO_START)["status"] == "True"


def test_the_kubelets_sandbox_event_is_the_simulators(node: RealNode, written) -> None:
    pods, events, _, _ = written
    for pod in pods:
        name = pod["metadata"]["name"]
        failed = [e for e in events[name] if e["reason"] == "FailedCreatePodSandBox"]
        assert failed, (name, [(e["reason"], e["message"]) for e in events[name]])
        simulated = sandbox_event(
            NAMESPACE, pod=pod, n=0, runtime=node.get_node()["status"]["nodeInfo"]["containerRuntimeVersion"]
        )
        sandbox = re.compile(r'sandbox "[0-9a-f]{64}"')
        assert {(e["type"], e["source"].get("component"), sandbox.sub("", e["message"])) for e in failed} == {
            (simulated["type"], simulated["source"]["component"], sandbox.sub("", simulated["message"]))
        }


def _with_real_status(pods: list[Obj], real: list[Obj], events: dict[str, list[Obj]] | None) -> Any:
    """The simulated cluster with the broken node's operand pods in the real kubelet's status; its sandbox Events
    replaced by the real ones (``events``), or gone (None)."""
    sim = build(load_scenario(SCENARIO))
    for pod, got in zip(pods, real, strict=True):
        meta = pod["metadata"]
        old = sim.cluster.get(POD, name=meta["name"], namespace=meta["namespace"])["status"]
        status = {**{k: None for k in old}, **copy.deepcopy(got["status"])}
        sim.cluster.patch_status(POD, name=meta["name"], namespace=meta["namespace"], status=status)
    for ev in sim.cluster.list(EVENT):
        if ev.get("reason") == "FailedCreatePodSandBox":
            sim.cluster.delete(EVENT, name=ev["metadata"]["name"], namespace=ev["metadata"]["namespace"])
    for pod in pods if events is not None else []:
        for ev in events[pod["metadata"]["name"]]:
            ev = {**copy.deepcopy(ev), "apiVersion": "v1", "kind": "Event"}  # a list's items carry neither
            ev["metadata"] = {"name": ev["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}
            ev["involvedObject"] = {**ev["involvedObject"], "namespace": pod["metadata"]["namespace"]}
            sim.cluster.create(ev)
    return sim


@pytest.mark.parametrize("with_events", [True, False], ids=["with-events", "events-expired"])
def test_the_doctor_names_the_missing_runtime_from_what_the_kubelet_wrote(written, with_events: bool) -> None:
    pods, events, _, real = written
    sim = _with_real_status(pods, real, events if with_events else None)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    roots = [f for f in report.findings if f.severity == Severity.ERROR and f.root]
    assert [(f.id, f.node) for f in roots] == [("toolkit.runtime-not-configured", BROKEN_NODE)], [
        (f.id, f.node, f.evidence) for f in report.findings if f.severity != Severity.INFO
    ]
