"""GFD's NodeFeature object refused: the labels GFD found never reach the node, whatever a new pod would find.

In NodeFeature API mode (its chart's nfd.enableNodeFeatureApi, env GFD_USE_NODE_FEATURE_API) GPU feature discovery
writes its labels into a NodeFeature object ``nvidia-features-for-<node>`` (nfd.k8s-sigs.io) that nfd-master turns
into node labels (NVIDIA/k8s-device-plugin internal/lm/output.go@v0.17.1; NVIDIA/gpu-feature-discovery
internal/lm/labels.go@v0.8.0). It gets the object, then creates or updates it, as its ServiceAccount, and it names it
from NODE_NAME. Its pod keeps running while the API server refuses each write, so the only word of it is GFD's log: a
refusal by RBAC names the verb and resource the ServiceAccount lacks (`rbac.Refusal`), and an object name ending at
the prefix is a container without NODE_NAME. The repair is that rule or that variable; a new pod alone is refused the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.rbac import refusal
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import GFD

#: GFD's NodeFeature output refused (catalog.yaml): by RBAC on create, on get or update, and for want of a node name.
REFUSED = (
    "gpu-feature-discovery.nodefeature-create",
    "gpu-feature-discovery.nodefeature-get-update-forbidden",
    "gpu-feature-discovery.nodefeature-no-node-name",
)
NO_NODE_NAME = "gpu-feature-discovery.nodefeature-no-node-name"
#: The downward API value GFD's charts give NODE_NAME (NVIDIA/gpu-feature-discovery deployments/helm/
#: gpu-feature-discovery/templates/daemonset.yml@v0.8.1, 5eda015).
NODE_NAME = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}


@dataclass(frozen=True, kw_only=True)
class Refused:
    """Why GFD's labels never reach the node, and the change that lets them."""

    cause: str
    evidence: tuple[str, ...]
    fix: str
    action: Fix | None


def _containers(pod: Obj) -> list[str]:
    return [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]


def nodefeature_refused(ctx: Context, view: NodeView) -> Refused | None:
    """GFD's log on this node saying the API server refuses its NodeFeature object, with the rule or the variable
    that repairs it and GFD run again (None where its log, when read, says no such thing)."""
    pod = view.pod(GFD)
    if pod is None:
        return None
    logs = [(c, ctx.log(pod, c)) for c in _containers(pod)]
    said = next(((c, m) for c, log in logs if (m := catalog.find(log, *REFUSED)) is not None), None)
    if said is None:
        return None
    container, match = said
    ns = namespace_of(pod) or ctx.namespace
    again = ctx.stack.render(Fix.delete_pod(ns, name_of(pod)))
    evidence = match.evidence("gpu-feature-discovery log")
    denied = refusal(match.line)
    if match.entry.id == NO_NODE_NAME:
        ds = owner_daemonset(ctx, pod)
        env = {"spec": {"template": {"spec": {"containers": [{"name": container, "env": [NODE_NAME]}]}}}}
        action: Fix | None = Fix(FixOp.PATCH_DAEMONSET, f"{namespace_of(ds) or ns}/{name_of(ds)}", env) if ds else None
        fix = (
            (ctx.stack.render(action) + "   # NODE_NAME from the downward API names its NodeFeature object; ")
            if action is not None
            else "# set NODE_NAME on GFD's container from the downward API (fieldPath spec.nodeName); "
        ) + (
            "and add the create verb to the nodefeatures (nfd.k8s-sigs.io) rule of the ClusterRole its ServiceAccount "
            "is bound to (the gpu-feature-discovery chart 0.8.2 renders both: NODE_NAME from 0.8.1, create from "
            f"0.8.2); then {again}"
        )
        return Refused(cause=match.entry.cause, evidence=evidence, fix=fix, action=action)
    grant = denied.grant() if denied is not None else None
    if denied is None or grant is None:
        return Refused(
            cause=match.entry.cause, evidence=evidence, fix=f"# {match.entry.repair(view.name)}", action=None
        )
    account = ":".join(denied.account or ())
    return Refused(
        cause=f"{match.entry.cause} The API server refuses its ServiceAccount {account} the verb {denied.verb} on "
        f"{denied.qualified}.",
        evidence=(*evidence, denied.describe()),
        fix=ctx.stack.render(grant) + f"   # grant ServiceAccount {account} the {denied.verb} verb on "
        f"{denied.qualified} (or add {denied.verb} to the verbs of that rule in the ClusterRole it is bound to); "
        f"then {again}",
        action=grant,
    )
