"""The release that repairs a defect the evidence shows (releases.yaml): a chart's fixed release, an image's fixed
tag set where the image comes from (the stack's policy for its own operand, else the DaemonSet), or, for a
toolkit on the host, the release to move to if it runs an older one. Shared by the operand, workload and MIG
findings, so every release fix is rendered one way."""

from __future__ import annotations

import json

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.driver_running import release_key, running_driver
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import HELM_APP_VERSION, HELM_CHART, HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.releases import (
    MOVED,
    NEWEST,
    Defect,
    Move,
    defects,
    fixed_image,
    image_version,
    lineage,
    moved_image,
    newer_image,
    release_of,
    version_of,
)
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import OPERANDS, Operand


def release_repair(
    ctx: Context, *, view: NodeView, pod: Obj | None, operand: Operand, shown: tuple[Defect, ...]
) -> Known | None:
    """The release that repairs a defect of ``shown`` (the releases whose defect the evidence shows, releases.yaml)
    on ``pod``: where the Helm chart that renders it is an affected release, the chart's fixed release; where one of
    its images is, that image at the fixed release, set where it comes from (the stack's policy for its own
    operand, else the DaemonSet, as no stack ships a release for it); with no pod (a toolkit installed on the
    host, whose version no object shows), the release to move to if it runs an older one. None where the pod runs
    a release the defect does not affect."""
    shown = tuple(d for d in shown if d.holds(ctx.policy_obj))
    if any(d.driver for d in shown):
        # A release that does not support a driver branch is the repair only under a driver of that branch.
        driver = running_driver(ctx, view)
        shown = tuple(d for d in shown if d.under(release_key(driver.release) if driver else None))
    operator = operator_repair(ctx, shown=shown)
    if operator is not None:
        return operator
    pod, operand = _component_pod(view, pod, operand, shown)
    if pod is None:
        hit = next((d for d in shown if d.by == "image"), None)
        if hit is None:
            return None
        if not hit.fixed_in:
            return Known(
                cause=f"{hit.name} releases from {hit.affected[0]} have a known issue here: {hit.cause}",
                evidence=(f"release note: {hit.line}", hit.cite()),
                action=None,
                fix=f"# if its {hit.name} is {hit.affected[0]} or later, {hit.workaround} (the workaround its release "
                "notes document; no release has fixed it)",
            )
        back = f" (or back to {hit.last_good})" if hit.last_good else ""
        # A range with a release before it that had no such defect (last_good) is named by both ends.
        runs = f"is {hit.affected[0]} or later and predates" if hit.last_good else "predates"
        return Known(
            cause=f"{hit.name} releases before {hit.fixed_in} have a known defect here: {hit.cause}",
            evidence=(f"release note: {hit.line}", hit.cite()),
            action=None,
            fix=f"# if its {hit.name} {runs} {hit.fixed_in}, upgrade the {hit.name} to >= {hit.fixed_in}{back} on "
            f"{view.name} (or in the node image that carries it){_until(hit)}",
        )
    ns = namespace_of(pod) or ctx.namespace
    ds = owner_daemonset(ctx, pod)
    labels = (ds.get("metadata") or {}).get("labels") or {}
    release = labels.get(HELM_RELEASE)
    name, chart, version = chart_of(ctx, labels)
    hit = next(
        (d for d in shown if d.by == "chart" and release and d.component in lineage(name) and d.covers(version, name)),
        None,
    )
    if hit is not None:
        return Known(
            cause=f"It is a known defect of the {name} chart {version}, fixed in {hit.fixed_in}: {hit.cause}",
            evidence=(f"DaemonSet {ns}/{name_of(ds)}: chart {name}-{version}", f"release note: {hit.line}", hit.cite()),
            action=None,
            fix=f"helm upgrade {release} {chart} -n {ns} --version {hit.fixed_in} --reuse-values   # the chart "
            f"release that fixed it{_until(hit)}",
        )
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        image = str(container.get("image", ""))
        component, tag = image_version(image)
        named = [d for d in shown if d.by == "image" and d.component in lineage(component)]
        if not named:
            continue
        hit = next((d for d in named if d.covers(tag, component)), None)
        if hit is None:
            return None  # it runs a release the defect does not affect
        action, fix = set_release(
            ctx,
            pod=pod,
            operand=operand,
            container=str(container.get("name")),
            image=fixed_image(image, hit),
            helper=HELPERS.get(component, ""),
        )
        back = f" (or back to {hit.last_good})" if hit.last_good else ""
        values = f", and image.tag in the values of Helm release {release}" if release and action is None else ""
        evidence = (f"container {container.get('name')}: {image}", f"release note: {hit.line}", hit.cite())
        if not hit.fixed_in:
            return _open_issue(hit, f"{hit.name} {tag}", evidence)
        return Known(
            cause=f"It is a known defect of {hit.name} {tag}, fixed in {hit.fixed_in}: {hit.cause}",
            evidence=evidence,
            action=action,
            fix=f"{fix}   # {hit.name} {hit.fixed_in}, the release that fixed it{back}{values}{_until(hit)}",
        )
    return None


def _images(pod: Obj | None) -> set[str]:
    """The image names (repositories' last parts) ``pod``'s init and main containers run."""
    spec = (pod or {}).get("spec") or {}
    return {
        image_version(str(c.get("image", "")))[0]
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    }


def _component_pod(
    view: NodeView, pod: Obj | None, operand: Operand, shown: tuple[Defect, ...]
) -> tuple[Obj | None, Operand]:
    """The pod (and its operand) on the node that runs the component of an image defect in ``shown``: ``pod`` where it
    does or where no defect names an image, else the operand pod of this node that runs one (a message read in
    another link's pod, e.g. a workload's CUDA error under a toolkit release, is that component's release to move),
    else ``pod``."""
    wanted = {d.component for d in shown if d.by == "image"}
    if not wanted or wanted & {n for i in _images(pod) for n in lineage(i)}:
        return pod, operand
    for other in OPERANDS:
        found = view.pod(other)
        if found is not None and wanted & {n for i in _images(found) for n in lineage(i)}:
            return found, other
    return pod, operand


def _open_issue(hit: Defect, running: str, evidence: tuple[str, ...]) -> Known:
    """A known issue of ``running`` that no release has fixed: its documented workaround is the repair."""
    return Known(
        cause=f"It is a known issue of {running} that no release has fixed yet: {hit.cause}",
        evidence=evidence,
        action=None,
        fix=f"{hit.workaround}   # the workaround its release notes document",
    )


def _noted(hit: Defect) -> str:
    """What the fixed release changed, in its release note's words, so the upgrade says what it repairs ("" where the
    defect quotes no line)."""
    return f" - its release note: {hit.line.replace('``', '')}" if hit.line else ""


def _until(hit: Defect) -> str:
    """The documented workaround of ``hit`` as the step until the fixed release runs ("" where none is named)."""
    return f"; until it runs: {hit.workaround}" if hit.workaround else ""


def operator_release(ctx: Context) -> tuple[str, str]:
    """The GPU Operator release the cluster runs and the Helm release that installed it: the ClusterPolicy's Helm
    labels (helm.sh/chart gpu-operator-<version>, app.kubernetes.io/version), else the tag of the operator pod's
    image; ("", "") where neither shows one. Worked out once per diagnosis (`Context.memo`): every node's finding
    asks the same, and the pods are read where the policy's labels name none."""
    known = ctx.memo.get("operator_release")
    if isinstance(known, tuple):
        return known
    found = ctx.memo["operator_release"] = _operator_release(ctx)
    return found


def operator_at_least(ctx: Context, version: str) -> bool:
    """Whether the cluster's GPU Operator is ``version`` or later: True where the objects show no release (a check of
    a later release's behaviour then warns of it rather than stay silent)."""
    running = release_of(operator_release(ctx)[0], "gpu-operator")
    least = release_of(version, "gpu-operator")
    return running is None or least is None or not running < least


def _operator_release(ctx: Context) -> tuple[str, str]:
    """`operator_release`, read from the objects."""
    installed = installed_release(ctx)
    return installed if installed[0] else (_validator_release(ctx) or _validator_pod_release(ctx), "")


def installed_release(ctx: Context) -> tuple[str, str]:
    """The GPU Operator release as the install itself shows it: the ClusterPolicy's Helm labels, else the operator
    pod's image tag (("", "") where neither does). Unlike `operator_release` it does not fall back on the validator's
    version, a key of the ClusterPolicy like the operand versions a check may suspect of being pins left from an
    older install."""
    labels = ((ctx.policy_obj or {}).get("metadata") or {}).get("labels") or {}
    name, _, version = str(labels.get(HELM_CHART, "")).rpartition("-")
    version = version if name == "gpu-operator" else str(labels.get(HELM_APP_VERSION, ""))
    if version:
        return version, str(labels.get(HELM_RELEASE, ""))
    for pod in ctx.snapshot.pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            image, tag = image_version(str(container.get("image", "")))
            if image == "gpu-operator" and version_of(tag) is not None:
                return tag, ""
    return "", ""


def _operator_numbered(version: str) -> str:
    """``version`` where it is one the GPU Operator has published (v1.0 to v1.11, then calendar versions from
    v22.9.0, its platform-support page), else "": a validator of another numbering is no evidence of a release."""
    numbers = version_of(version)
    if numbers is None or len(numbers) < 2:
        return ""
    major, minor = numbers[0], numbers[1]
    return version if (major == 1 and minor <= OLD_SCHEME_LAST) or major >= CALENDAR_FIRST else ""


def _validator_release(ctx: Context) -> str:
    """The release the ClusterPolicy's validator names, where it is a GPU Operator release: the operator's chart
    sets ``spec.validator.version`` to its own appVersion unless the user pins one (NVIDIA/gpu-operator
    deployments/gpu-operator/templates/clusterpolicy.yaml@a22dbf6: ``.Values.validator.version | default
    .Chart.AppVersion``)."""
    if ctx.stack.policy_inferred:
        # A policy read back from the DaemonSets (stacks/inferred_policy.py) names their templates' tag, not a
        # release the user's chart set: the validator pods that run it say the release (`_validator_pod_release`).
        return ""
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get("validator") or {}
    return _operator_numbered(str(spec.get("version") or ""))


#: The image NVIDIA's operator runs its validators from (the operator-validator DaemonSet and the plugin and CUDA
#: workload validators: NVIDIA/gpu-operator assets/state-operator-validation@v24.9.0, spec.validator's image).
VALIDATOR_IMAGE = "gpu-operator-validator"


def _validator_pod_release(ctx: Context) -> str:
    """The release the stack's validator pods run, where the policy names none that is one: the operator renders
    their image from ``spec.validator``, whose version is its own release unless pinned (`_validator_release`), so a
    dump that lacks the policy's labels, or whose policy names another registry's tag, still shows it in the pods."""
    for pod in ctx.snapshot.pods:
        if namespace_of(pod) != ctx.namespace:
            continue
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            image, tag = image_version(str(container.get("image", "")))
            if image == VALIDATOR_IMAGE and _operator_numbered(tag):
                return tag
    return ""


def operator_repair(ctx: Context, *, shown: tuple[Defect, ...]) -> Known | None:
    """The GPU Operator release that repairs a defect of ``shown`` its own release carries (``by: operator``): the
    chart upgraded to the release that fixed it, with the documented workaround until then (the workaround alone
    where no release fixed it); None where the cluster runs no GPU Operator release one of them affects."""
    version, release = operator_release(ctx) if any(d.by == "operator" for d in shown) else ("", "")
    hit = next((d for d in shown if d.by == "operator" and version and d.covers(version)), None)
    if hit is None:
        return None
    evidence = (f"GPU Operator {version}", f"release note: {hit.line}", hit.cite())
    if not hit.fixed_in:
        return _open_issue(hit, f"the GPU Operator {version}", evidence)
    chart = ctx.stack.chart.chart if ctx.stack.chart is not None else "nvidia/gpu-operator"
    upgrade = (
        f"helm upgrade {release} {chart} -n {ctx.namespace} --version {hit.fixed_in} --reuse-values"
        if release
        else f"# upgrade the GPU Operator to {hit.fixed_in} or later"
    )
    back = f" (or back to {hit.last_good})" if hit.last_good else ""
    return Known(
        cause=f"It is a known defect of the GPU Operator {version}, fixed in {hit.fixed_in}: {hit.cause}",
        evidence=evidence,
        action=None,
        fix=f"{upgrade}   # the GPU Operator release that fixed it{back}{_noted(hit)}{_until(hit)}",
    )


def with_release(ctx: Context, *, view: NodeView, pod: Obj | None, operand: Operand, known: Known, log: str) -> Known:
    """``known`` (a failure a check recognised in ``log``) with, first, the release that repairs it where a message of
    ``log`` is one a release of the running component is known to write (releases.yaml): the check names the
    failure, the release table the repair its maintainers shipped. ``known`` itself where none covers what runs."""
    ids = sorted({e for d in defects() if d.symptom == "log" for e in d.entries})
    found = catalog.find(log, *ids) if ids and log else None
    if found is None:
        return known
    shown = tuple(d for d in defects() if d.symptom == "log" and found.entry.id in d.entries)
    release = release_repair(ctx, view=view, pod=pod, operand=operand, shown=shown)
    if release is None or release.fix in known.fix:
        return known
    return Known(
        cause=f"{known.cause} {release.cause}",
        evidence=(*known.evidence, *(e for e in release.evidence if e not in known.evidence)),
        action=release.action or known.action,
        fix=f"{release.fix}; otherwise: {known.fix.lstrip('# ')}",
    )


#: Images the GPU Operator runs beside an operand's own, set under that operand's section of its ClusterPolicy: the
#: driver manager, the driver pod's init container, is spec.driver.manager (NVIDIA/gpu-operator
#: api/nvidia/v1/clusterpolicy_types.go, DriverSpec.Manager).
HELPERS = {"k8s-driver-manager": "manager"}
#: The GPU Operator's numbering (docs.nvidia.com/datacenter/cloud-native/gpu-operator/22.9.1/platform-support.html):
#: "version 1.11 is the last release that follows the old versioning scheme", v22.9.0 the first calendar version.
OLD_SCHEME_LAST, CALENDAR_FIRST = 11, 22


def set_release(
    ctx: Context,
    *,
    pod: Obj,
    operand: Operand,
    container: str,
    image: str,
    move: Move | None = None,
    helper: str = "",
) -> tuple[Fix | None, str]:
    """``container`` of ``pod`` moved to ``image``: the policy's version of ``operand`` where the stack's policy runs
    it (the operator renders its DaemonSet from the policy, and would undo an edit of it), else the DaemonSet's
    image; the action where there is one, and the fix's text. With ``move`` (``image`` is the image that ships the
    component's releases after its own image ended, `MOVED`), the policy names that image too, and the DaemonSet's
    container gets the command that runs the component in it (or, rendered by the nvidia-device-plugin chart, the
    chart release that runs it from that image). ``helper``: the image is one the operator runs beside the operand's
    own, set under that key of the operand's section (`HELPERS`)."""
    ns = namespace_of(pod) or ctx.namespace
    if ns == ctx.namespace and ctx.policy_obj is not None:
        repository, _, tagged = image.rpartition("/")
        name, _, version = tagged.partition(":")
        where: dict[str, str] = {"repository": repository, "image": name} if move is not None else {}
        section: dict[str, object] = {**where, "version": version}
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {operand.spec_key: {helper: section} if helper else section}},
        )
        return action, ctx.stack.render(action)
    ds = owner_ds(pod) or ctx.ds(operand)
    fix = f"kubectl -n {ns} set image ds/{ds} {container}={image}"
    if move is None:
        return None, fix
    labels = (owner_daemonset(ctx, pod).get("metadata") or {}).get("labels") or {}
    chart, release = chart_of(ctx, labels), labels.get(HELM_RELEASE)
    if release and chart[0] == "nvidia-device-plugin":
        version = image.rpartition(":")[2].lstrip("v")
        upgrade = f"helm upgrade {release} {chart[1]} -n {ns} --version {version}"
        return None, f"{upgrade} --set gfd.enabled=true --reuse-values"
    index = next(
        (i for i, c in enumerate((pod.get("spec") or {}).get("containers") or []) if c.get("name") == container), 0
    )
    patch = [{"op": "add", "path": f"/spec/template/spec/containers/{index}/command", "value": [move.command]}]
    return None, f"{fix} && kubectl -n {ns} patch ds/{ds} --type=json -p '{json.dumps(patch)}'"


def newest_release(ctx: Context, *, pod: Obj | None, operand: Operand, otherwise: str) -> str:
    """The fix for an error of ``pod`` that no release note names (the catalog does not know its line, or knows it
    and no release fact says the running release has it): its component moved to that component's newest release
    where it runs an older one (set where the image comes from, as `set_release` does; in the image that ships it
    where its own image ended at the release it runs, `moved_image`), with ``otherwise`` (the link's own next
    action, the line quoted) after it; ``otherwise`` alone where the pod runs no NVIDIA release older than the
    newest. The newer release is the action: the component's later releases carry its maintainers' fixes, while
    "run the release the stack ships" names none."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        image = str(container.get("image", ""))
        newer, moved = newer_image(image), moved_image(image)
        if pod is None or (newer is None and moved is None):
            continue
        name, tag = image_version(image)
        ctr = str(container.get("name"))
        if moved is not None:
            target, move = moved
            _, fix = set_release(ctx, pod=pod, operand=operand, container=ctr, image=target, move=move)
            return (
                f"{fix}   # {name} {tag} is its own image's last release; its later releases ship in {move.image} "
                f"(since {move.since}), whose newest is {NEWEST[move.image]}; if the error stays: {otherwise}"
            )
        _, fix = set_release(ctx, pod=pod, operand=operand, container=ctr, image=str(newer))
        later = MOVED.get(name)
        since = (
            f" (its own image's last: its later releases ship in {later.image} since {later.since}, newest "
            f"{NEWEST[later.image]})"
            if later is not None
            else ""
        )
        return (
            f"{fix}   # upgrade {name} {tag} -> {NEWEST[name]}, its newest release{since}; if the error stays: "
            f"{otherwise}"
        )
    return f"# {otherwise}"


def carried_repair(ctx: Context, *, pod: Obj, operand: Operand, container: str, command: str) -> Known | None:
    """A container whose image lacks ``command`` because the component it names moved into that image's
    component at a later release (`MOVED`: GFD into the device plugin's image since v0.15.0): that image at its
    newest release, which carries it, set where the image comes from (`set_release`); None where ``command`` is no
    such component or the image already runs a release that carries it."""
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
    image = str(spec.get("image", ""))
    name, tag = image_version(image)
    running = release_of(tag, name)
    for component, move in MOVED.items():
        since = release_of(move.since, name)
        if command not in (component, move.command) or move.image != name or running is None or since is None:
            continue
        if running >= since:
            return None
        target = f"{image.rpartition(':')[0]}:{NEWEST[name]}"
        action, fix = set_release(ctx, pod=pod, operand=operand, container=container, image=target)
        return Known(
            cause=f"{command} ships in {name} only since {move.since}; {tag} predates it.",
            evidence=(),
            action=action,
            fix=f"{fix}   # upgrade {name} {tag} -> {NEWEST[name]}, a release that carries {command} (since "
            f"{move.since})",
        )
    return None
