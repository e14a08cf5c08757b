"""Node Feature Discovery's pods failing by their own state where no GPU node is (links/nfd_failing.py).

nfd-master runs as a Deployment wherever the scheduler puts it (here control-plane nodes without GPUs); the walk of
the GPU nodes never meets it, and the labels it wrote stay on them. A replica the kernel kills for its memory again
and again (container status lastState.terminated.reason OOMKilled, restartCount climbing) is filed on the node it
runs on, under the gfd link NFD's labels feed. Its repair: on an nfd-master release with the non-leader leak (more
than one replica, so leader election is on: deployment/helm/node-feature-discovery/templates/master.yaml@v0.16.6 and
@v0.17.0), the release that fixed it (kubernetes-sigs/node-feature-discovery#2136, "nfd-master: fix memory leak when
leader election is enabled", first in v0.16.8; its 0.17 cherry-pick first in v0.17.3: the repository's tags), set
where NFD comes from; otherwise its memory limit raised under the chart's own key (master.resources; the GPU
Operator's chart nests NFD's values under node-feature-discovery). Pod names, nodes, limits and restart counts are
stand-ins; the versions and keys are upstream's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.sim import SimCluster

CLUSTER = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: gpu-a, preset: a100-40gb-x8}\n"
    "  - {name: cp-a, gpu: false}\n  - {name: cp-b, gpu: false}\n  - {name: cp-c, gpu: false}\n"
)


def _master(
    name: str,
    node: str,
    *,
    tag: str,
    restarts: int = 0,
    last: str = "",
    ns: str = "gpu-operator",
    labels: dict[str, str] | None = None,
    waiting: str = "",
    message: str = "",
    command: str = "nfd-master",
) -> Callable[[SimCluster], object]:
    """An NFD pod as the NFD chart renders it (container master, image registry.k8s.io/nfd/node-feature-discovery),
    with the container status the kubelet reports."""
    status: dict[str, Any] = {"name": "master", "ready": not waiting, "restartCount": restarts}
    status["state"] = (
        {"waiting": {"reason": waiting, "message": message}} if waiting else {"running": {"startedAt": "2026-01-02"}}
    )
    if last:
        status["lastState"] = {"terminated": {"reason": last, "exitCode": 137 if last == "OOMKilled" else 1}}
    image = f"registry.k8s.io/nfd/node-feature-discovery:{tag}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/name": "node-feature-discovery", "role": "master", **(labels or {})},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "master", "image": image, "command": [command], "resources": {"limits": {"memory": "4Gi"}}}
            ],
        },
        "status": {"phase": "Running", "containerStatuses": [status]},
    }
    return lambda sim: sim.cluster.create(pod)


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def _three(tag: str, **kw: Any) -> list[Callable[[SimCluster], object]]:
    """Three nfd-master replicas: the leader on cp-a never restarted, the two others OOM-killed again and again."""
    return [
        _master("nfd-master-7f9c4-aaaaa", "cp-a", tag=tag, **kw),
        _master("nfd-master-7f9c4-bbbbb", "cp-b", tag=tag, restarts=4, last="OOMKilled", **kw),
        _master("nfd-master-7f9c4-ccccc", "cp-c", tag=tag, restarts=7, last="OOMKilled", **kw),
    ]


def test_bundled_non_leaders_on_a_leaking_release_get_the_fixed_release() -> None:
    errors = _errors(diagnosed(CLUSTER, *_three("v0.16.3")))
    assert sorted((f.link, f.node, f.root) for f in errors) == [("gfd", "cp-b", True), ("gfd", "cp-c", True)]
    fix = errors[0].fix
    assert "helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator" in fix
    assert "--set node-feature-discovery.image.tag=v0.16.8" in fix
    assert "node-feature-discovery.master.replicaCount=1" in fix
    assert "release: node-feature-discovery.non-leader-leak-0.16" in " ".join(errors[0].evidence)


def test_own_chart_on_the_017_branch_moves_to_its_fixed_patch_release() -> None:
    helm = {"app.kubernetes.io/instance": "nfd"}
    edits = [
        _master("nfd-master-5d8b6-xxxxx", "cp-a", tag="v0.17.1", ns="node-feature-discovery", labels=helm),
        _master(
            "nfd-master-5d8b6-yyyyy",
            "cp-b",
            tag="v0.17.1",
            ns="node-feature-discovery",
            labels=helm,
            restarts=3,
            last="OOMKilled",
            waiting="CrashLoopBackOff",
        ),
    ]
    (found,) = _errors(diagnosed(CLUSTER, *edits))
    assert (found.id, found.node) == ("nfd.known-leak", "cp-b")
    assert found.fix.startswith(
        "helm upgrade nfd nfd/node-feature-discovery -n node-feature-discovery --version 0.17.3"
    )
    assert "--set master.replicaCount=1" in found.fix


def test_a_fixed_release_or_a_lone_replica_gets_its_memory_limit_raised() -> None:
    for edits in (
        _three("v0.16.8"),
        [_master("nfd-master-7f9c4-aaaaa", "cp-a", tag="v0.16.6", restarts=5, last="OOMKilled")],
    ):
        (found, *rest) = _errors(diagnosed(CLUSTER, *edits))
        assert found.id == "nfd.oom-killed"
        assert "--set node-feature-discovery.master.resources.limits.memory=8192Mi" in found.fix
        assert all(f.id == "nfd.oom-killed" for f in rest)


def test_without_a_helm_release_the_deployment_itself_gets_the_limit() -> None:
    edit = _master("nfd-master-7f9c4-aaaaa", "cp-a", tag="v0.18.0", ns="kube-system", restarts=5, last="OOMKilled")
    (found,) = _errors(diagnosed(CLUSTER, edit))
    assert found.action is not None and found.action.op is FixOp.SET_LIMITS
    assert found.fix.startswith(
        "kubectl -n kube-system set resources deploy/nfd-master -c master --limits=memory=8192Mi"
    )


def test_a_gc_in_a_crash_loop_is_quoted_from_its_state() -> None:
    edit = _master(
        "gpu-operator-node-feature-discovery-gc-6b7c-zzzzz",
        "cp-a",
        tag="v0.16.6",
        restarts=9,
        last="Error",
        waiting="CrashLoopBackOff",
        message="back-off 5m0s restarting failed container=master",
        command="nfd-gc",
    )
    (found,) = _errors(diagnosed(CLUSTER, edit))
    assert (found.id, found.node, found.link) == ("nfd.crash-loop", "cp-a", "gfd")
    assert "nfd-gc" in found.cause


def test_healthy_replicas_and_a_single_oom_kill_stay_quiet() -> None:
    quiet = [
        _master("nfd-master-7f9c4-aaaaa", "cp-a", tag="v0.16.6"),
        _master("nfd-master-7f9c4-bbbbb", "cp-b", tag="v0.16.6", restarts=1, last="OOMKilled"),
        _master("nfd-master-7f9c4-ccccc", "cp-c", tag="v0.16.6", restarts=6, last="Completed"),
    ]
    assert not _errors(diagnosed(CLUSTER, *quiet))
