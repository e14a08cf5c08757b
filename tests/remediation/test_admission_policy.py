"""The chart's ValidatingAdmissionPolicy, evaluated with a CEL interpreter (cel-python) on the
admission requests gpu-health, the remediator, the kubelet and an attacker would send.

Without an API server this checks the policy's logic quickly; the request shape (userInfo.extra
``authentication.kubernetes.io/node-name``, Kubernetes >= 1.30, KEP-4193) follows the
Kubernetes documentation of service account token claims. The issue-19 real-peer suite runs the
same policy on a kube-apiserver (tests/peers/test_node_write_policy.py), which is the judge where
the two differ.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import celpy
import pytest

from gpuchain.remediation.admission import POLICY_NAME

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

NS = "gpu-operator"
AGENT = f"system:serviceaccount:{NS}:gpuchain-gpu-health"
CLAIM = "authentication.kubernetes.io/node-name"
FAULTS = "gpuchain.io/gpu-faults"


def _policy(remediation: dict[str, Any] | None = None) -> dict[str, Any]:
    docs = render({"remediation": {"enabled": True, **(remediation or {})}})
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == POLICY_NAME)


ENV = celpy.Environment()
Compiled = tuple[list[tuple[str, Any]], list[tuple[Any, str]]]


def _compile(policy: dict[str, Any]) -> Compiled:
    variables = [(v["name"], ENV.program(ENV.compile(v["expression"]))) for v in policy["spec"]["variables"]]
    validations = [(ENV.program(ENV.compile(v["expression"])), v.get("message", v.get("messageExpression", ""))) for v in policy["spec"]["validations"]]  # fmt: skip
    return variables, validations


POLICY = _policy()
VARIABLES, VALIDATIONS = _compile(POLICY)


def admit(
    user: str,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    node_claim: str | None = None,
    sub: str = "",
    compiled: Compiled | None = None,
) -> list[str]:
    """The messages of the validations that deny the request (empty: admitted); ``compiled``: another
    rendering of the policy than the default one."""
    variables_of, validations_of = compiled or (VARIABLES, VALIDATIONS)
    rules = POLICY["spec"]["matchConstraints"]["resourceRules"][0]
    operation = "CREATE" if old is None else "UPDATE"
    assert operation in rules["operations"] and ("nodes/status" if sub else "nodes") in rules["resources"]
    extra = {CLAIM: [node_claim]} if node_claim else {}
    request: dict[str, Any] = {"operation": operation, "userInfo": {"username": user, "extra": extra}}
    if sub:  # the API server leaves subResource out for the main resource (json omitempty)
        request["subResource"] = sub
    context: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }
    variables: dict[str, Any] = {}
    for name, program in variables_of:
        context["variables"] = celpy.json_to_cel({}) if not variables else celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(name)] = program.evaluate(context)
    context["variables"] = celpy.celtypes.MapType(variables)
    denied = []
    for program, message in validations_of:
        try:
            ok = bool(program.evaluate(context))
        except celpy.CELEvalError as exc:  # an evaluation error denies (failurePolicy: Fail)
            ok, message = False, f"{message} (error: {exc})"
        if not ok:
            denied.append(message)
    return denied


def node(name: str, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}, "annotations": annotations or {}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }
    obj.update(extra)
    return obj


def changed(obj: dict[str, Any], fn: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    fn(out)
    return out


def gpu_unhealthy(n: dict[str, Any]) -> None:
    n["status"]["conditions"].append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError"})


OLD = node("node-a", {"node.alpha.kubernetes.io/ttl": "0"})


def test_gpu_health_may_publish_on_its_own_node() -> None:
    new = changed(OLD, lambda n: n["metadata"]["annotations"].update({FAULTS: "[]", "gpuchain.io/gpu-pods": "{}"}))
    assert admit(AGENT, OLD, new, "node-a") == []
    assert admit(AGENT, OLD, changed(OLD, gpu_unhealthy), "node-a", sub="status") == []


def test_gpu_health_may_not_write_another_node() -> None:
    new = changed(OLD, lambda n: n["metadata"]["annotations"].update({FAULTS: "[]"}))
    (message,) = admit(AGENT, OLD, new, "node-b")
    assert "'gpu-health may write only the Node its pod runs on" in message
    assert admit(AGENT, OLD, changed(OLD, gpu_unhealthy), "node-b", sub="status")


def test_gpu_health_token_without_a_node_claim_is_refused() -> None:
    new = changed(OLD, lambda n: n["metadata"]["annotations"].update({FAULTS: "[]"}))
    denied = admit(AGENT, OLD, new, None)
    assert any("names no node" in m for m in denied)


@pytest.mark.parametrize(
    "edit",
    [
        lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.deploy.device-plugin": "false"}),
        lambda n: n["metadata"]["annotations"].update({"gpuchain.io/cordoned-by": "remediator"}),
        lambda n: n["metadata"]["annotations"].pop("node.alpha.kubernetes.io/ttl"),
        lambda n: n["spec"].update({"taints": [{"key": "x", "effect": "NoSchedule"}]}),
        lambda n: n["spec"].update({"unschedulable": True}),
        lambda n: n["metadata"].update({"finalizers": ["example.com/keep"]}),
        lambda n: n["metadata"].update({"ownerReferences": [{"kind": "ConfigMap", "name": "gone", "uid": "0"}]}),
    ],
)
@pytest.mark.parametrize("sub", ["", "status"])
def test_gpu_health_may_change_nothing_else_on_its_node(edit: Any, sub: str) -> None:
    """The same on nodes and nodes/status: the status subresource lets metadata through too."""
    (message,) = admit(AGENT, OLD, changed(OLD, edit), "node-a", sub=sub)
    assert message == ONLY_HEALTH


ONLY_HEALTH = (
    "on its Node gpu-health may change only the gpuchain.io/gpu-faults, gpu-pods, gpu-loop, gpu-quarantine"
    " and reboot-requested annotations and the GPUHealthy, GPURebootRequired and GPUReady conditions,"
    " and remove its startup taint"
)


@pytest.mark.parametrize(
    "edit",
    [
        lambda n: n["status"]["conditions"][0].update({"status": "False"}),
        lambda n: n["status"].update({"allocatable": {"nvidia.com/gpu": "0"}}),
        lambda n: n["status"].update({"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}),
    ],
)
def test_gpu_health_may_change_no_other_status(edit: Any) -> None:
    (message,) = admit(AGENT, OLD, changed(OLD, edit), "node-a", sub="status")
    assert message == ONLY_HEALTH


def test_gpu_health_may_not_create_nodes() -> None:
    assert any("may not create Nodes" in m for m in admit(AGENT, None, node("node-a"), "node-a"))


@pytest.mark.parametrize(
    "user", ["system:serviceaccount:gpu-operator:gpuchain-remediator", "system:node:node-a", "kubernetes-admin"]
)
def test_nobody_else_may_write_gpu_health(user: str) -> None:
    forged = changed(OLD, lambda n: n["metadata"]["annotations"].update({FAULTS: '[{"uuid": "GPU-1"}]'}))
    (message,) = admit(user, OLD, forged, "node-a" if user.startswith("system:node") else None)
    assert message.startswith("only gpuchain's gpu-health agent")
    assert admit(user, OLD, changed(OLD, gpu_unhealthy), None, sub="status")
    created = node("node-z", {FAULTS: "[]"})
    assert admit(user, None, created)


def test_everyone_else_keeps_their_writes() -> None:
    """The remediator taints and cordons, the kubelet updates its conditions, NFD labels: all pass."""
    remediator = "system:serviceaccount:gpu-operator:gpuchain-remediator"
    taint = changed(OLD, lambda n: n["spec"].update({"taints": [{"key": "gpuchain.io/gpu-reset-required"}]}))
    assert admit(remediator, OLD, taint) == []
    cordon = changed(OLD, lambda n: n["metadata"]["annotations"].update({"gpuchain.io/cordoned-by": "remediator"}))
    assert admit(remediator, OLD, cordon) == []
    with_gpu = changed(OLD, gpu_unhealthy)

    def kubelet_heartbeat(n: dict[str, Any]) -> None:
        n["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-03T08:00:00Z"

    assert admit("system:node:node-a", with_gpu, changed(with_gpu, kubelet_heartbeat), sub="status") == []
    assert admit("system:node:node-a", None, node("node-a")) == []


def test_gpu_health_may_run_the_repair_loop_and_the_readiness_gate_on_its_own_node() -> None:
    """Repair loop annotations and conditions, and removing only the startup taint (issue 18)."""
    loop = changed(
        OLD,
        lambda n: n["metadata"]["annotations"].update(
            {"gpuchain.io/gpu-loop": "{}", "gpuchain.io/gpu-quarantine": "GPU-1", "gpuchain.io/reboot-requested": "x"}
        ),
    )
    assert admit(AGENT, OLD, loop, "node-a") == []

    def conditions(n: dict[str, Any]) -> None:
        n["status"]["conditions"] += [
            {"type": "GPURebootRequired", "status": "True"},
            {"type": "GPUReady", "status": "False"},
        ]

    assert admit(AGENT, OLD, changed(OLD, conditions), "node-a", sub="status") == []
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    for key in ("gpuchain.io/gpu-not-ready", "startup-taint.cluster-autoscaler.kubernetes.io/gpu"):
        tainted = changed(
            OLD, lambda n, k=key: n["spec"].update({"taints": [other, {"key": k, "effect": "NoSchedule"}]})
        )
        assert admit(AGENT, tainted, changed(tainted, lambda n: n["spec"].update({"taints": [other]})), "node-a") == []
        dropped_other = changed(
            tainted, lambda n, k=key: n["spec"].update({"taints": [{"key": k, "effect": "NoSchedule"}]})
        )
        assert admit(AGENT, tainted, dropped_other, "node-a")  # another taint: refused
        both = changed(tainted, lambda n: n["spec"].update({"taints": [other], "unschedulable": True}))
        assert admit(AGENT, tainted, both, "node-a")  # and nothing else in spec
    forged = changed(OLD, lambda n: n["metadata"]["annotations"].update({"gpuchain.io/reboot-requested": "please"}))
    (message,) = admit("kubernetes-admin", OLD, forged)
    assert message.startswith("only gpuchain's gpu-health agent")


def test_the_startup_taint_gpu_health_may_remove_is_the_one_the_chart_configures() -> None:
    """A node pool tainted with its own key (gateStartup.taint): gpu-health may lift that one, and
    no longer the default key it was not told about."""
    custom = _compile(_policy({"gateStartup": {"enabled": True, "taint": "example.com/gpu-warming"}}))
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    for key, allowed in (("example.com/gpu-warming", True), ("gpuchain.io/gpu-not-ready", False)):
        tainted = changed(
            OLD, lambda n, k=key: n["spec"].update({"taints": [other, {"key": k, "effect": "NoSchedule"}]})
        )
        lifted = changed(tainted, lambda n: n["spec"].update({"taints": [other]}))
        assert (admit(AGENT, tainted, lifted, "node-a", compiled=custom) == []) is allowed, key


def test_the_nodes_verdict_inside_gpu_faults_is_gpu_healths_alone() -> None:
    """The remediator acts on the resolution a node publishes inside gpu-faults (``Fault.action``):
    rewriting only that field to keep pods on a failed GPU, or to get a node tainted, is refused to
    everyone but gpu-health on that node."""
    published = '{"GPU-1":{"gpu":"GPU-1","resolution":"reset-gpu","xids":[109]}}'
    before = changed(OLD, lambda n: n["metadata"]["annotations"].update({FAULTS: published}))
    forged = changed(before, lambda n: n["metadata"]["annotations"].update({FAULTS: published.replace("reset-gpu", "none")}))  # fmt: skip
    for user in ("system:serviceaccount:gpu-operator:gpuchain-remediator", "kubernetes-admin"):
        (message,) = admit(user, before, forged)
        assert message.startswith("only gpuchain's gpu-health agent")
    assert admit(AGENT, before, forged, "node-b")
    assert admit(AGENT, before, forged, "node-a") == []
