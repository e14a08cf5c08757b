"""Node Feature Discovery's pods failing by their own state, wherever they run.

NFD is an operand of the chain that mostly does not run on GPU nodes: nfd-master and nfd-gc are Deployments the
scheduler places anywhere (often the control plane), and the walk of the GPU nodes never meets them while the
labels they wrote stay on the nodes. A master killed for its memory again and again, or in a crash loop, is still a
broken link: its labels (``feature.node.kubernetes.io/pci-10de.present``, and the nvidia.com labels GFD hands to
it) stop following the nodes, and a leader that dies takes the labelling with it. So its pods are read by their
state (Kubernetes' container status: terminated ``OOMKilled``, waiting ``CrashLoopBackOff``, restartCount) on
whichever node they run, and each finding is filed on the node the failing pod runs on, under the link NFD's labels
feed (`NFD_LINK`).

The repair follows what the state says. An OOM kill under a release whose fix the component's history names
(releases.yaml, symptom ``oom``: nfd-master's non-leader leak) is that release, set where NFD comes from: the GPU
Operator's chart bundles NFD as its ``node-feature-discovery`` subchart (`SUBCHART`), whose values take NFD's own
keys under that prefix (image.tag, master.replicaCount, master.resources: kubernetes-sigs/node-feature-discovery
deployment/helm/node-feature-discovery/values.yaml@v0.16.6), while NFD's own chart takes them bare. Any other OOM kill
is the memory limit raised, in the same values. A crash loop is what its log says (links/nfd_pods.py).
"""

from __future__ import annotations

from collections import Counter

from gpuchain.doctor.context import Context
from gpuchain.doctor.links.nfd_pods import nfd_pods, nfd_repair
from gpuchain.doctor.links.pod_failures import OOM_AGAIN, raised_limit
from gpuchain.doctor.links.releases import installed_release
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.nfd import NFD_LINK
from gpuchain.doctor.owners import HELM_RELEASE
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import Defect, defects, fixed_image, image_version, lineage
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: NFD's roles, as its binaries are named (the command each of its chart's templates runs), and the key of each in
#: its chart's values (kubernetes-sigs/node-feature-discovery deployment/helm/node-feature-discovery/values.yaml
#: @v0.16.6: master, worker, topologyUpdater, topologyGC, gc).
ROLES = (
    ("nfd-topology-updater", "topologyUpdater"),
    ("nfd-topology-gc", "topologyGC"),
    ("nfd-master", "master"),
    ("nfd-worker", "worker"),
    ("nfd-gc", "gc"),
)
#: The values key of the NFD subchart a stack's chart bundles, for the stacks whose chart gpuchain knows
#: (structs.CHARTS): the GPU Operator's names its dependency node-feature-discovery (NVIDIA/gpu-operator
#: deployments/gpu-operator/Chart.yaml@v24.9.2). (The device plugin's chart aliases it nfd, NVIDIA/k8s-device-plugin
#: deployments/helm/nvidia-device-plugin/Chart.yaml@v0.17.0, but its stack carries no chart to upgrade.)
SUBCHART = {"gpu-operator": "node-feature-discovery"}
#: NFD's own chart, as its docs add it (helm repo add nfd https://kubernetes-sigs.github.io/node-feature-discovery/charts).
NFD_CHART = "nfd/node-feature-discovery"
#: The first GPU Operator release whose bundled NFD has nfd-master's non-leader leak fixed, and that NFD
#: (NVIDIA/gpu-operator deployments/gpu-operator/Chart.yaml@v25.3.1: node-feature-discovery v0.17.3).
OPERATOR_FIXED_NFD = ("v25.3.1", "v0.17.3")


def role_of(pod: Obj) -> tuple[str, str]:
    """The NFD role of ``pod`` (nfd-master ...) and its chart values key: the binary its container runs, else the
    role its chart puts in the pod's name (``<release>-master-<hash>``); ("nfd", "") where neither says."""
    spec = pod.get("spec") or {}
    said = " ".join(
        " ".join(str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])])
        for c in spec.get("containers") or []
    )
    for binary, key in ROLES:
        if binary in said or f"-{binary.removeprefix('nfd-')}-" in name_of(pod):
            return binary, key
    return "nfd", ""


def _owner(pod: Obj) -> tuple[str, str]:
    """The controller of ``pod`` as kubectl names it: ("ds", name) for a DaemonSet, ("deploy", name) for a
    ReplicaSet's Deployment (the ReplicaSet's name less its pod-template hash); ("", "") where it has none."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet":
            return "ds", str(ref.get("name", ""))
        if ref.get("kind") == "ReplicaSet":
            return "deploy", str(ref.get("name", "")).rpartition("-")[0]
    parts = name_of(pod).split("-")
    return ("deploy", "-".join(parts[:-2])) if len(parts) > 2 else ("", "")


def _oom_killed(pod: Obj) -> tuple[str, int] | None:
    """The container of ``pod`` the kernel kills for its memory limit again and again, and its restarts: its last
    run (or this one) ended OOMKilled and it restarted OOM_AGAIN times or more, or waits in CrashLoopBackOff."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        reasons = {((s.get("terminated") or {}).get("reason")) for s in (state, last)}
        restarts = int(cs.get("restartCount") or 0)
        looping = (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        if "OOMKilled" in reasons and (restarts >= OOM_AGAIN or looping):
            return str(cs.get("name", "")), restarts
    return None


def _container(pod: Obj, name: str) -> Obj:
    return next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), {})


class _Where:
    """Where NFD's settings are changed: the stack's chart's subchart values, NFD's own Helm release, or (no Helm
    release shows) the controller itself."""

    def __init__(self, ctx: Context, pod: Obj) -> None:
        self.ns = namespace_of(pod) or ctx.namespace
        labels = (pod.get("metadata") or {}).get("labels") or {}
        chart, key = ctx.stack.chart, SUBCHART.get(ctx.stack.id, "")
        self.bundled = chart is not None and bool(key) and self.ns == ctx.namespace
        self.chart = chart.chart if chart is not None and self.bundled else NFD_CHART
        own = labels.get(HELM_RELEASE, "")
        self.release = (
            own or installed_release(ctx)[1] or (chart.release if chart is not None else "") if self.bundled else own
        )
        self.prefix = f"{key}." if self.bundled else ""

    def values(self, settings: str, version: str = "") -> str:
        """``helm upgrade`` of the release with ``settings`` (--set ...), at chart ``version`` where given."""
        at = f" --version {version}" if version else ""
        return f"helm upgrade {self.release} {self.chart} -n {self.ns}{at} --reuse-values {settings}"


def _defect(pod: Obj, container: str, peers: int) -> Defect | None:
    """The known defect (releases.yaml, symptom oom) of the release ``container`` of ``pod`` runs, where it shows in
    that container and under ``peers`` replicas of the pod's role."""
    name, tag = image_version(str(_container(pod, container).get("image", "")))
    return next(
        (
            d
            for d in defects()
            if d.symptom == "oom"
            and d.component in lineage(name)
            and d.covers(tag, name)
            and d.kills(container)
            and peers >= d.replicas
        ),
        None,
    )


def _release_fix(ctx: Context, pod: Obj, container: str, hit: Defect, key: str) -> str:
    """The fixed release of ``hit`` set where NFD comes from, with one replica as the step until it runs."""
    where = _Where(ctx, pod)
    image = str(_container(pod, container).get("image", ""))
    fixed = fixed_image(image, hit)
    single = f"{where.prefix}{key}.replicaCount=1" if key else ""
    until = f"; until it runs: --set {single} (a lone replica is always the leader)" if single and hit.replicas else ""
    operator = (
        f"; or upgrade the GPU Operator to {OPERATOR_FIXED_NFD[0]} or later, which bundles node-feature-discovery "
        f"{OPERATOR_FIXED_NFD[1]}"
        if where.bundled and ctx.stack.id == "gpu-operator"
        else ""
    )
    why = f"   # {hit.name} {hit.fixed_in}, the release that fixed it{operator}{until}"
    if where.release:
        if where.bundled:
            return where.values(f"--set {where.prefix}image.tag={hit.fixed_in}") + why
        return where.values("", version=hit.fixed_in.lstrip("v")).rstrip() + why
    kind, owner = _owner(pod)
    return f"kubectl -n {where.ns} set image {kind or 'deploy'}/{owner} {container}={fixed}" + why


def _limit_fix(ctx: Context, pod: Obj, container: str, limit: str, key: str) -> tuple[str, Fix | None]:
    """The memory limit of ``container`` raised, in the Helm values where a release renders NFD, else on its
    controller (the action)."""
    where = _Where(ctx, pod)
    raised = raised_limit(limit)
    why = f"   # raises {container}'s memory limit ({limit or 'none set'}) to {raised}"
    if where.release and key:
        return where.values(f"--set {where.prefix}{key}.resources.limits.memory={raised}") + why, None
    kind, owner = _owner(pod)
    action = Fix(
        FixOp.SET_LIMITS,
        f"{where.ns}/{owner}",
        {"container": container, "limits": {"memory": raised}, "kind": kind or "deploy"},
    )
    return ctx.stack.render(action) + why, action


def _finding(*, pod: Obj, fid: str, cause: str, evidence: list[str], fix: str, action: Fix | None) -> Finding:
    return Finding(
        id=fid,
        severity=Severity.ERROR,
        link=NFD_LINK,
        cause=cause,
        evidence=tuple(e for e in evidence if e),
        fix=fix,
        node=str((pod.get("spec") or {}).get("nodeName") or "") or None,
        root=True,
        action=action,
    )


def _oom_finding(ctx: Context, pod: Obj, container: str, restarts: int, peers: int) -> Finding:
    role, key = role_of(pod)
    spec = _container(pod, container)
    limit = str(((spec.get("resources") or {}).get("limits") or {}).get("memory") or "")
    node = (pod.get("spec") or {}).get("nodeName")
    evidence = [
        f"pod {namespace_of(pod)}/{name_of(pod)} ({role}) on {node}: container {container} terminated OOMKilled "
        f"(exit 137), {restarts} restarts",
        f"image {spec.get('image', '')}, memory limit {limit or 'none set'}",
        f"{peers} {role} replicas" if peers > 1 else "",
    ]
    cause = (
        f"Node Feature Discovery's {role} is killed by the kernel for its memory"
        + (f" limit ({limit})" if limit else "")
        + " again and again, so the labels it keeps on the nodes stop following them"
    )
    hit = _defect(pod, container, peers)
    if hit is not None:
        return _finding(
            pod=pod,
            fid="nfd.known-leak",
            cause=f"{cause}: a known defect of its release, fixed in {hit.fixed_in}: {hit.cause}",
            evidence=[*evidence, f"release note: {hit.line}", hit.cite()],
            fix=_release_fix(ctx, pod, container, hit, key),
            action=None,
        )
    fix, action = _limit_fix(ctx, pod, container, limit, key)
    return _finding(
        pod=pod,
        fid="nfd.oom-killed",
        cause=f"{cause}; its memory limit is too low for what it serves in this cluster (restarting it changes "
        "nothing).",
        evidence=evidence,
        fix=fix,
        action=action,
    )


def failing_nfd(ctx: Context, found: list[Finding]) -> list[Finding]:
    """A finding for each NFD pod that fails by its own state (OOM-killed again and again, or a crash loop) on any
    node, where the findings ``found`` so far do not already name NFD's failure: on that node (the walk), or for the
    whole cluster (an operator that places nothing for want of NFD's labels, links/operator_idle.py)."""
    pods = nfd_pods(ctx)
    named = [f for f in found if f.link == NFD_LINK and f.severity is Severity.ERROR]
    if not pods or any(f.node is None for f in named):
        return []
    filed = {f.node for f in named}
    peers: Counter[tuple[str, str]] = Counter((namespace_of(p) or "", role_of(p)[0]) for p in pods)
    out: list[Finding] = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node in filed:
            continue
        count = peers[(namespace_of(pod) or "", role_of(pod)[0])]
        killed = _oom_killed(pod)
        if killed is not None:
            out.append(_oom_finding(ctx, pod, killed[0], killed[1], count))
            continue
        state = pod_state(pod)
        if state.status != "CrashLoopBackOff" or state.restarts < OOM_AGAIN:
            continue
        role, _ = role_of(pod)
        fix, evidence, action = nfd_repair(ctx, pod, state, role)
        out.append(
            _finding(
                pod=pod,
                fid="nfd.crash-loop",
                cause=f"Node Feature Discovery's {role} on {node} is in a crash loop, so the labels it keeps on the "
                "nodes stop following them.",
                evidence=evidence,
                fix=fix,
                action=action,
            )
        )
    return out
