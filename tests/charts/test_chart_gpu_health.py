"""gpu-health's repair loop and readiness gate in the chart: values, the privileges a GPU reset needs
only when repair is on, the startup taint tolerated by the whole chain, and least privilege checked
both ways against what the agents really request (publisher, repair loop, readiness gate)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from test_chart import CHART, VERSIONS, policy_of, render

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import Kind
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.remediation.controller import STATUS_NAME
from gpuchain.remediation.gpuloop import Stage
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.remediation.readiness import STARTUP_TAINT, ReadinessGate
from gpuchain.sim.remediation import node_object

NS = "gpu-operator"
REPAIR = {"remediation": {"enabled": True, "repair": {"enabled": True}}}
DEFAULTS = {"remediation": {"enabled": True}}


def _named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _named(docs, "DaemonSet", "gpuchain-gpu-health")["spec"]["template"]["spec"]
    return spec


def test_repair_is_off_by_default_and_gpu_health_stays_unprivileged() -> None:
    docs = render(DEFAULTS)
    pod = _pod(docs)
    container = pod["containers"][0]
    assert "--repair" not in container["args"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}
    assert not [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "gpuchain-gpu-health"]
    assert "ports" not in container and "hostPID" not in pod
    assert "terminationGracePeriodSeconds" not in pod


@pytest.mark.parametrize("version", VERSIONS)
def test_repair_on_validates_and_grants_exactly_the_reset_privileges(version: str) -> None:
    docs = render(REPAIR)
    for doc in docs:
        if doc["kind"].startswith("ValidatingAdmissionPolicy") and version < "1.30":
            continue
        if doc["kind"] != "ClusterPolicy":
            kubernetes_validate.validate(doc, version, strict=True)
    pod = _pod(docs)
    container = pod["containers"][0]
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    assert "hostPID" not in pod and "hostIPC" not in pod and "hostNetwork" not in pod
    # a reset under way (agents let go for up to 30 s, nvidia-smi retried for 30 s) ends before exit
    assert pod["terminationGracePeriodSeconds"] >= 120
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["run-nvidia-persistenced"] == "/run/nvidia-persistenced"
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert volumes["run-nvidia-persistenced"] == "/run/nvidia-persistenced"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    args = container["args"]
    assert {"--repair", f"--namespace={NS}", "--metrics-port=9401"} <= set(args)
    assert container["ports"] == [{"name": "repair-metrics", "containerPort": 9401, "protocol": "TCP"}]
    role = _named(docs, "Role", "gpuchain-gpu-health")
    assert role["metadata"]["namespace"] == NS
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [STATUS_NAME], "verbs": ["get"]}
    ]
    binding = _named(docs, "RoleBinding", "gpuchain-gpu-health")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuchain-gpu-health", "namespace": NS}]


@pytest.mark.parametrize("version", ["v1.28.0", "v1.36.0"])
def test_lints_with_repair_and_gate(version: str) -> None:
    values = {"remediation": {"enabled": True, "repair": {"enabled": True, "xidResolution": "109=none"},
                              "gateStartup": {"burnIn": True}}}  # fmt: skip
    assert helm.lint(CHART, values=values, kube_version=version, strict=True)["errors"] == []


@pytest.mark.parametrize(
    "values",
    [
        DEFAULTS,
        REPAIR,
        {"remediation": {"enabled": True, "repair": {"enabled": True, "xidResolution": "109=none", "metricsPort": 0},
                         "gateStartup": {"burnIn": True, "taint": "startup-taint.cluster-autoscaler.kubernetes.io/gpu"}}},
    ],
)  # fmt: skip
def test_the_container_args_are_ones_gpu_health_accepts(values: dict[str, Any]) -> None:
    container = _pod(render(values))["containers"][0]
    params = parse([*container["command"][1:], *container["args"]], container_env(container)).params
    repair = values["remediation"].get("repair", {})
    gate = values["remediation"].get("gateStartup", {})
    assert params["repair"] is bool(repair.get("enabled"))
    assert params["xid_resolution"] == repair.get("xidResolution", "")
    assert params["gate_startup"] is gate.get("enabled", True)  # values.yaml: on by default
    assert params["startup_taint"] == gate.get("taint", "gpuchain.io/gpu-not-ready")
    assert params["gate_burn_in"] is gate.get("burnIn", False)
    if "metricsPort" in repair:
        assert params["metrics_port"] == repair["metricsPort"]


def test_metrics_port_zero_serves_nothing_and_opens_no_port() -> None:
    values = {"remediation": {"enabled": True, "repair": {"enabled": True, "metricsPort": 0}}}
    container = _pod(render(values))["containers"][0]
    assert "--metrics-port=0" in container["args"] and "ports" not in container


def test_the_whole_chain_tolerates_the_startup_taint_while_gpu_health_gates_on_it() -> None:
    """The operands (through the ClusterPolicy), gpu-health and the DRA plugin must start on a node
    that still carries the startup taint, or nothing would ever lift it."""
    taint = "startup-taint.cluster-autoscaler.kubernetes.io/gpu"
    values = {"remediation": {"enabled": True, "gateStartup": {"taint": taint}}, "dra": {"enabled": True}}
    docs = render(values)
    wanted = {"key": taint, "operator": "Exists", "effect": "NoSchedule"}
    assert wanted in policy_of(docs)["spec"]["daemonsets"]["tolerations"]
    assert wanted in _pod(docs)["tolerations"]
    dra = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] != "gpuchain-gpu-health")
    assert wanted in dra["spec"]["template"]["spec"]["tolerations"]
    args = _pod(docs)["containers"][0]["args"]
    assert "--gate-startup" in args and f"--startup-taint={taint}" in args
    assert "--validations-dir=/run/gpuchain/validations" in args
    # the gate off, or remediation off: nobody lifts the taint, so nothing tolerates it
    for off in ({"remediation": {"enabled": True, "gateStartup": {"enabled": False}}}, {}):
        docs = render(off)
        keys = {t["key"] for t in policy_of(docs)["spec"]["daemonsets"]["tolerations"]}
        assert keys == {"nvidia.com/gpu"}


def test_the_validations_dir_is_where_the_validator_writes() -> None:
    from gpuchain.validator.ready import DEFAULT_DIR

    args = _pod(render(DEFAULTS))["containers"][0]["args"]
    assert f"--validations-dir={DEFAULT_DIR}" in args


# ---- least privilege, both ways -------------------------------------------------------------------


class Recording(MemoryCluster):
    """Logs (verb, resource, namespace, name) of every request the agents make."""

    def __init__(self, objects: list[Obj]) -> None:
        self.log: list[tuple[str, str, str | None, str | None]] = []
        super().__init__(objects)
        self.log.clear()  # the objects the cluster starts with are not requests

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        self.log.append(("get", kind.plural, namespace if kind.namespaced else None, name))
        return super().get(kind, name=name, namespace=namespace)

    def create(self, obj: Obj) -> Obj:
        from gpuchain.kube import kind_of

        kind = kind_of(obj)
        self.log.append(("create", kind.plural, obj["metadata"].get("namespace"), None))
        return super().create(obj)

    def patch(self, kind: Kind, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self.log.append(("patch", kind.plural, namespace if kind.namespaced else None, name))
        return super().patch(kind, name=name, patch=patch, namespace=namespace)

    def patch_status(
        self, kind: Kind, name: str, status: Obj, namespace: str | None = None, strategic: bool = False
    ) -> Obj:
        self.log.append(("patch", kind.plural + "/status", namespace if kind.namespaced else None, name))
        return super().patch_status(kind, name=name, status=status, namespace=namespace, strategic=strategic)


def _exercise() -> Recording:
    """Every agent gpu-health runs with repair and the gate on, through their writing paths: a
    published fault, the loop up to a reboot request, the startup taint lifted."""
    backend = SimBackend.from_preset("h100-80gb-x8", node="n")
    node = node_object("n")
    node["spec"]["taints"] = [{"key": STARTUP_TAINT, "effect": "NoSchedule"}]
    node["status"]["nodeInfo"] = {"bootID": "b1"}
    status = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATUS_NAME, "namespace": NS},
              "data": {"breaker": "closed"}}  # fmt: skip
    cluster = Recording([node, status])
    publisher = GpuHealthPublisher(backend, cluster=cluster, node_name="n", quiet_seconds=0)
    agent = GpuLoopAgent(backend, cluster=cluster, node_name="n", namespace=NS)
    gate = ReadinessGate(backend, cluster=cluster, node_name="n")
    backend.fail_reset(2)
    publisher.handle(backend.inject_xid(2, xid=48, message="double-bit ECC error"))
    publisher.publish()
    for _ in range(3):
        agent.run_once()
    assert agent.run_once().records[backend.inventory().gpu(2).uuid].stage is Stage.REBOOT
    assert gate.run_once().ready
    assert not cluster.get(NODE, name="n")["spec"].get("taints")
    return cluster


def _rules(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    """gpu-health's rules with the namespace they apply in (None: cluster-wide)."""
    out: list[tuple[dict[str, Any], str | None]] = []
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["name"] == "gpuchain-gpu-health" for s in binding["subjects"]):
            continue
        kind = binding["roleRef"]["kind"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        out += [(rule, scope) for rule in _named(docs, kind, binding["roleRef"]["name"])["rules"]]
    return out


def test_gpu_health_requests_are_granted_and_grants_are_used() -> None:
    cluster = _exercise()
    rules = _rules(render(REPAIR))
    used: set[tuple[int, str, str]] = set()
    for verb, resource, namespace, name in cluster.log:
        matches = [
            (i, verb, resource)
            for i, (rule, scope) in enumerate(rules)
            if verb in rule["verbs"]
            and resource in rule["resources"]
            and rule["apiGroups"] == [""]
            and (scope is None or scope == namespace)
            and ("resourceNames" not in rule or name in rule["resourceNames"])
        ]
        assert matches, f"{verb} {resource} {name or ''} in {namespace or 'cluster scope'} is not granted"
        used.update(matches)
    granted = {(i, v, r) for i, (rule, _) in enumerate(rules) for v in rule["verbs"] for r in rule["resources"]}
    assert granted - used == set(), f"granted but never used: {sorted(granted - used)}"
