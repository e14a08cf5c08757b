"""Who owns a chain component's pod, and what a person changes to repair it: the DaemonSet, the Helm release
that rendered it, or the stack's policy where an operator owns the DaemonSet. Pure readers of the snapshot,
shared by the links' checks and the evidence read across them."""

from __future__ import annotations

from gpuchain.common.remember import remembered
from gpuchain.doctor.context import Context
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.structs import CHARTS
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import TOOLKIT, Operand

#: The labels NVIDIA's charts give their DaemonSets (k8s-device-plugin deployments/helm/.../_helpers.tpl
#: ``nvidia-device-plugin.labels``): the release, and the chart's appVersion whose ``v<appVersion>`` tag
#: is the image the chart's templates were written for (``nvidia-device-plugin.fullimage``).
HELM_RELEASE, HELM_APP_VERSION, HELM_CHART = "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"


def owner_ds(pod: Obj) -> str:
    """The name of the DaemonSet that owns ``pod`` ("" when none does)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == "DaemonSet":
            return str(ref.get("name"))
    return ""


@remembered
def _daemonsets_by_key(daemonsets: list[Obj]) -> dict[tuple[str, str], Obj]:
    """The snapshot's DaemonSets by (namespace, name), the first of each key as a scan in list order finds it:
    built once a diagnosis, since dozens of checks ask for a pod's DaemonSet on each of thousands of nodes."""
    out: dict[tuple[str, str], Obj] = {}
    for d in daemonsets:
        out.setdefault((str((d.get("metadata") or {}).get("namespace")), name_of(d)), d)
    return out


def owner_daemonset(ctx: Context, pod: Obj) -> Obj:
    """The DaemonSet that owns ``pod``, from the snapshot ({} when none there does)."""
    name = owner_ds(pod)
    if not name:
        return {}
    namespace = str((pod.get("metadata") or {}).get("namespace"))
    return _daemonsets_by_key(ctx.snapshot.daemonsets).get((namespace, name), {})


def runtime_class_of(ctx: Context, pod: Obj) -> str:
    """The RuntimeClass ``pod`` runs under: its own ``runtimeClassName``, else its DaemonSet's pod template's ("" where
    neither names one). The DaemonSet controller makes every pod from the template (a rolling update replaces the ones
    made before a change), so a pod that does not name it yet -- or a dump that trimmed the pod -- still shows through
    its owner how the cluster runs that component."""
    own = (pod.get("spec") or {}).get("runtimeClassName")
    if own:
        return str(own)
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    return str(template.get("runtimeClassName") or "")


def volumes_spec(ctx: Context, pod: Obj) -> Obj:
    """The spec that shows ``pod``'s volumes and its containers' volumeMounts and env: its own where it lists volumes,
    else its DaemonSet's pod template. The live read leaves a Pod's volumes and volumeMounts out (`Cluster.
    list_readonly`); the DaemonSet controller made the pod from that template, so it mounts what the template does."""
    own = pod.get("spec") or {}
    if own.get("volumes"):
        return own
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    return template or own


def chart_of(ctx: Context, labels: dict[str, str]) -> tuple[str, str, str]:
    """The chart a DaemonSet's Helm labels name: its name, the reference a fix upgrades it by (the repo alias of
    gpuchain's known charts) and its version; helm.sh/chart is ``<chart name>-<chart version>``."""
    name, _, version = str(labels.get(HELM_CHART, "")).rpartition("-")
    chart = next(
        (c.chart for c in CHARTS.values() if name and c.chart.endswith("/" + name)),
        ctx.stack.chart.chart if ctx.stack.chart is not None else name or "<chart>",
    )
    return name, chart, version


def repair_target(ctx: Context, *, pod: Obj, operand: Operand) -> str:
    """The object a person changes to repair ``pod``'s component: the policy's section where the stack's
    operator owns its DaemonSet (a change to the DaemonSet itself is undone at the next reconcile), the
    Helm release that rendered it (its ``app.kubernetes.io/instance`` label), else the DaemonSet."""
    ns = namespace_of(pod) or ctx.namespace
    ds = owner_daemonset(ctx, pod)
    where = f"DaemonSet {ns}/{name_of(ds) if ds else owner_ds(pod) or ctx.ds(operand)}"
    if ns == ctx.namespace and ctx.policy_obj is not None:
        return f"spec.{operand.spec_key} of {ctx.policy_ref} (its operator owns {where})"
    release = ((ds.get("metadata") or {}).get("labels") or {}).get(HELM_RELEASE)
    return f"the values of Helm release {release} in {ns} ({where})" if release else where


def toolkit_env(ctx: Context, *, pod: Obj | None, values: dict[str, str]) -> Fix:
    """The container toolkit's env set to ``values``: in the stack's policy (spec.toolkit.env, every other variable
    kept, since a merge patch replaces the whole list) where an operator owns the toolkit, else on the DaemonSet
    that runs ``pod`` (the stack's toolkit DaemonSet when there is no pod). The toolkit reads its runtime settings
    only from its env (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer flags' EnvVars)."""
    if ctx.policy_obj is not None:
        keep = [{"name": e.name, "value": e.value} for e in ctx.policy.toolkit.env if e.name not in values]
        env = [*keep, *({"name": k, "value": v} for k, v in values.items())]
        return Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}}})
    ds = owner_ds(pod or {}) or ctx.ds(TOOLKIT)
    return Fix(FixOp.SET_ENV, f"{namespace_of(pod or {}) or ctx.namespace}/{ds}", {"env": dict(values)})


#: The kubelet's own waiting message for a container it restarts ("back-off %s restarting failed container=%s
#: pod=%s", kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go@v1.34.4): no word of the container's.
BACK_OFF = "back-off "


def silent(text: str) -> bool:
    """Did a failing container leave no word of its own: no line, or only the kubelet's back-off message?"""
    return all(ln.strip().startswith(BACK_OFF) for ln in text.splitlines() if ln.strip())
