"""Moving over from NVIDIA's GPU Operator: import its ClusterPolicy, and notice when it is running.

`import_policy` turns NVIDIA's ``nvidia.com/v1`` ClusterPolicy into gpuchain's, keeping every
key gpuchain accepts, and says for each section what maps, what is ignored and what blocks
(features gpuchain does not have, switched off in the result so the policy applies).

`nvidia_collision` decides whether NVIDIA's operator runs (its Deployment or the DaemonSets its
ClusterPolicy owns, not the ClusterPolicy alone) and would run the same operands as gpuchain:
then the gpuchain operator stands aside, removing its own DaemonSets for those operands, instead
of running two device plugins, two MIG managers, ... on the same nodes (both also name their
DaemonSets ``nvidia-device-plugin-daemonset``, ... and both create RuntimeClass ``nvidia``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from gpuchain.kube import Kind, register_kind
from gpuchain.operator.compat import FEATURES, GPUCHAIN_IMAGE_OPERANDS, NVIDIA_OPERAND_IMAGES, in_effect, value_at
from gpuchain.operator.operands import OPERANDS, Operand, is_gpu_node
from gpuchain.operator.policy import drop_nulls, parse_policy, schema_problems
from gpuchain.operator.spec import RESERVED_LABELS, ClusterPolicySpec, Problem, to_snake

NVIDIA_CLUSTER_POLICY = register_kind(
    Kind(api_version="nvidia.com/v1", kind="ClusterPolicy", plural="clusterpolicies", namespaced=False)
)
NVIDIA_DRIVER = register_kind(
    Kind(api_version="nvidia.com/v1alpha1", kind="NVIDIADriver", plural="nvidiadrivers", namespaced=False)
)

Outcome = Literal["maps", "ignored", "blocks"]

#: Container runtimes as the kubelet reports them (node.status.nodeInfo.containerRuntimeVersion).
_RUNTIMES = {"containerd": "containerd", "cri-o": "crio", "docker": "docker"}


@dataclass(frozen=True, kw_only=True)
class ImportEntry:
    """One line of the import report."""

    key: str
    outcome: Outcome
    what: str
    detail: str


@dataclass
class ImportResult:
    """gpuchain's ClusterPolicy and the report of how NVIDIA's became it."""

    policy: dict[str, Any]
    entries: list[ImportEntry] = field(default_factory=list)

    def of(self, outcome: Outcome) -> list[ImportEntry]:
        """The entries with one outcome."""
        return [e for e in self.entries if e.outcome == outcome]

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the policy, then maps / ignored / blocks."""
        out: dict[str, Any] = {"policy": self.policy}
        for outcome in ("maps", "ignored", "blocks"):
            out[outcome] = [{"key": e.key, "what": e.what, "detail": e.detail} for e in self.of(outcome)]
        return out


class PolicyImportError(ValueError):
    """NVIDIA's policy itself is not valid (its own CRD would have refused it)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _has(spec: dict[str, Any], key: str) -> bool:
    return _get(spec, key) is not None


def _get(spec: dict[str, Any], key: str) -> Any:
    """The raw value at a dotted key, None when absent."""
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _remove(spec: dict[str, Any], key: str) -> None:
    *parents, last = key.split(".")
    node: Any = spec
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _set(spec: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def runtime_of(nodes: Iterable[dict[str, Any]]) -> str | None:
    """The container runtime of the GPU nodes, chosen as NVIDIA's operator chooses it (None: no node says).

    NVIDIA's operator ignores the deprecated ``operator.defaultRuntime`` and reads each GPU node's
    ``containerRuntimeVersion`` (controllers/state_manager.go getRuntime): containerd if any GPU
    node runs it, otherwise the runtime of the last node that reports one.
    """
    runtime: str | None = None
    for node in nodes:
        if not is_gpu_node((node.get("metadata") or {}).get("labels") or {}):
            continue
        version = str(((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion", ""))
        runtime = _RUNTIMES.get(version.partition("://")[0], runtime)
        if runtime == "containerd":
            break
    return runtime


def _feature_entries(spec: dict[str, Any], parsed: ClusterPolicySpec) -> list[ImportEntry]:
    entries = [
        ImportEntry(key=f.key, outcome="maps", what=f.what, detail=f.note)
        for f in FEATURES
        if f.support == "implemented" and _has(spec, f.key)
    ]
    ignored = [
        f
        for f in FEATURES
        if f.support == "ignored" and (f.on(parsed) if f.on is not None else bool(_get(spec, f.key)))
    ]
    entries += [ImportEntry(key=f.key, outcome="ignored", what=f.what, detail=f.note) for f in ignored]
    entries += [
        ImportEntry(
            key=f.switch_key(),
            outcome="blocks",
            what=f.what,
            detail="not supported by gpuchain; switched off in the imported policy",
        )
        for f in in_effect(parsed, "refused")
    ]
    # Switched on but inert (NVIDIA's sample sets vgpuManager.enabled without sandboxWorkloads): kept
    # as they are, and said so, since the report exists to say what does nothing.
    entries += [
        ImportEntry(
            key=f.switch_key(), outcome="ignored", what=f.what, detail=f"no effect here: {f.note}; kept as it is"
        )
        for f in FEATURES
        if f.support == "refused" and f.on is not None and not f.on(parsed) and value_at(parsed, f.switch_key()) is True
    ]
    return entries


def import_policy(
    nvidia: dict[str, Any], *, drivers: Iterable[dict[str, Any]] = (), nodes: Iterable[dict[str, Any]] = ()
) -> ImportResult:
    """gpuchain's ClusterPolicy for NVIDIA's ClusterPolicy ``nvidia`` (with its NVIDIADrivers and nodes, if known).

    Raises PolicyImportError when NVIDIA's policy has keys or values its own schema does not allow.
    """
    spec = drop_nulls(nvidia.get("spec") or {})
    problems = schema_problems(spec)
    if problems:
        raise PolicyImportError(problems)
    parsed = ClusterPolicySpec.model_validate(spec)
    out = copy.deepcopy(spec)
    entries = _feature_entries(spec, parsed)
    for f in in_effect(parsed, "refused"):
        _remove(out, f.key)
    for key in GPUCHAIN_IMAGE_OPERANDS:
        block = out.get(key)
        if isinstance(block, dict) and block.get("image") in NVIDIA_OPERAND_IMAGES:
            ref = f"{block.get('repository', '')}/{block.get('image')}:{block.get('version', '')}"
            for k in ("repository", "image", "version"):
                block.pop(k, None)
            entries.append(
                ImportEntry(
                    key=f"{key}.image",
                    outcome="ignored",
                    what="NVIDIA's operand image",
                    detail=f"{ref} replaced by gpuchain's image",
                )
            )
    labels = (out.get("daemonsets") or {}).get("labels") or {}
    for key in RESERVED_LABELS:
        if key in labels:
            entries.append(
                ImportEntry(
                    key=f"daemonsets.labels.{key}",
                    outcome="ignored",
                    what="a pod label gpuchain sets itself",
                    detail="dropped",
                )
            )
            del labels[key]
    if not _has(spec, "driver.upgradePolicy.autoUpgrade"):
        # NVIDIA upgrades drivers only when asked (absent upgradePolicy: off); gpuchain's default is on.
        _set(out, "driver.upgradePolicy.autoUpgrade", False)
        entries.append(
            ImportEntry(
                key="driver.upgradePolicy.autoUpgrade",
                outcome="maps",
                what="automatic driver upgrades",
                detail="off, NVIDIA's default",
            )
        )
    if _has(spec, "operator.defaultRuntime"):
        # Deprecated by NVIDIA and ignored by its operator: a stale value (old charts wrote "docker")
        # must not reach the toolkit, so it is dropped and the operator detects the runtime.
        _remove(out, "operator.defaultRuntime")
        runtime = runtime_of(nodes)
        now = f"; the nodes report {runtime} now" if runtime else ""
        entries = [e for e in entries if e.key != "operator.defaultRuntime"]
        entries.append(
            ImportEntry(
                key="operator.defaultRuntime",
                outcome="ignored",
                what="container runtime",
                detail=f"dropped: deprecated and ignored by NVIDIA's operator; gpuchain's operator, like NVIDIA's, "
                f"detects the runtime from the GPU nodes{now}",
            )
        )
    for driver in drivers:
        entries.append(
            ImportEntry(
                key=f"NVIDIADriver/{(driver.get('metadata') or {}).get('name', '?')}",
                outcome="blocks",
                what="NVIDIADriver custom resource",
                detail="gpuchain installs one driver from ClusterPolicy driver.*: copy its repository, image, version "
                "there",
            )
        )
    name = str((nvidia.get("metadata") or {}).get("name") or "cluster-policy")
    result = ImportResult(
        {"apiVersion": "gpuchain.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": out}
    )
    check = parse_policy(out)
    if isinstance(check, list):
        entries += [
            ImportEntry(key=p.field, outcome="blocks", what="invalid for gpuchain", detail=p.reason) for p in check
        ]
    result.entries = sorted(entries, key=lambda e: (["maps", "ignored", "blocks"].index(e.outcome), e.key))
    return result


def nvidia_operands(spec: dict[str, Any]) -> list[Operand]:
    """The operands NVIDIA's operator deploys for its ClusterPolicy spec (its defaults when a key is absent)."""
    try:
        parsed = ClusterPolicySpec.model_validate(drop_nulls(spec))
    except ValidationError:
        return list(OPERANDS)  # a policy we cannot read: assume the worst
    # NVIDIA's validator cannot be switched off.
    return [op for op in OPERANDS if op.spec_key == "validator" or getattr(parsed, to_snake(op.spec_key)).enabled]


#: The label NVIDIA's operator Deployment carries, in its Helm chart
#: (deployments/gpu-operator/templates/operator.yaml) and in its OLM bundle's CSV alike.
NVIDIA_OPERATOR_COMPONENT = ("app.kubernetes.io/component", "gpu-operator")


def nvidia_operator_deployments(deployments: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """``namespace/name`` of NVIDIA's operator Deployments that are meant to run (replicas above 0).

    A Deployment scaled to 0 does not count: its ClusterPolicy is then a leftover, not a running operator.
    """
    key, value = NVIDIA_OPERATOR_COMPONENT
    return tuple(
        sorted(
            f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}"
            for d in deployments
            if (d["metadata"].get("labels") or {}).get(key) == value
            and int((d.get("spec") or {}).get("replicas", 1) or 0) > 0
        )
    )


@dataclass(frozen=True, kw_only=True)
class Collision:
    """NVIDIA's operator would run these operands too: who, where, and which."""

    policy: str
    operands: tuple[str, ...]
    daemonsets: tuple[str, ...]
    deployments: tuple[str, ...] = ()

    def message(self) -> str:
        """The condition message: evidence, what collides, what gpuchain did, and the way out."""
        evidence = [f"Deployment {d}" for d in self.deployments] + [f"ClusterPolicy nvidia.com/v1 {self.policy!r}"]
        seen = f"; its DaemonSets: {', '.join(self.daemonsets)}" if self.daemonsets else ""
        return (
            f"NVIDIA's GPU Operator is running ({', '.join(evidence)}{seen}) and deploys "
            f"{', '.join(self.operands)} too: gpuchain removes its own DaemonSets for these and changes nothing "
            "else until one of the two ClusterPolicies disables them (see docs/migrating-from-gpu-operator.md)"
        )


def nvidia_collision(
    nvidia_policies: list[dict[str, Any]],
    *,
    daemonsets: Iterable[dict[str, Any]],
    deployments: Iterable[dict[str, Any]],
    ours: ClusterPolicySpec,
) -> Collision | None:
    """Does NVIDIA's operator run, and would it deploy operands gpuchain's policy ``ours`` deploys?

    NVIDIA's operator is taken to run only on evidence beyond its ClusterPolicy: a DaemonSet that
    an nvidia.com ClusterPolicy owns (its operands run, even with the operator scaled down), or
    NVIDIA's operator Deployment with replicas above 0 (it is about to deploy them). A ClusterPolicy
    with neither is a leftover (an OLM uninstall, a deleted release) and does not stop gpuchain.
    ``daemonsets`` and ``deployments`` are the cluster's, all namespaces.
    """
    if not nvidia_policies:
        return None
    owned = tuple(
        sorted(
            f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}"
            for d in daemonsets
            if any(
                o.get("kind") == "ClusterPolicy" and str(o.get("apiVersion", "")).startswith("nvidia.com/")
                for o in d["metadata"].get("ownerReferences") or []
            )
        )
    )
    running = nvidia_operator_deployments(deployments)
    if not owned and not running:
        return None
    theirs: set[str] = set()
    for p in nvidia_policies:
        theirs |= {op.state for op in nvidia_operands(p.get("spec") or {})}
    both = tuple(op.state for op in OPERANDS if op.state in theirs and getattr(ours, to_snake(op.spec_key)).enabled)
    if not both:
        return None
    name = str(min(nvidia_policies, key=lambda p: str(p["metadata"].get("name")))["metadata"].get("name"))
    return Collision(policy=name, operands=both, daemonsets=owned, deployments=running)
