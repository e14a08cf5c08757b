"""One contract for the `Cluster` port, run on MemoryCluster and on LiveCluster over a real
kube-apiserver + etcd + kube-controller-manager (k8s v1.37.2, built by scripts/build-peers).

Where the real server does work asynchronously (garbage collection, a PodDisruptionBudget's
status from the disruption controller), the test waits for it with ``eventually``; where it
drops what a client may not set (a pod's status on create), the test writes status through the
status subresource as the kubelet does.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kube.kube_fixtures import cluster_fixture, eventually  # noqa: F401 - provides the `cluster` fixture

from gpuchain.kube import (
    DAEMONSET,
    NODE,
    PDB,
    POD,
    AlreadyExistsError,
    BadRequestError,
    Cluster,
    ConflictError,
    EvictionBlockedError,
    InvalidError,
    KubeError,
    MemoryCluster,
    NotFoundError,
    WatchEvent,
)


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str, ns: str = "ml", phase: str = "Running", **labels: str) -> dict:
    """A pod bound to ``node_name``. No kubelet runs beside the real API server, so the pod asks for
    no grace period: its deletion (direct, by eviction or by garbage collection) is immediate."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox"}],
        },
        "status": {"phase": phase},
    }


def add_pod(cluster: Cluster, name: str, node_name: str, ns: str = "ml", phase: str = "Running", **labels: str) -> dict:
    """Create a pod, then report its status as a kubelet would (the API server resets status on create)."""
    cluster.create(pod(name, node_name, ns, phase, **labels))
    ready = "True" if phase == "Running" else "False"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
    return cluster.patch_status(POD, name=name, status=status, namespace=ns)


def daemonset(image: str, tolerations: list | None = None) -> dict:
    spec = {
        "selector": {"matchLabels": {"app": "dp"}},
        "template": {
            "metadata": {"labels": {"app": "dp"}},
            "spec": {"containers": [{"name": "dp", "image": image}], "tolerations": tolerations or []},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dp", "namespace": "gpu", "labels": {"app": "dp"}},
        "spec": spec,
    }


def test_create_get_delete(cluster: Cluster) -> None:
    created = cluster.create(node("n1", a="1"))
    assert created["metadata"]["name"] == "n1"
    assert cluster.get(NODE, name="n1")["metadata"]["labels"] == {"a": "1"}
    with pytest.raises(AlreadyExistsError):
        cluster.create(node("n1"))
    cluster.delete(NODE, name="n1")
    with pytest.raises(NotFoundError):
        cluster.get(NODE, name="n1")
    with pytest.raises(NotFoundError):
        cluster.delete(NODE, name="n1")
    assert cluster.get_or_none(NODE, name="n1") is None


def test_returned_objects_are_copies(cluster: Cluster) -> None:
    cluster.create(node("n1", a="1"))
    got = cluster.get(NODE, name="n1")
    got["metadata"]["labels"]["a"] = "changed"
    assert cluster.get(NODE, name="n1")["metadata"]["labels"] == {"a": "1"}


def _without_what_no_reader_reads(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` less what ``list_readonly`` may leave out (``Cluster.list_readonly``):
    ``metadata.managedFields``, a Node's ``status.images``, of a Pod its ``spec.volumes``, the
    defaults the API server fills into its spec, its containers' ``volumeMounts``, probes' handlers and
    policies, its ``status.podIPs``/``hostIPs``, ``qosClass`` and ``startTime``, its conditions'
    timestamps and its container statuses' ``containerID``, ``imageID``, ``volumeMounts`` and ``started``;
    and of a Pod's metadata the server's bookkeeping (``uid``, ``resourceVersion``, ``generation``,
    ``creationTimestamp``, ``generateName``, its owner references' ``uid``)."""
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    if out.get("kind") == "Node":
        out.get("status", {}).pop("images", None)
    if out.get("kind") == "Pod":
        for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "generateName"):
            out["metadata"].pop(key, None)
        for ref in out["metadata"].get("ownerReferences") or ():
            ref.pop("uid", None)
        spec, status = out.get("spec", {}), out.get("status", {})
        for key in ("volumes", "dnsPolicy", "schedulerName", "serviceAccount", "serviceAccountName"):
            spec.pop(key, None)
        for key in ("enableServiceLinks", "preemptionPolicy", "terminationGracePeriodSeconds"):
            spec.pop(key, None)
        for key in ("podIPs", "hostIPs", "qosClass", "startTime"):
            status.pop(key, None)
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            for key in ("volumeMounts", "imagePullPolicy"):
                c.pop(key, None)
            for key in ("livenessProbe", "readinessProbe", "startupProbe"):
                for handler in ("exec", "httpGet", "tcpSocket", "grpc"):
                    (c.get(key) or {}).pop(handler, None)
            for key in ("terminationMessagePath", "terminationMessagePolicy"):
                c.pop(key, None)
        for cs in [*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())]:
            for key in ("containerID", "imageID", "volumeMounts", "started"):
                cs.pop(key, None)
        for condition in status.get("conditions") or ():
            for key in ("lastProbeTime", "lastTransitionTime"):
                condition.pop(key, None)
    return out


def test_list_readonly_answers_what_list_answers(cluster: Cluster) -> None:
    """Same objects (less what no snapshot reader reads), same order, same selectors; one list
    request each."""
    for name, zone in (("gpu-2", "b"), ("gpu-1", "a"), ("cpu-1", "a")):
        cluster.create(node(name, zone=zone))
    add_pod(cluster, "p1", "gpu-1", ns="web")
    mounting = pod("p2", "gpu-2")
    mounting["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    mounting["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    cluster.create(mounting)
    add_pod(cluster, "p3", "gpu-1", phase="Succeeded")
    queries: list[tuple[Any, dict[str, Any]]] = [
        (NODE, {}),
        (NODE, {"label_selector": "zone=a"}),
        (POD, {}),
        (POD, {"namespace": "ml"}),
        (POD, {"field_selector": "spec.nodeName=gpu-1,status.phase!=Succeeded"}),
    ]
    for kind, query in queries:
        before = cluster.calls.by_verb["list"]
        shared = cluster.list_readonly(kind, **query)
        assert cluster.calls.by_verb["list"] == before + 1
        whole = cluster.list(kind, **query)
        assert [_without_what_no_reader_reads(o) for o in shared] == [
            _without_what_no_reader_reads(o) for o in whole
        ], query
        assert all("managedFields" not in o["metadata"] for o in shared), query
    mounted = next(p for p in cluster.list_readonly(POD) if p["metadata"]["name"] == "p2")
    # A container's mounts go whole or stay whole (the real server adds its service account token's).
    mounts = mounted["spec"]["containers"][0].get("volumeMounts")
    assert mounts is None or {"name": "scratch", "mountPath": "/scratch"} in mounts
    assert [n["metadata"]["name"] for n in cluster.list_readonly(NODE, namespace=None, label_selector="zone=a")] == [
        "cpu-1",
        "gpu-1",
    ]


def test_a_write_leaves_what_a_reader_holds(cluster: Cluster) -> None:
    """Objects from list_readonly may be shared with the store, so no write may change them in place."""
    cluster.create(node("n1", a="1"))
    held = cluster.list_readonly(NODE)
    cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"a": "2"}}})
    cluster.patch_status(NODE, name="n1", status={"capacity": {"nvidia.com/gpu": "8"}})
    assert held[0]["metadata"]["labels"] == {"a": "1"}
    assert "capacity" not in (held[0].get("status") or {})
    assert cluster.list_readonly(NODE)[0]["metadata"]["labels"] == {"a": "2"}
    cluster.delete(NODE, name="n1")
    assert held[0]["metadata"]["name"] == "n1"
    assert cluster.list_readonly(NODE) == []


def test_merge_patch_sets_and_deletes_labels(cluster: Cluster) -> None:
    cluster.create(node("n1", keep="1", drop="2"))
    out = cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"drop": None, "new": "3"}}})
    assert out["metadata"]["labels"] == {"keep": "1", "new": "3"}
    assert cluster.get(NODE, name="n1")["metadata"]["labels"] == {"keep": "1", "new": "3"}
    with pytest.raises(NotFoundError):
        cluster.patch(NODE, name="missing", patch={"metadata": {"labels": {"a": "b"}}})


def test_patch_with_a_stale_resource_version_conflicts(cluster: Cluster) -> None:
    read = cluster.create(node("n1"))
    cluster.patch(NODE, name="n1", patch={"spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}})
    stale = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}, "spec": {"taints": None}}
    with pytest.raises(ConflictError):
        cluster.patch(NODE, name="n1", patch=stale)
    assert cluster.get(NODE, name="n1")["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}]
    fresh = cluster.get(NODE, name="n1")["metadata"]["resourceVersion"]
    cluster.patch(NODE, name="n1", patch={"metadata": {"resourceVersion": fresh}, "spec": {"taints": None}})
    assert "taints" not in cluster.get(NODE, name="n1")["spec"]


def test_list_by_namespace(cluster: Cluster) -> None:
    cluster.create(pod("a", "n1", ns="ml"))
    cluster.create(pod("b", "n1", ns="web"))
    assert {p["metadata"]["name"] for p in cluster.list(POD)} == {"a", "b"}
    assert [p["metadata"]["name"] for p in cluster.list(POD, namespace="ml")] == ["a"]


def test_list_label_and_field_selectors(cluster: Cluster) -> None:
    cluster.create(node("gpu-1", **{"nvidia.com/gpu.present": "true", "zone": "a"}))
    cluster.create(node("gpu-2", **{"nvidia.com/gpu.present": "true", "zone": "b"}))
    cluster.create(node("cpu-1", zone="a"))
    names = lambda objs: sorted(o["metadata"]["name"] for o in objs)  # noqa: E731
    assert names(cluster.list(NODE, label_selector="nvidia.com/gpu.present=true")) == ["gpu-1", "gpu-2"]
    assert names(cluster.list(NODE, label_selector="!nvidia.com/gpu.present")) == ["cpu-1"]
    assert names(cluster.list(NODE, label_selector="zone in (a),nvidia.com/gpu.present")) == ["gpu-1"]
    assert names(cluster.list(NODE, label_selector="zone!=a")) == ["gpu-2"]
    add_pod(cluster, "p1", "gpu-1")
    add_pod(cluster, "p2", "gpu-2")
    add_pod(cluster, "p3", "gpu-1", phase="Succeeded")
    assert names(cluster.list(POD, field_selector="spec.nodeName=gpu-1")) == ["p1", "p3"]
    assert names(cluster.list(POD, field_selector="spec.nodeName=gpu-1,status.phase!=Succeeded")) == ["p1"]


def test_server_metadata(cluster: Cluster) -> None:
    a = cluster.create(node("n1"))
    meta = a["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    b = cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"x": "1"}}})
    assert int(b["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert b["metadata"]["uid"] == meta["uid"]
    same = cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"x": "1"}}})
    assert same["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"], "a no-op patch keeps the rv"


def test_apply_creates_then_is_a_no_op_then_patches(cluster: Cluster) -> None:
    first = cluster.apply(daemonset("img:1"))
    assert first.created and first.changed
    before = cluster.calls.writes
    again = cluster.apply(daemonset("img:1"))
    assert not again.changed
    assert cluster.calls.writes == before, "an unchanged apply must not write"
    changed = cluster.apply(daemonset("img:2", tolerations=[{"operator": "Exists"}]))
    assert changed.changed and not changed.created
    live = cluster.get(DAEMONSET, name="dp", namespace="gpu")
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "img:2"
    assert live["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    shrunk = cluster.apply(daemonset("img:2"))
    assert shrunk.changed, "removing a list element is a change"
    # The real server drops an empty list on write; MemoryCluster keeps it: both mean "none".
    assert cluster.get(DAEMONSET, name="dp", namespace="gpu")["spec"]["template"]["spec"].get("tolerations", []) == []


def test_apply_tolerates_server_defaults(cluster: Cluster) -> None:
    cluster.apply(daemonset("img:1"))
    defaulted = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "dp", "image": "img:1", "imagePullPolicy": "IfNotPresent"}]}}
        }
    }
    cluster.patch(DAEMONSET, name="dp", patch=defaulted, namespace="gpu")
    before = cluster.calls.writes
    assert not cluster.apply(daemonset("img:1")).changed
    assert cluster.calls.writes == before


def test_patch_status(cluster: Cluster) -> None:
    cluster.create(pod("p1", "n1", phase="Pending"))
    out = cluster.patch_status(POD, name="p1", status={"phase": "Running"}, namespace="ml")
    assert out["status"]["phase"] == "Running"
    assert cluster.get(POD, name="p1", namespace="ml")["status"]["phase"] == "Running"


def _ready(status: str) -> dict:
    return {"type": "Ready", "status": status, "reason": "KubeletReady"}


def test_set_condition_adds_and_replaces_one_condition(cluster: Cluster) -> None:
    cluster.create({**node("n1"), "status": {"conditions": [_ready("True")]}})
    added = cluster.set_condition(
        NODE, name="n1", condition={"type": "GPUHealthy", "status": "False", "reason": "GPUXidError"}
    )
    gpu = next(c for c in added["status"]["conditions"] if c["type"] == "GPUHealthy")
    assert (gpu["status"], gpu["reason"]) == ("False", "GPUXidError")
    cluster.set_condition(NODE, name="n1", condition={"type": "GPUHealthy", "status": "True", "reason": "GPUsHealthy"})
    conditions = cluster.get(NODE, name="n1")["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions if c["type"] == "GPUHealthy"] == [("GPUHealthy", "True")]
    with pytest.raises(InvalidError, match="type"):
        cluster.set_condition(NODE, name="n1", condition={"status": "True"})
    with pytest.raises(NotFoundError):
        cluster.set_condition(NODE, name="missing", condition={"type": "GPUHealthy", "status": "True"})


def test_set_condition_keeps_the_other_writers_conditions(cluster: Cluster) -> None:
    cluster.create({**node("n1"), "status": {"conditions": [_ready("True")]}})
    cluster.set_condition(NODE, name="n1", condition={"type": "GPUHealthy", "status": "True"})
    # The kubelet's heartbeat lands after our write, then we write again: neither loses the other.
    cluster.set_condition(NODE, name="n1", condition=_ready("False"))
    cluster.set_condition(NODE, name="n1", condition={"type": "GPUHealthy", "status": "False", "reason": "GPULost"})
    # By type, not by position: without a $setElementOrder directive the real server moves the
    # entries a strategic merge patch names to the front; the list's order carries no meaning.
    conditions = {c["type"]: c for c in cluster.get(NODE, name="n1")["status"]["conditions"]}
    assert {t: c["status"] for t, c in conditions.items()} == {"Ready": "False", "GPUHealthy": "False"}
    assert conditions["Ready"]["reason"] == "KubeletReady"
    assert cluster.calls.snapshot() == {"create": 1, "patch": 3, "get": 1}


def test_logs_of_an_unknown_pod_are_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError):
        cluster.logs("absent", namespace="ml")
    assert cluster.calls.snapshot() == {"logs": 1}
    assert cluster.calls.writes == 0


def test_logs_container_choice_is_checked_before_any_kubelet(cluster: Cluster) -> None:
    two = pod("p1", "n1")
    two["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    cluster.create(two)
    with pytest.raises(BadRequestError, match="choose one of"):
        cluster.logs("p1", namespace="ml")
    with pytest.raises(BadRequestError, match="not valid"):
        cluster.logs("p1", namespace="ml", container="nope")
    with pytest.raises(InvalidError, match="tail_lines"):
        cluster.logs("p1", namespace="ml", container="main", tail_lines=-1)
    assert cluster.calls.writes == 1


def test_logs_tail_previous_and_container_choice() -> None:
    """The log text itself comes from a kubelet, which no peer here runs: MemoryCluster only
    (the API server's own checks above run on both; test_kube_live checks the request over HTTP)."""
    cluster = MemoryCluster()
    two = pod("p1", "n1")
    two["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    cluster.create(two)
    cluster.create(pod("p2", "n1"))
    cluster.set_logs("p1", namespace="ml", container="main", text="one\ntwo\nthree\n")
    cluster.set_logs("p1", namespace="ml", container="main", text="crashed\n", previous=True)
    assert cluster.logs("p1", namespace="ml", container="main") == "one\ntwo\nthree\n"
    assert cluster.logs("p1", namespace="ml", container="main", tail_lines=2) == "two\nthree\n"
    assert cluster.logs("p1", namespace="ml", container="main", tail_lines=0) == ""
    assert cluster.logs("p1", namespace="ml", container="main", previous=True) == "crashed\n"
    assert cluster.logs("p1", namespace="ml", container="sidecar") == "", "a container that printed nothing"
    assert cluster.logs("p2", namespace="ml") == "", "the only container needs no name"
    with pytest.raises(BadRequestError, match="previous terminated container"):
        cluster.logs("p1", namespace="ml", container="sidecar", previous=True)
    cluster.delete(POD, name="p1", namespace="ml")
    cluster.create(two)
    assert cluster.logs("p1", namespace="ml", container="main") == "", "logs go with the pod"
    with pytest.raises(NotFoundError):
        cluster.set_logs("absent", namespace="ml", container="main", text="x")


@pytest.mark.parametrize(
    ("state", "last", "words"),
    [
        ({"waiting": {"reason": "ContainerCreating"}}, None, "is waiting to start: ContainerCreating"),
        ({"waiting": {"reason": "PodInitializing"}}, None, "is waiting to start: PodInitializing"),
        ({"waiting": {"reason": "ErrImagePull"}}, None, "is waiting to start: image can't be pulled"),
        ({"waiting": {"reason": "ImagePullBackOff"}}, None, "is waiting to start: trying and failing to pull image"),
        ({}, None, "is waiting to start - no logs yet"),
        ({"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": {"exitCode": 1}}, None),
        ({"running": {}}, None, None),
        ({"terminated": {"exitCode": 0}}, None, None),
    ],
)
def test_a_log_is_served_only_for_a_container_that_ran(state: dict, last: dict | None, words: str | None) -> None:
    """The kubelet's answer by the container's status (kubelet_pods.go validateContainerLogStatus@v1.37.2): a
    container that never ran has no log to give, whatever was stored for it; one backing off after a crash gives its
    last run. kubectl's dump writes the refusal in place of the log."""
    cluster = MemoryCluster()
    p = pod("p1", "n1")
    p["status"] = {"containerStatuses": [{"name": "main", "state": state, **({"lastState": last} if last else {})}]}
    cluster.create(p)
    cluster.set_logs("p1", namespace="ml", container="main", text="ran\n")
    if words is None:
        assert cluster.logs("p1", namespace="ml", container="main") == "ran\n"
        return
    with pytest.raises(BadRequestError) as refused:
        cluster.logs("p1", namespace="ml", container="main")
    assert str(refused.value).endswith(f'container "main" in pod "p1" {words}')


def test_a_previous_log_needs_a_run_that_ended() -> None:
    cluster = MemoryCluster()
    p = pod("p1", "n1")
    p["status"] = {"containerStatuses": [{"name": "main", "restartCount": 1, "state": {"running": {}}}]}
    cluster.create(p)
    cluster.set_logs("p1", namespace="ml", container="main", text="crashed\n", previous=True)
    with pytest.raises(BadRequestError, match='previous terminated container "main" in pod "p1" not found'):
        cluster.logs("p1", namespace="ml", container="main", previous=True)


def test_pod_proxy_of_an_unknown_pod_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError):
        cluster.pod_proxy_get("absent", namespace="ml", port=9400, path="metrics")
    assert cluster.calls.snapshot() == {"proxy": 1} and cluster.calls.writes == 0


def test_pod_proxy_answers_what_the_pod_serves() -> None:
    """What a pod serves comes from its container, which no peer here runs: MemoryCluster only
    (test_kube_live checks the request over HTTP)."""
    cluster = MemoryCluster()
    cluster.create(pod("p1", "n1"))
    cluster.set_served("p1", namespace="ml", port=9400, path="/metrics", text="gpuchain_gpus_exported 8\n")
    assert cluster.pod_proxy_get("p1", namespace="ml", port=9400, path="metrics") == "gpuchain_gpus_exported 8\n"
    with pytest.raises(KubeError) as refused:
        cluster.pod_proxy_get("p1", namespace="ml", port=8080, path="metrics")
    assert refused.value.code == 503 and "connection refused" in str(refused.value)
    cluster.delete(POD, name="p1", namespace="ml")
    cluster.create(pod("p1", "n1"))
    with pytest.raises(KubeError):
        cluster.pod_proxy_get("p1", namespace="ml", port=9400, path="metrics")  # what it served went with the pod
    with pytest.raises(NotFoundError):
        cluster.set_served("absent", namespace="ml", port=9400, path="metrics", text="x")


def test_status_is_a_separate_subresource(cluster: Cluster) -> None:
    cluster.create(pod("p1", "n1", phase="Pending"))
    cluster.patch(
        POD, name="p1", patch={"status": {"phase": "Running"}, "metadata": {"labels": {"x": "1"}}}, namespace="ml"
    )
    got = cluster.get(POD, name="p1", namespace="ml")
    assert got["status"]["phase"] == "Pending", "patch must not write status"
    assert got["metadata"]["labels"]["x"] == "1"


def test_events_are_recorded(cluster: Cluster) -> None:
    n = cluster.create(node("n1"))
    cluster.record_event(n, reason="GpuLost", message="GPU 3 fell off the bus", type="Warning")
    events = cluster.events_for(n)
    assert len(events) == 1
    ev = events[0]
    assert (ev["reason"], ev["type"], ev["involvedObject"]["kind"]) == ("GpuLost", "Warning", "Node")
    assert ev["metadata"]["namespace"] == "default"


def wait_for_budget(cluster: Cluster, name: str, healthy: int, ns: str = "ml") -> None:
    """Wait until the disruption controller has counted the budget's pods (the Eviction API refuses
    with 429 while a budget's status is behind its spec); MemoryCluster counts at eviction time."""
    if isinstance(cluster, MemoryCluster):
        return

    def counted() -> bool:
        pdb = cluster.get(PDB, name=name, namespace=ns)
        status = pdb.get("status") or {}
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy", 0) == healthy
        )

    eventually(counted, f"the disruption controller counts {healthy} healthy pods for {ns}/{name}")


def test_evict_deletes_when_budget_allows(cluster: Cluster) -> None:
    for i in range(3):
        add_pod(cluster, f"w{i}", "n1", app="train")
    cluster.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "train-pdb", "namespace": "ml"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}},
        }
    )
    wait_for_budget(cluster, "train-pdb", healthy=3)
    cluster.evict("w0", "ml")
    assert cluster.get_or_none(POD, name="w0", namespace="ml") is None
    with pytest.raises(EvictionBlockedError) as err:
        cluster.evict("w1", "ml")
    assert err.value.pdb == "train-pdb"
    assert "train-pdb" in str(err.value)
    assert cluster.get_or_none(POD, name="w1", namespace="ml") is not None, "a blocked eviction deletes nothing"
    assert cluster.list(PDB, namespace="ml")


def test_a_running_pod_without_a_ready_condition_is_not_healthy_to_a_budget(cluster: Cluster) -> None:
    """The disruption controller counts a pod as healthy only on Ready=True (IsPodReady)."""
    for i in range(2):
        cluster.create(pod(f"w{i}", "n1", app="train"))
        cluster.patch_status(POD, name=f"w{i}", status={"phase": "Running"}, namespace="ml")
    cluster.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "one", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
        }
    )
    wait_for_budget(cluster, "one", healthy=0)
    with pytest.raises(EvictionBlockedError):
        cluster.evict("w0", "ml")


def test_evict_pending_pod_ignores_budget(cluster: Cluster) -> None:
    add_pod(cluster, "w0", "n1", phase="Pending", app="train")
    cluster.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "all", "namespace": "ml"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}},
        }
    )
    wait_for_budget(cluster, "all", healthy=0)
    cluster.evict("w0", "ml")
    assert cluster.get_or_none(POD, name="w0", namespace="ml") is None


def test_owner_garbage_collection(cluster: Cluster) -> None:
    owner = cluster.create(node("n1"))
    dependent = pod("p1", "n1")
    dependent["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": owner["metadata"]["uid"]}
    ]
    cluster.create(dependent)
    cluster.delete(NODE, name="n1")
    eventually(
        lambda: cluster.get_or_none(POD, name="p1", namespace="ml") is None,
        "the garbage collector deletes the dependent pod",
    )


async def _collect(cluster: Cluster, n: int, **kwargs: object) -> list[WatchEvent]:
    seen: list[WatchEvent] = []
    async for ev in cluster.watch(NODE, timeout=5, **kwargs):  # type: ignore[arg-type]
        seen.append(ev)
        if len(seen) == n:
            break
    return seen


async def test_watch_streams_existing_then_changes(cluster: Cluster) -> None:
    await asyncio.to_thread(cluster.create, node("n1"))
    task = asyncio.create_task(_collect(cluster, 4))
    await asyncio.sleep(0.2)
    await asyncio.to_thread(cluster.create, node("n2"))
    await asyncio.to_thread(cluster.patch, NODE, name="n2", patch={"metadata": {"labels": {"a": "1"}}})
    await asyncio.to_thread(cluster.delete, NODE, name="n1")
    events = await task
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
        ("MODIFIED", "n2"),
        ("DELETED", "n1"),
    ]
    assert events[2].object["metadata"]["labels"] == {"a": "1"}
    assert {(e.object["apiVersion"], e.object["kind"]) for e in events} == {("v1", "Node")}


async def test_watch_resumes_from_resource_version(cluster: Cluster) -> None:
    first = cluster.create(node("n1"))
    cluster.create(node("n2"))
    cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"a": "1"}}})
    events = await _collect(cluster, 2, resource_version=first["metadata"]["resourceVersion"])
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "n2"), ("MODIFIED", "n1")]
    rvs = [int(e.resource_version or 0) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(first["metadata"]["resourceVersion"])


async def test_watch_label_selector_sees_objects_leave(cluster: Cluster) -> None:
    cluster.create(node("n1", gpu="true"))
    task = asyncio.create_task(_collect(cluster, 2, label_selector="gpu=true"))
    await asyncio.sleep(0.1)
    cluster.create(node("cpu"))
    cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"gpu": None}}})
    events = await task
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "n1"), ("DELETED", "n1")]


async def test_watch_field_selector_follows_one_node(cluster: Cluster) -> None:
    cluster.create(node("gpu-1"))
    cluster.create(node("gpu-2"))
    task = asyncio.create_task(_collect(cluster, 3, field_selector="metadata.name=gpu-1"))
    await asyncio.sleep(0.1)
    cluster.patch(NODE, name="gpu-2", patch={"metadata": {"labels": {"a": "1"}}})
    cluster.patch(NODE, name="gpu-1", patch={"metadata": {"labels": {"a": "1"}}})
    cluster.delete(NODE, name="gpu-2")
    cluster.delete(NODE, name="gpu-1")
    events = await task
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "gpu-1"),
        ("MODIFIED", "gpu-1"),
        ("DELETED", "gpu-1"),
    ]


async def test_watch_field_and_label_selectors_both_apply(cluster: Cluster) -> None:
    cluster.create(node("gpu-1", gpu="true"))
    cluster.create(node("gpu-2", gpu="true"))
    first = await _collect(cluster, 1, label_selector="gpu=true", field_selector="metadata.name!=gpu-1")
    assert [e.object["metadata"]["name"] for e in first] == ["gpu-2"]


async def test_watch_refuses_a_bad_field_selector(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match="bad field selector requirement"):
        await _collect(cluster, 1, field_selector="metadata.name in (gpu-1)")


async def test_watch_timeout_ends_stream(cluster: Cluster) -> None:
    seen = [ev async for ev in cluster.watch(NODE, timeout=0.3)]
    assert seen == []


def test_calls_counted_per_verb(cluster: Cluster) -> None:
    cluster.calls.reset()
    cluster.create(node("n1"))
    cluster.get(NODE, name="n1")
    cluster.list(NODE)
    cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"a": "1"}}})
    cluster.set_condition(NODE, name="n1", condition={"type": "GPUHealthy", "status": "True"})
    cluster.delete(NODE, name="n1")
    with pytest.raises(NotFoundError):
        cluster.logs("p1", namespace="ml")
    assert cluster.calls.snapshot() == {"create": 1, "get": 1, "list": 1, "patch": 2, "delete": 1, "logs": 1}
    assert cluster.calls.writes == 4 and cluster.calls.total == 7


def test_listed_objects_carry_their_api_version_and_kind(cluster: Cluster) -> None:
    """The port's objects are whole: a real server's List omits each item's apiVersion and kind
    (only the List carries them), which the live adapter puts back, as client-go's dynamic client
    does. Without them a listed object never matched a desired one in apply (13 patches per
    operator pass) and an Event about a listed object named no kind."""
    cluster.create(node("n1"))
    cluster.apply(daemonset("img:1"))
    for listed in (*cluster.list(NODE), *cluster.list_readonly(NODE)):
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "Node")
    (ds,) = cluster.list(DAEMONSET, namespace="gpu")
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    cluster.calls.reset()
    assert not cluster.apply(daemonset("img:1"), live=ds, known_live=True).changed
    assert cluster.calls.writes == 0, "applying what a list shows as already there must not write"


def test_apply_with_a_listed_object_skips_the_get(cluster: Cluster) -> None:
    live = cluster.apply(daemonset("img:1")).object
    cluster.calls.reset()
    assert not cluster.apply(daemonset("img:1"), live=live, known_live=True).changed
    assert cluster.calls.total == 0
    created = cluster.apply(node("n9"), live=None, known_live=True)
    assert created.created and cluster.calls.snapshot() == {"create": 1}
