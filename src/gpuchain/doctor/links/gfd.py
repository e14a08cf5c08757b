"""The feature discovery link: its pod, and the nvidia.com/gpu.* labels it should have written."""

from __future__ import annotations

import dataclasses

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, labels_showing, node_finding
from gpuchain.doctor.links.deployed import NFD_PREFIX, nfd_hint, nfd_install, nfd_worker
from gpuchain.doctor.links.gfd_feature_file import feature_file_unread
from gpuchain.doctor.links.gfd_nodefeature import nodefeature_refused
from gpuchain.doctor.links.not_ready import known_not_ready
from gpuchain.doctor.links.operand import RUNNING_WITH_ERRORS, simple, without_plugins_runtime_class
from gpuchain.doctor.links.releases import release_repair, with_release
from gpuchain.doctor.links.toolkit import NO_NVML
from gpuchain.doctor.model import Fix, LinkState, Severity
from gpuchain.doctor.nfd import LABEL_DENIED, master_containers
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.releases import defect
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, GFD

WHAT = "gpu-feature-discovery"
RUNNING = RUNNING_WITH_ERRORS["gfd"]


def _not_ready(ctx: Context, view: NodeView, pod: Obj, state: PodState, log: str) -> Result | None:
    """GFD failing because its container has no NVML while the plugin beside it gets its GPUs through a
    RuntimeClass GFD's pod lacks (None: left to every operand's reading)."""
    known = without_plugins_runtime_class(ctx, view=view, pod=pod, log=log, what=WHAT, nvml_ids=NO_NVML)
    if known is None:
        return None
    known = with_release(ctx, view=view, pod=pod, operand=GFD, known=known, log=log)
    return known_not_ready(view, link="gfd", what=WHAT, state=state, known=known)


def _not_rendered(ctx: Context, view: NodeView) -> Result | None:
    """No GFD on a node whose device plugin comes from a chart release that should render it: the release runs
    the Node Feature Discovery its chart deploys only for GFD (or NFD) enabled, and its chart version is one whose
    own history says it renders no GFD DaemonSet (releases.yaml). The chart's fixed release is the repair."""
    plugin = view.pod(DEVICE_PLUGIN)
    ds = owner_daemonset(ctx, plugin) if plugin is not None and PRODUCT not in view.labels else {}
    template = ((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}  # Helm labels sit on either
    labels = {**(template.get("labels") or {}), **((ds.get("metadata") or {}).get("labels") or {})}
    name, chart, version = chart_of(ctx, labels)
    release, ns = labels.get(HELM_RELEASE), namespace_of(ds)
    found = defect(name, version, "no-gfd") if release else None
    nfd = next(
        (
            name_of(d)
            for d in ctx.snapshot.daemonsets
            if namespace_of(d) == ns
            and nfd_worker(d)
            and ((d.get("metadata") or {}).get("labels") or {}).get(HELM_RELEASE) == release
        ),
        "",
    )
    if found is None or not nfd:
        return None
    return Result(
        LinkState.BROKEN,
        f"chart {name} {version} renders no GFD",
        (
            node_finding(
                view,
                fid="gfd.known-defect",
                sev=Severity.ERROR,
                link="gfd",
                cause=f"no gpu-feature-discovery runs for Helm release {release} ({name} {version}), although it runs "
                f"the Node Feature Discovery its chart deploys for GFD: {found.cause}",
                evidence=[
                    f"DaemonSet {ns}/{name_of(ds)}: {HELM_RELEASE}={release}, chart {name}-{version}",
                    f"DaemonSet {ns}/{nfd} of the same release; no GFD DaemonSet",
                    f"node {view.name} has no {PRODUCT} label",
                    found.cite(),
                ],
                fix=f"helm upgrade {release} {chart} -n {ns} --version {found.fixed_in} --reuse-values   # the chart "
                "release that renders GFD again (gfd.enabled=true)",
            ),
        ),
    )


def _wrong_labels(ctx: Context, view: NodeView) -> Result | None:
    """Labels GFD wrote that its release's own notes say it writes wrongly (releases.yaml, symptom labels: the GPU
    family of a compute capability that release did not know): the release that labels them right is the fix. GFD
    runs and labels, so the chain works; the labels mislead nodeSelectors, a warning."""
    shown = labels_showing(ctx, view)
    release = release_repair(ctx, view=view, pod=view.pod(GFD), operand=GFD, shown=shown) if shown else None
    if release is None:
        return None
    said = ", ".join(sorted({f"{key}={view.labels[key]}" for d in shown for key, _ in d.labels}))
    return Result(
        LinkState.DEGRADED,
        "GPU labels of a release that writes them wrongly",
        (
            node_finding(
                view,
                fid="gfd.known-defect",
                sev=Severity.WARNING,
                link="gfd",
                cause=release.cause,
                evidence=[f"node {view.name}: {said}", *release.evidence],
                fix=release.fix,
                action=release.action,
            ),
        ),
    )


def check_gfd(ctx: Context, view: NodeView) -> Result:
    """Feature discovery: its pod, and the nvidia.com/gpu.* labels it should have written."""
    result = simple(ctx, view=view, operand=GFD, link="gfd", what=WHAT, failing=_not_ready)
    refused = nodefeature_refused(ctx, view) if result.findings[:1] and result.findings[0].id == RUNNING else None
    if refused is not None:
        # GFD runs and its log says the API server refuses its NodeFeature object: a new pod is refused the same way.
        finding = dataclasses.replace(
            result.findings[0],
            cause=f"gpu-feature-discovery runs, but the labels it finds never reach the node: {refused.cause}",
            evidence=(f"pod {name_of(view.pod(GFD) or {})}: Running", *refused.evidence),
            fix=refused.fix,
            action=refused.action,
        )
        return Result(result.state, result.summary, (finding,))
    if result.state is LinkState.SKIPPED:
        return _not_rendered(ctx, view) or result
    if result.state is LinkState.OK and PRODUCT in view.labels:
        return _wrong_labels(ctx, view) or result
    if result.state is not LinkState.OK or PRODUCT in view.labels:
        return result
    nfd = sorted(k for k in view.labels if k.startswith(NFD_PREFIX))
    evidence = [f"node {view.name} has no {PRODUCT} label", pod_state(view.pod(GFD) or {}).describe()]
    if not nfd and ctx.stack.gfd_via_nfd:
        # NVIDIA's GFD hands its labels to Node Feature Discovery (features.d or a NodeFeature object);
        # a node NFD never labelled (its GPU label set by hand) never gets them.
        install = nfd_install()
        action: Fix | None = install
        cause = (
            "gpu-feature-discovery runs, but it hands its labels to Node Feature Discovery and NFD does not run "
            f"on this node (no {NFD_PREFIX}* label at all), so nvidia.com/gpu.* labels never appear and nodeSelectors "
            "on GPU model or memory match nothing."
        )
        evidence.append(f"no {NFD_PREFIX}* label on {view.name}")
        fix = ctx.stack.render(install) + nfd_hint(ctx)
    elif (dropped := _nfd_drops(ctx)) is not None:
        # nfd-master's own log says it refuses labels: its config is what repairs, a new GFD pod would be refused too.
        action = None
        cause = f"gpu-feature-discovery runs but the node has no nvidia.com/gpu.product label: {dropped.entry.cause}"
        evidence += list(dropped.evidence("nfd-master log"))
        fix = "# " + dropped.entry.repair(view.name)
    elif (unread := feature_file_unread(ctx, view)) is not None:
        # GFD's log says it wrote its feature file: it did its part, and a new pod would write the same file.
        action = unread.action
        cause = f"gpu-feature-discovery runs but the node has no nvidia.com/gpu.product label: {unread.cause}"
        evidence += list(unread.evidence)
        fix = unread.fix
    else:
        # GFD writes its labels from what NVML says at its start (and on its sleep interval): a pod that
        # started before the driver answered, or whose NVML init failed, labels nothing until it restarts.
        gfd = view.pod(GFD) or {}
        ns = namespace_of(gfd) or ctx.namespace
        again = Fix.delete_pod(ns, name_of(gfd))
        action = again
        cause = (
            "gpu-feature-discovery runs but the node has no nvidia.com/gpu.product label, so nodeSelectors on GPU "
            "model or memory match nothing; NFD runs here, so GFD did not label (it found no GPU through NVML when "
            "it started, e.g. before the driver was ready) or nfd-master drops its labels."
        )
        fix = ctx.stack.render(again) + (
            "   # a new GFD pod labels the node from NVML again; if the labels still do not appear, let nfd-master "
            "accept the nvidia.com label namespace (its -extra-label-ns / extraLabelNs)"
        )
    return Result(
        LinkState.BROKEN,
        "no nvidia.com/gpu.* labels",
        (
            node_finding(
                view,
                fid="gfd.labels-missing",
                sev=Severity.ERROR,
                link="gfd",
                cause=cause,
                evidence=evidence,
                fix=fix,
                action=action,
            ),
        ),
    )


def _nfd_drops(ctx: Context) -> catalog.Match | None:
    """nfd-master's line for a label it drops, where its log was read (GFD runs on a node without its labels)."""
    for pod, container in master_containers(ctx.snapshot.pods):
        found = catalog.find(ctx.log(pod, container), LABEL_DENIED)
        if found is not None:
            return found
    return None
