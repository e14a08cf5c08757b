"""Apply a doctor fix (`gpuchain.doctor.model.Fix`) to a scenario's facts, as the real change would.

A scenario holds facts, not symptoms, so a fix is applied where the real change lands: a node
label changes the node group's labels, opt-outs, device plugin config or MIG request; a
ClusterPolicy patch is merged into the scenario's policy; work on the node itself (reimage,
restart containerd, create /dev/char links, upgrade the host driver) changes the node fact it
names (``changes["fact"]``); a hardware action (replace or reset a GPU) clears the lost GPUs.
Rebuilding the scenario then shows what the cluster looks like after the fix. A label on one
node of a group changes the whole group (the doctor names every node of a group alike).
Only the doctor's fix tests apply fixes in simulation, so this lives with them, not in gpuchain.sim.
"""

from __future__ import annotations

from typing import Any

from gpuchain.common.labels import DEPLOY_PREFIX, DEVICE_PLUGIN_CONFIG, MIG_CONFIG, MIG_CONFIG_STATE
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, POD, Cluster
from gpuchain.mig.agent import State as MigState
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import build
from gpuchain.sim.scenario import MigFacts, NodeGroup, Scenario


class UnsupportedFix(ValueError):
    """The simulator has no fact for this change (the test names it rather than passing silently)."""


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): objects merge, None removes, anything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _group_of(scenario: Scenario, node: str) -> int:
    for i, g in enumerate(scenario.nodes):
        if node in g.node_names():
            return i
    raise UnsupportedFix(f"no node {node!r} in scenario {scenario.name!r}")


def _label(group: NodeGroup, key: str, value: str | None) -> dict[str, Any]:
    """The NodeGroup fields a label change touches."""
    if key == DEVICE_PLUGIN_CONFIG:
        return {"device_plugin_config": value}
    if key == MIG_CONFIG:
        return {"mig": MigFacts(config=value) if value is not None else None}
    if key == MIG_CONFIG_STATE:
        return {} if value is None else {"mig": group.mig.model_copy(update={"state": value}) if group.mig else None}
    if key.startswith(DEPLOY_PREFIX):
        suffix = key.removeprefix(DEPLOY_PREFIX)
        rest = [o for o in group.opt_out if o != suffix]
        return {"opt_out": [*rest, suffix] if value == "false" else rest}
    labels = {k: v for k, v in group.labels.items() if k != key}
    return {"labels": labels if value is None else {**labels, key: value}}


def _node_fact(group: NodeGroup, fact: str) -> dict[str, Any]:
    name, _, value = fact.partition(":")
    if name == "secure-boot":
        return {"secure_boot": False}
    if name == "inotify":
        return {"inotify_exhausted": False}
    if name == "registration":
        return {"registration_lost": False}
    if name == "node-problem":
        return {"node_problems": [p for p in group.node_problems if p != value]}
    if name == "runtime-version":
        return {"container_runtime": value}
    if name == "runtime":
        return {"runtime_configured": True}
    if name == "dev-char":
        return {"lost_device_rules": False}
    if name == "kernel":
        return {"kernel": value}
    if name == "host-driver":
        return {"host_driver": value}
    if name == "driver-version":
        return {"driver_version": value or None}
    if name == "kubelet":
        return {"stale_allocations": False}
    if name == "mig-applied" and group.mig is not None:
        # The layout (or the GPU's mode) repaired and the MIG manager restarted: it applies the layout.
        return {"mig": group.mig.model_copy(update={"state": MigState.SUCCESS, "reason": ""})}
    if name == "replace-gpu":
        return {"lost_gpus": []}
    raise UnsupportedFix(f"node fact {fact!r} is not simulated")


def apply_fix(scenario: Scenario, fix: Fix) -> Scenario:
    """The scenario after ``fix``; UnsupportedFix when the simulator has no fact for it (or the fix
    says why it cannot be simulated, ``NOT_SIMULATED``)."""
    if NOT_SIMULATED in fix.changes:
        raise UnsupportedFix(str(fix.changes[NOT_SIMULATED]))
    if fix.op is FixOp.PATCH_POLICY:
        spec = dict(fix.changes.get("spec") or {})
        update: dict[str, Any] = {}
        exporter = dict(spec.get("dcgmExporter") or {})
        if {"repository", "image", "version"} & set(exporter):
            # NVIDIA's exporter image: the fact "this node's exporter cannot load DCGM" was about the old
            # one. The simulator renders the GPU Operator's own images whatever the policy says, so the
            # image keys themselves are not kept in the (gpuchain-validated) scenario policy.
            update["nodes"] = [g.model_copy(update={"exporter_down": False}) for g in scenario.nodes]
            rest = {k: v for k, v in exporter.items() if k not in ("repository", "image", "version")}
            spec = {**spec, "dcgmExporter": rest} if rest else {k: v for k, v in spec.items() if k != "dcgmExporter"}
        update["policy"] = _merge(scenario.policy, spec)
        return scenario.model_copy(update=update)
    if fix.op is FixOp.DELETE and fix.changes.get("kind") == "Pod":
        # The DaemonSet starts a new pod on the same node: what the old one held is gone.
        pod = str(fix.changes.get("name", ""))
        node = next((n for n in _pod_nodes(scenario, pod)), None)
        if node is None:
            raise UnsupportedFix(f"no operand pod {pod!r} in scenario {scenario.name!r}")
        fix = Fix(FixOp.NODE, node, {"fact": fix.changes.get("fact", "")})
    if fix.op in (FixOp.LABEL_NODE, FixOp.NODE, FixOp.HARDWARE):
        index = _group_of(scenario, fix.target)
        group = scenario.nodes[index]
        if fix.op is FixOp.LABEL_NODE:
            for key, value in fix.changes.items():
                group = group.model_copy(update=_label(group, key, value))
        else:
            group = group.model_copy(update=_node_fact(group, str(fix.changes.get("fact", ""))))
        nodes = [*scenario.nodes[:index], group, *scenario.nodes[index + 1 :]]
        return scenario.model_copy(update={"nodes": nodes})
    if fix.op is FixOp.INSTALL and fix.changes.get("fact") == "nfd":
        return scenario.model_copy(update={"nodes": [g.model_copy(update={"nfd": True}) for g in scenario.nodes]})
    if fix.op is FixOp.INSTALL and fix.changes.get("fact") == "policy":
        # The chart renders the ClusterPolicy from its values again: the scenario's policy.
        return scenario.model_copy(update={"policy_deleted": False})
    if fix.op is FixOp.INSTALL and str(fix.changes.get("fact", "")).startswith("stack:"):
        stack = str(fix.changes["fact"]).removeprefix("stack:")
        return scenario.model_copy(update={"stack": stack, "namespace": str(fix.changes.get("namespace"))})
    raise UnsupportedFix(f"{fix.op.value} fixes are not simulated")


def _pod_nodes(scenario: Scenario, pod: str) -> list[str]:
    """The node an operand pod of the built scenario runs on (pods are named per node)."""
    sim = build(scenario)
    return [
        str(p["spec"].get("nodeName"))
        for p in sim.cluster.list(POD)
        if p["metadata"]["name"] == pod and p["spec"].get("nodeName")
    ]


def apply_to_cluster(cluster: Cluster, fix: Fix) -> None:
    """Apply a fix that changes API objects to a simulated cluster, as kubectl would: create an object
    (``kubectl apply -f``), merge-patch the ClusterPolicy, delete an object. The change lands on
    the API, not on a node fact; other ops change facts (`apply_fix`) and UnsupportedFix names them."""
    if fix.op is FixOp.CREATE:
        cluster.create(dict(fix.changes))
    elif fix.op is FixOp.PATCH_POLICY:
        kind = next(
            (k for k in (CLUSTER_POLICY, NVIDIA_CLUSTER_POLICY) if cluster.get_or_none(k, name=fix.target) is not None),
            None,
        )
        if kind is None:
            raise UnsupportedFix(f"no ClusterPolicy {fix.target!r} in the cluster")
        cluster.patch(kind, name=fix.target, patch=dict(fix.changes))
    elif fix.op is FixOp.DELETE:
        ch = fix.changes
        kind = {"Pod": POD, "DaemonSet": DAEMONSET}.get(str(ch.get("kind")))
        if kind is None:
            raise UnsupportedFix(f"deleting a {ch.get('kind')} is not simulated")
        cluster.delete(kind, name=str(ch["name"]), namespace=str(ch["namespace"]))
    else:
        raise UnsupportedFix(f"{fix.op.value} fixes change scenario facts: use apply_fix")
