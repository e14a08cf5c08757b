"""An operator whose reconcile fails on an API version the cluster's Kubernetes no longer serves, and the operator
release that repairs it.

The API server answers a kind it does not serve at the asked group/version with apimachinery's NoKindMatchError
("no matches for kind %q in version %q", staging/src/k8s.io/apimachinery/pkg/api/meta/errors.go); the operator's
step returns it and controller-runtime logs it as the reconcile's error (catalog entry
gpu-operator.api-version-not-served). Nothing in the cluster can make the old version served again short of an
older Kubernetes: the repair is the operator release that creates the object at the version that replaced it
(removed_apis.yaml, each fact with the change that made it). The Kubernetes release is read from the nodes'
kubelets, which are never newer than the API server they join (Kubernetes' version skew policy), so the highest of
them is a floor of the server's release.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gpuchain.doctor.context import Context
from gpuchain.doctor.links.releases import operator_release
from gpuchain.doctor.node import node_info
from gpuchain.doctor.packaged import packaged_yaml
from gpuchain.doctor.releases import release_of, version_of

#: The catalog entry of that error in an operator's log.
API_NOT_SERVED = "gpu-operator.api-version-not-served"
#: The kind and group/version NoKindMatchError names, with or without the JSON escaping of a zap log line.
NO_KIND = re.compile(r'no matches for kind \\?"(\w+)\\?" in version \\?"([\w.-]+/)?(v\w+)\\?"')


@dataclass(frozen=True, kw_only=True)
class Removed:
    """One API version a Kubernetes release stopped serving and the component release that stopped using it."""

    kind: str
    api: str
    removed: str
    served: str
    component: str
    title: str
    fixed: str
    workaround: str
    source: str
    line: str


@functools.cache
def removed_apis() -> tuple[Removed, ...]:
    """Every entry of removed_apis.yaml."""
    return tuple(Removed(**{k: str(v) for k, v in raw.items()}) for raw in packaged_yaml("removed_apis.yaml"))


def not_served(line: str) -> tuple[str, str] | None:
    """The kind and group/version a NoKindMatchError in ``line`` names ("RuntimeClass", "node.k8s.io/v1beta1")."""
    found = NO_KIND.search(line)
    return (found.group(1), f"{found.group(2) or ''}{found.group(3)}") if found else None


def kubelet_release(ctx: Context) -> str:
    """The highest kubeletVersion among the cluster's nodes ("" where none reports one): the API server runs that
    release or a later one."""
    versions = [(version_of(v) or (), v) for n in ctx.snapshot.nodes if (v := node_info(n).get("kubeletVersion", ""))]
    return max(versions)[1] if versions else ""


@dataclass(frozen=True, kw_only=True)
class ApiRepair:
    """The cause, fix and evidence of an operator stopped on a removed API version."""

    cause: str
    fix: str
    evidence: tuple[str, ...]


def api_repair(ctx: Context, *, line: str, namespace: str) -> ApiRepair | None:
    """The operator release that repairs a reconcile failing with ``line`` (its NoKindMatchError), where
    removed_apis.yaml knows the kind and version and the running release (where one shows) predates the fix; None
    otherwise (the catalog entry's general repair then stands)."""
    named = not_served(line)
    if named is None:
        return None
    kind, api = named
    fact = next((r for r in removed_apis() if r.kind == kind and r.api == api), None)
    if fact is None:
        return None
    running, release = operator_release(ctx)
    seen, fixed = release_of(running, fact.component), release_of(fact.fixed, fact.component)
    if seen is not None and fixed is not None and not seen < fixed:
        return None  # a release that already uses the served version: something else asks for the old one
    kubelet = kubelet_release(ctx)
    on = (
        f"Kubernetes {fact.removed} and later (the nodes' kubelets run {kubelet})"
        if kubelet
        else (f"Kubernetes {fact.removed} and later")
    )
    uses = f"creates its {kind} at {fact.served}" if fact.served else f"creates no {kind} on such a Kubernetes"
    chart = ctx.stack.chart.chart if ctx.stack.chart is not None else "nvidia/gpu-operator"
    upgrade = (
        f"helm upgrade {release} {chart} -n {namespace} --version {fact.fixed} --reuse-values"
        if release
        else f"# upgrade the {fact.title}{f' ({running})' if running else ''} to {fact.fixed} or later "
        f"(helm upgrade <release> {chart} -n {namespace} --version {fact.fixed} --reuse-values)"
    )
    until = f"; until then: {fact.workaround}" if fact.workaround else ""
    return ApiRepair(
        cause=f"the {fact.title}{f' {running}' if running else ''} creates its {kind} at {api}, which {on} no longer "
        f"serve, so its reconcile fails at that step every time and deploys no operand after it; {fact.title} "
        f"{fact.fixed} {uses}.",
        fix=f"{upgrade}   # {fact.title} {fact.fixed} {uses}{until}; or keep the cluster on a Kubernetes release "
        f"before {fact.removed} until the operator is upgraded",
        evidence=(
            *((f"GPU Operator {running}",) if running else ()),
            *((f"status.nodeInfo.kubeletVersion: {kubelet}",) if kubelet else ()),
            f"{api} {kind}: not served from Kubernetes {fact.removed}",
            f"change: {fact.line} ({fact.source})",
        ),
    )
