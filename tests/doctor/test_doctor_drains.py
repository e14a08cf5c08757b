"""Drains and evictions of a GPU node that never finish, read from the state of the pods on the node, their
PodDisruptionBudgets and the settings of the component that drains (issue 26): the GPU Operator's driver manager (the
driver pod's k8s-driver-manager init container) and its upgrade controller (nvidia.com/gpu-driver-upgrade-state).

Upstream facts these stand on: kubectl's drain filters and their messages (kubernetes/kubectl pkg/drain/filters.go
@v0.34.9: "cannot delete Pods with local storage (use --delete-emptydir-data to override)", "cannot delete Pods that
declare no controller (use --force to override)"); the Eviction API's refusal of a pod whose budget allows no
disruption (kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go@v1.34.4: "Cannot evict pod as it would
violate the pod's disruption budget.", "This pod has more than one PodDisruptionBudget, which the eviction subresource
does not support."); the driver manager's settings (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0:
ENABLE_GPU_POD_EVICTION, ENABLE_AUTO_DRAIN, DRAIN_USE_FORCE, DRAIN_DELETE_EMPTYDIR_DATA, DRAIN_POD_SELECTOR_LABEL,
DRAIN_TIMEOUT_SECONDS; "cannot proceed until all GPU pods are drained from the node") and the operator's defaults for
them (NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml@v26.7.0); the upgrade controller's states and
settings (NVIDIA/k8s-operator-libs pkg/upgrade/consts.go, pod_manager.go, api/upgrade/v1alpha1/upgrade_spec.go;
the chart's gpuPodDeletion: NVIDIA/gpu-operator deployments/gpu-operator/templates/clusterpolicy.yaml@v26.7.0)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.small_cluster import crash_looping, diagnosed
from kube.kmock_server import kmock_server
from sim.heldout9.harness import _apply

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.kube import DAEMONSET, NODE, POD, RUNTIME_CLASS, LiveCluster
from gpuchain.kube.kinds import PDB
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: a100-80gb-x8}\n"
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-7d9f8", "uid": "u-1", "controller": True}
#: The driver manager's words when its GPU pod eviction could not take every GPU pod and it may not drain
#: (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0, as logrus writes it).
NOT_DRAINED = (
    'time="2026-12-06T10:00:00Z" level=error msg="cannot proceed until all GPU pods are drained from the node"'
)


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _pod(name: str, **extra: Any) -> dict[str, Any]:
    """A GPU pod ml/<name> on n1 as the API server returns it: Running and Ready, owned by a ReplicaSet."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "trainer"}, "ownerReferences": [RS_OWNER]},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    for path, value in extra.items():
        section, _, key = path.partition("__")
        pod[section][key] = value
    return pod


def _pdb(name: str = "trainer", **spec: Any) -> dict[str, Any]:
    """A PodDisruptionBudget over app=trainer as the API server returns it, its status as the disruption controller
    writes it (kubernetes/kubernetes pkg/controller/disruption; reason InsufficientPods at zero)."""
    status = {"currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2, "disruptionsAllowed": 0}
    status.update(spec.pop("status", {}))
    allowed = status["disruptionsAllowed"] > 0
    status["conditions"] = [
        {
            "type": "DisruptionAllowed",
            "status": "True" if allowed else "False",
            "reason": "SufficientPods" if allowed else "InsufficientPods",
            "message": "",
            "lastTransitionTime": "2026-12-06T09:00:00Z",
        }
    ]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}}, **(spec or {"minAvailable": 2})},
        "status": {"observedGeneration": 1, **status},
    }


def _objects(*objs: dict[str, Any]) -> Callable[[SimCluster], None]:
    def edit(sim: SimCluster) -> None:
        if not any(o["kind"] == "Namespace" for o in objs):
            sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        for obj in objs:
            sim.cluster.create(copy.deepcopy(obj))

    return edit


def _node(*, cordoned: bool = True, labels: dict[str, str] | None = None, **annotations: str) -> Callable[..., None]:
    def edit(sim: SimCluster) -> None:
        patch: dict[str, Any] = {"spec": {"unschedulable": cordoned or None}}
        meta: dict[str, Any] = {}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        if meta:
            patch["metadata"] = meta
        sim.cluster.patch(NODE, name="n1", patch=patch)

    return edit


def _policy(driver: dict[str, Any]) -> Callable[[SimCluster], None]:
    def edit(sim: SimCluster) -> None:
        (policy,) = sim.cluster.list(NVIDIA_CLUSTER_POLICY)
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch={"spec": {"driver": driver}})

    return edit


def _manager(log: str = "", *, env: dict[str, str] | None = None, crashing: bool = False) -> Any:
    """The driver pod on n1 held in its k8s-driver-manager init container; ``env``: its spec's environment."""
    running = {"name": "k8s-driver-manager", "state": {"running": True}}
    state = crash_looping("k8s-driver-manager", 3) if crashing else running
    held = {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "n1",
        "init": [state],
        "logs": {"k8s-driver-manager": log} if log else {},
    }
    if env is None:
        return held

    def with_env(sim: SimCluster) -> None:
        _apply(sim.cluster, held)
        driver = next(p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("nvidia-driver-daemonset"))
        init = {"name": "k8s-driver-manager", "image": "k8s-driver-manager:v0.9.0"}
        init["env"] = [{"name": k, "value": v} for k, v in env.items()]  # type: ignore[assignment]
        sim.cluster.patch(
            POD, name=driver["metadata"]["name"], namespace="gpu-operator", patch={"spec": {"initContainers": [init]}}
        )

    return with_env


# -- the driver manager ------------------------------------------------------------------------------------------


def test_a_budget_at_zero_holds_the_driver_managers_eviction_and_is_relaxed_by_name() -> None:
    report = diagnosed(OPERATOR, _objects(_pod("trainer-0"), _pdb()), _node(), _manager())
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert root.action is not None and root.action.op is FixOp.PATCH_WORKLOAD
    assert root.action.target == "PodDisruptionBudget/ml/trainer"
    assert root.action.changes["patch"] == {"spec": {"minAvailable": 1}}
    assert "kubectl -n ml patch poddisruptionbudget trainer" in root.fix
    assert "kubectl -n ml delete pod trainer-0" in root.fix
    assert any("disruptionsAllowed 0" in e for e in root.evidence)
    assert "Cannot evict pod as it would violate the pod's disruption budget." in root.cause
    assert any(e.endswith("DRAIN_TIMEOUT_SECONDS=0s (no timeout: it retries for ever)") for e in root.evidence)


def test_a_budget_whose_other_pods_are_unhealthy_is_not_relaxed_but_the_pod_deleted() -> None:
    pdb = _pdb(status={"currentHealthy": 1})
    (root,) = _roots(diagnosed(OPERATOR, _objects(_pod("trainer-0"), pdb), _node(), _manager()))
    assert root.action is not None and root.action.op is FixOp.DELETE and root.action.target == "ml/trainer-0"
    assert "currentHealthy < desiredHealthy" in root.fix


def test_a_budget_with_room_left_holds_nothing() -> None:
    pdb = _pdb(status={"disruptionsAllowed": 1, "currentHealthy": 3})
    roots = _roots(diagnosed(OPERATOR, _objects(_pod("trainer-0"), pdb), _node(), _manager()))
    assert not any("PodDisruptionBudget" in " ".join(r.evidence) for r in roots)


def test_two_budgets_over_one_pod_are_named_as_the_eviction_apis_refusal() -> None:
    edits = _objects(_pod("trainer-0"), _pdb("a", status={"disruptionsAllowed": 1}), _pdb("b"))
    (root,) = _roots(diagnosed(OPERATOR, edits, _node(), _manager()))
    assert "more than one PodDisruptionBudget" in root.cause and "a, b" in root.cause


def test_an_emptydir_pod_refused_by_the_eviction_sets_the_driver_managers_key_keeping_the_policys_others() -> None:
    pod = _pod("trainer-0", spec__volumes=[{"name": "scratch", "emptyDir": {}}])
    env = [{"name": "ENABLE_AUTO_DRAIN", "value": "false"}]
    report = diagnosed(
        OPERATOR, _objects(pod), _policy({"manager": {"env": env}}), _node(), _manager(NOT_DRAINED, crashing=True)
    )
    (root,) = _roots(report)
    assert root.link == "driver" and "cannot delete Pods with local storage" in root.cause
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes["spec"]["driver"]["manager"]["env"] == [
        *env,
        {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "true"},
    ]
    assert "kubectl -n ml delete pod trainer-0" in root.fix
    assert any("emptyDir volume(s) scratch" in e for e in root.evidence)


def test_an_emptydir_pod_under_delete_emptydir_data_is_no_blocker() -> None:
    pod = _pod("trainer-0", spec__volumes=[{"name": "scratch", "emptyDir": {}}])
    env = {"ENABLE_GPU_POD_EVICTION": "true", "DRAIN_DELETE_EMPTYDIR_DATA": "true"}
    roots = _roots(diagnosed(OPERATOR, _objects(pod), _node(), _manager(env=env)))
    assert not any("local storage" in r.cause for r in roots)


def test_a_bare_gpu_pod_is_drained_with_force_from_the_pods_own_environment() -> None:
    pod = _pod("notebook", metadata__ownerReferences=[])
    env = {"ENABLE_GPU_POD_EVICTION": "true", "DRAIN_USE_FORCE": "false"}
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod), _node(), _manager(env=env)))
    assert "cannot delete Pods that declare no controller" in root.cause
    assert (
        root.action is not None
        and {"name": "DRAIN_USE_FORCE", "value": "true"} in (root.action.changes["spec"]["driver"]["manager"]["env"])
    )
    forced = {**env, "DRAIN_USE_FORCE": "1"}
    roots = _roots(diagnosed(OPERATOR, _objects(pod), _node(), _manager(env=forced)))
    assert not any("declare no controller" in r.cause for r in roots)


def test_a_pod_without_a_gpu_is_not_the_gpu_pod_evictions_but_the_node_drains() -> None:
    cpu = _pod("web", metadata__ownerReferences=[])
    cpu["spec"]["containers"][0]["resources"] = {}
    cpu["metadata"]["labels"] = {"app": "web"}
    evict_only = {"ENABLE_GPU_POD_EVICTION": "true", "ENABLE_AUTO_DRAIN": "false"}
    roots = _roots(diagnosed(OPERATOR, _objects(cpu), _node(), _manager(env=evict_only)))
    assert not any("ml/web" in r.cause for r in roots)
    drains = {"ENABLE_GPU_POD_EVICTION": "false", "ENABLE_AUTO_DRAIN": "true", "DRAIN_POD_SELECTOR_LABEL": "app=web"}
    roots = _roots(diagnosed(OPERATOR, _objects(cpu), _node(), _manager(env=drains)))
    assert any("node drain" in r.cause and "ml/web" in r.cause for r in roots)
    elsewhere = {**drains, "DRAIN_POD_SELECTOR_LABEL": "app=batch"}
    roots = _roots(diagnosed(OPERATOR, _objects(cpu), _node(), _manager(env=elsewhere)))
    assert not any("ml/web" in r.cause for r in roots)


def test_a_terminating_pod_kept_by_a_finalizer_has_its_finalizer_removed() -> None:
    pod = _pod(
        "trainer-0",
        metadata__deletionTimestamp="2026-12-06T09:00:00Z",
        metadata__finalizers=["example.com/checkpoint"],
    )
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod), _node(), _manager()))
    assert root.action is not None and root.action.op is FixOp.PATCH_WORKLOAD
    assert root.action.changes["patch"] == {"metadata": {"finalizers": None}}
    assert root.fix.startswith('kubectl -n ml patch pod trainer-0 --type merge -p \'{"metadata":{"finalizers":null}}\'')
    assert "example.com/checkpoint" in root.cause


#: kubectl's drain helper retrying an eviction the API server refused (kubernetes/kubectl pkg/drain/drain.go@v0.34.9:
#: "error when evicting pods/%q -n %q (will retry after 5s): %v"), as the driver manager's drain prints it.
RETRYING = (
    'error when evicting pods/"notebook" -n "ml" (will retry after 5s): '
    "Cannot evict pod as it would violate the pod's disruption budget.\n"
)


def test_a_pod_the_drains_log_shows_evicted_passed_its_filters_and_is_held_by_its_budget() -> None:
    pod = _pod("notebook", metadata__ownerReferences=[])
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod, _pdb()), _node(), _manager(RETRYING)))
    assert "declare no controller" not in root.cause and "PodDisruptionBudget ml/trainer" in root.cause
    assert root.action is not None and root.action.target == "PodDisruptionBudget/ml/trainer"


def test_a_claim_holding_pod_the_upgrade_waits_on_without_a_dra_plugin_is_force_deleted_without_the_managers_note() -> (
    None
):
    pod = _pod("trainer-0", metadata__deletionTimestamp="2026-12-06T09:00:00Z")
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one-gpu"}]
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod), _node(labels={STATE: "pod-deletion-required"})))
    assert root.id == "driver.upgrade-held" and "no DRA kubelet plugin runs ready" in root.cause
    assert root.fix.startswith("kubectl -n ml delete pod trainer-0 --force --grace-period=0")
    assert "k8s-driver-manager" not in root.fix
    assert any(e == "no DRA kubelet plugin pod on n1" for e in root.evidence)


def test_the_upgrade_controller_owning_the_drain_leaves_the_driver_manager_out() -> None:
    edits = _objects(_pod("trainer-0"), _pdb())
    roots = _roots(diagnosed(OPERATOR, edits, _node(**{"nvidia.com/gpu-driver-upgrade-enabled": "true"}), _manager()))
    assert not any("PodDisruptionBudget" in r.cause for r in roots)


def test_a_driver_manager_on_a_node_not_cordoned_and_no_drain_line_is_not_judged_a_drain() -> None:
    roots = _roots(diagnosed(OPERATOR, _objects(_pod("trainer-0"), _pdb()), _node(cordoned=False), _manager()))
    assert not any("PodDisruptionBudget" in r.cause for r in roots)


#: The driver manager's line as its GPU pod eviction starts (NVIDIA/k8s-driver-manager internal/kubernetes/client.go
#: @v0.12.0, logrus' text format), then its error when the deletion does not finish (same file, "failed to delete all
#: GPU pods: %w" around kubectl's drain helper's "global timeout reached: %v", kubernetes/kubectl pkg/drain/drain.go).
EVICTING = (
    "time=2026-12-06T10:00:00Z level=info msg=Identifying GPU pods to delete\n"
    'time=2026-12-06T10:05:00Z level=error msg="failed to delete all GPU pods: global timeout reached: 5m0s"\n'
)


def test_the_driver_managers_own_eviction_line_on_a_node_not_cordoned_names_the_pod_that_holds_it() -> None:
    pod = _pod("trainer-0", metadata__deletionTimestamp="2026-12-06T09:59:00Z")
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one-gpu"}]
    edits = (_objects(pod), _node(cordoned=False), _manager(EVICTING, crashing=True))
    (root,) = _roots(diagnosed(OPERATOR, *edits))
    assert "pod ml/trainer-0" in root.cause and "no DRA kubelet plugin runs ready" in root.cause
    assert root.fix.startswith("kubectl -n ml delete pod trainer-0 --force --grace-period=0")
    assert "k8s-driver-manager that skips the eviction" in root.fix
    # Without its eviction line, nothing says the driver manager is draining.
    quiet = _roots(diagnosed(OPERATOR, _objects(pod), _node(cordoned=False), _manager(crashing=True)))
    assert not any("trainer-0" in r.cause for r in quiet)


#: NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0, as logrus writes the returned error.
CLAIMS_HELD = (
    'time="2026-12-06T10:00:00Z" level=error msg="cannot drain the DRA kubelet-plugin: pod(s) still hold GPU '
    'resource claims: ml/trainer-0"'
)


def test_claim_holders_where_the_upgrade_owns_the_drain_are_deleted_by_name_or_left_to_the_upgrade() -> None:
    pod = _pod("trainer-0")
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one-gpu"}]
    node = _node(
        cordoned=False,
        labels={"nvidia.com/gpu.deploy.dra-driver": "true"},
        **{"nvidia.com/gpu-driver-upgrade-enabled": "true"},
    )
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod), node, _manager(CLAIMS_HELD, crashing=True)))
    assert root.link == "driver" and "ml/trainer-0" in root.cause
    assert root.action is not None and root.action.op is FixOp.DELETE and root.action.target == "ml/trainer-0"
    assert "kubectl label node n1 nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite" in root.fix
    # Without the DRA driver on the node the driver manager has no plugin to stop: no such wait.
    plain = _node(cordoned=False, **{"nvidia.com/gpu-driver-upgrade-enabled": "true"})
    roots = _roots(diagnosed(OPERATOR, _objects(pod), plain, _manager(CLAIMS_HELD, crashing=True)))
    assert not any(r.action is not None and r.action.target == "ml/trainer-0" for r in roots)


# -- the upgrade controller --------------------------------------------------------------------------------------

STATE = "nvidia.com/gpu-driver-upgrade-state"


def test_a_node_failed_on_an_emptydir_gpu_pod_sets_pod_deletion_delete_emptydir_and_retries() -> None:
    pod = _pod("trainer-0", spec__volumes=[{"name": "scratch", "emptyDir": {}}])
    (root,) = _roots(diagnosed(OPERATOR, _objects(pod), _node(labels={STATE: "upgrade-failed"})))
    assert (root.id, root.link) == ("driver.upgrade-held", "driver")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes["spec"] == {"driver": {"upgradePolicy": {"podDeletion": {"deleteEmptyDir": True}}}}
    assert "Helm driver.upgradePolicy.gpuPodDeletion.deleteEmptyDir" in root.fix
    assert "kubectl label node n1 nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite" in root.fix
    # A driver pod that fails itself is its own root: the node may be upgrade-failed for it.
    crash = {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "n1"}
    crash["containers"] = [crash_looping("nvidia-driver-ctr")]
    roots = _roots(diagnosed(OPERATOR, _objects(pod), _node(labels={STATE: "upgrade-failed"}), crash))
    assert roots and not any(r.id == "driver.upgrade-held" for r in roots)


def test_a_node_left_upgrade_failed_with_nothing_holding_it_is_labelled_upgrade_required_to_retry() -> None:
    # NVIDIA/k8s-operator-libs pkg/upgrade: upgrade-failed is left by the controller's own reading of the driver pod
    # or by the node's label set back to upgrade-required, on which it retries and uncordons at the end.
    (root,) = _roots(diagnosed(OPERATOR, _node(labels={STATE: "upgrade-failed"})))
    assert (root.id, root.link, root.node) == ("driver.upgrade-failed", "driver", "n1")
    assert "cordoned" in root.cause
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {STATE: "upgrade-required"}
    assert "kubectl label node n1 nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite" in root.fix
    # Not cordoned, the node still upgrades no further; a node upgrade-done is no finding.
    (root,) = _roots(diagnosed(OPERATOR, _node(cordoned=False, labels={STATE: "upgrade-failed"})))
    assert root.id == "driver.upgrade-failed" and "upgrades no further" in root.cause
    assert not _roots(diagnosed(OPERATOR, _node(cordoned=False, labels={STATE: "upgrade-done"})))
    # A driver pod that fails itself is its own root, as for a node failed on its pods.
    crash = {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "n1"}
    crash["containers"] = [crash_looping("nvidia-driver-ctr")]
    roots = _roots(diagnosed(OPERATOR, _node(labels={STATE: "upgrade-failed"}), crash))
    assert roots and not any(r.id == "driver.upgrade-failed" for r in roots)


def test_a_node_in_drain_required_is_held_by_the_budget_of_a_pod_the_drain_selects() -> None:
    drain = {"upgradePolicy": {"drain": {"enable": True, "podSelector": "app=trainer", "timeoutSeconds": 0}}}
    edits = (_objects(_pod("trainer-0"), _pdb(maxUnavailable=0)), _policy(drain))
    (root,) = _roots(diagnosed(OPERATOR, *edits, _node(labels={STATE: "drain-required"})))
    assert root.id == "driver.upgrade-held" and "upgrade controller's node drain" in root.cause
    assert root.action is not None and root.action.changes["patch"] == {"spec": {"maxUnavailable": 1}}
    skipped = _pod("trainer-0", metadata__labels={"app": "trainer", "nvidia.com/gpu-driver-upgrade-drain.skip": "true"})
    edits = (_objects(skipped, _pdb(maxUnavailable=0)), _policy(drain))
    roots = _roots(diagnosed(OPERATOR, *edits, _node(labels={STATE: "drain-required"})))
    assert not any(r.id == "driver.upgrade-held" for r in roots)
    other = {"upgradePolicy": {"drain": {"enable": True, "podSelector": "app=other"}}}
    roots = _roots(
        diagnosed(
            OPERATOR, _objects(_pod("trainer-0"), _pdb()), _policy(other), _node(labels={STATE: "drain-required"})
        )
    )
    assert not any(r.id == "driver.upgrade-held" for r in roots)


def test_a_node_waiting_for_jobs_without_a_timeout_names_them_and_the_timeout() -> None:
    wait = {"upgradePolicy": {"waitForCompletion": {"podSelector": "app=trainer", "timeoutSeconds": 0}}}
    edits = (_objects(_pod("trainer-0")), _policy(wait), _node(labels={STATE: "wait-for-jobs-required"}))
    (root,) = _roots(diagnosed(OPERATOR, *edits))
    assert "ml/trainer-0" in root.cause and "timeoutSeconds 0" in root.cause
    assert root.action is not None
    assert root.action.changes["spec"]["driver"]["upgradePolicy"]["waitForCompletion"]["timeoutSeconds"] > 0
    timed = {"upgradePolicy": {"waitForCompletion": {"podSelector": "app=trainer", "timeoutSeconds": 600}}}
    roots = _roots(
        diagnosed(
            OPERATOR, _objects(_pod("trainer-0")), _policy(timed), _node(labels={STATE: "wait-for-jobs-required"})
        )
    )
    assert not any(r.id == "driver.upgrade-held" for r in roots)


# -- the MIG manager ---------------------------------------------------------------------------------------------


def test_a_pending_mig_change_waiting_on_a_plugin_pod_stuck_terminating_force_deletes_it_then_restarts() -> None:
    """NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go@v0.15.0 (waitForPodsToBeDeleted): the manager waits for
    the paused device plugin's pod on the node to be gone before it changes the layout."""
    scenario = (
        "name: t\nstack: gpu-operator\npolicy:\n  mig: {strategy: mixed}\nnodes:\n"
        "  - {name: n1, mig: {config: all-1g.10gb, state: pending}}\n"
    )

    def stuck(sim: SimCluster) -> None:
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-device-plugin-daemonset"}
        meta = {
            "name": "nvidia-device-plugin-daemonset-x7k2p",
            "namespace": "gpu-operator",
            "labels": {"app": "nvidia-device-plugin-daemonset"},
            "ownerReferences": [{**owner, "uid": "u-ds", "controller": True, "blockOwnerDeletion": True}],
            "deletionTimestamp": "2026-12-06T09:00:00Z",
            "deletionGracePeriodSeconds": 30,
        }
        container = {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "nvidia-device-plugin", "ready": False, "restartCount": 0, "state": {"running": {}}}
            ],
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"nodeName": "n1", "containers": [container]},
        }
        sim.cluster.create({**pod, "status": status})

    (root,) = _roots(diagnosed(scenario, stuck))
    assert (root.id, root.link) == ("mig.pending", "mig") and "MIG manager" in root.cause
    assert root.action is not None and root.action.op is FixOp.DELETE and root.action.changes["force"] is True
    assert root.action.target.startswith("gpu-operator/nvidia-device-plugin")
    assert (
        "--force --grace-period=0" in root.fix and "kubectl -n gpu-operator delete pod nvidia-mig-manager" in root.fix
    )


# -- reading PodDisruptionBudgets --------------------------------------------------------------------------------


def test_budgets_are_listed_only_where_a_node_drains_and_travel_through_a_dump(tmp_path: Path) -> None:
    sim = build(parse_scenario(OPERATOR))
    _objects(_pod("trainer-0"), _pdb())(sim)
    before = sim.cluster.calls.snapshot().get("list", 0)
    assert gather(sim.cluster).pdbs == []
    quiet = sim.cluster.calls.snapshot().get("list", 0) - before
    _node()(sim)
    snap = gather(sim.cluster)
    assert [p["metadata"]["name"] for p in snap.pdbs] == ["trainer"]
    assert sim.cluster.calls.snapshot().get("list", 0) - before == 2 * quiet + 1
    write_dump(sim.cluster, tmp_path)
    assert [p["metadata"]["name"] for p in read_dump(tmp_path).pdbs] == ["trainer"]
    (tmp_path / "poddisruptionbudgets.json").unlink()
    assert "poddisruptionbudgets" in read_dump(tmp_path).absent
    assert sim.cluster.list(PDB)


def test_a_live_cluster_reads_the_budget_of_a_cordoned_node_with_one_list_more() -> None:
    """LiveCluster over kmock on loopback HTTP, as `kubectl gpuchain doctor` runs: the budget holding the driver
    manager's eviction comes from one list more, which only a node that drains asks for."""
    sim = build(parse_scenario(OPERATOR))
    _objects(_pod("trainer-0"), _pdb())(sim)
    _apply(sim.cluster, _manager())
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        for kind in (NODE, NVIDIA_CLUSTER_POLICY, RUNTIME_CLASS, DAEMONSET, POD, PDB):
            for obj in sim.cluster.list(kind):
                meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")}
                live.create({**obj, "metadata": meta})
        live.calls.reset()
        quiet = run_doctor(live)
        live.patch(NODE, name="n1", patch={"spec": {"unschedulable": True}})
        live.calls.reset()
        report = run_doctor(live)
    assert not any("PodDisruptionBudget" in r.cause for r in _roots(quiet))
    (root,) = _roots(report)
    assert root.action is not None and root.action.target == "PodDisruptionBudget/ml/trainer"
    assert report.api_calls == {"list": quiet.api_calls["list"] + 1}
