"""The release that repairs a defect the evidence shows (releases.yaml): a chart's fixed release, an image's fixed
tag set where the image comes from (the stack's policy for its own operand, else the DaemonSet), or, for a
toolkit on the host, the release to move to if it runs an older one. Shared by the operand, workload and MIG
findings, so every release fix is rendered one way."""

from __future__ import annotations

import json

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.releases import (
    MOVED,
    NEWEST,
    Defect,
    Move,
    fixed_image,
    image_version,
    moved_image,
    newer_image,
    version_of,
)
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import Operand


def release_repair(
    ctx: Context, *, view: NodeView, pod: Obj | None, operand: Operand, shown: tuple[Defect, ...]
) -> Known | None:
    """The release that repairs a defect of ``shown`` (the releases whose defect the evidence shows, releases.yaml)
    on ``pod``: where the Helm chart that renders it is an affected release, the chart's fixed release; where one of
    its images is, that image at the fixed release, set where it comes from (the stack's policy for its own
    operand, else the DaemonSet, as no stack ships a release for it); with no pod (a toolkit installed on the
    host, whose version no object shows), the release to move to if it runs an older one. None where the pod runs
    a release the defect does not affect."""
    if pod is None:
        hit = next((d for d in shown if d.by == "image"), None)
        if hit is None:
            return None
        back = f" (or back to {hit.last_good})" if hit.last_good else ""
        return Known(
            cause=f"{hit.name} releases before {hit.fixed_in} have a known defect here: {hit.cause}",
            evidence=(f"release note: {hit.line}", hit.cite()),
            action=None,
            fix=f"# if its {hit.name} predates {hit.fixed_in}, upgrade the {hit.name} to >= {hit.fixed_in}{back} on "
            f"{view.name} (or in the node image that carries it)",
        )
    ns = namespace_of(pod) or ctx.namespace
    ds = owner_daemonset(ctx, pod)
    labels = (ds.get("metadata") or {}).get("labels") or {}
    release = labels.get(HELM_RELEASE)
    name, chart, version = chart_of(ctx, labels)
    hit = next((d for d in shown if d.by == "chart" and release and d.component == name and d.covers(version)), None)
    if hit is not None:
        return Known(
            cause=f"It is a known defect of the {name} chart {version}, fixed in {hit.fixed_in}: {hit.cause}",
            evidence=(f"DaemonSet {ns}/{name_of(ds)}: chart {name}-{version}", f"release note: {hit.line}", hit.cite()),
            action=None,
            fix=f"helm upgrade {release} {chart} -n {ns} --version {hit.fixed_in} --reuse-values   # the chart "
            "release that fixed it",
        )
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        image = str(container.get("image", ""))
        component, tag = image_version(image)
        hit = next((d for d in shown if d.by == "image" and d.component == component), None)
        if hit is None:
            continue
        hit = next((d for d in shown if d.by == "image" and d.component == component and d.covers(tag)), None)
        if hit is None:
            return None  # it runs a release the defect does not affect
        action, fix = set_release(
            ctx, pod=pod, operand=operand, container=str(container.get("name")), image=fixed_image(image, hit)
        )
        back = f" (or back to {hit.last_good})" if hit.last_good else ""
        values = f", and image.tag in the values of Helm release {release}" if release and action is None else ""
        return Known(
            cause=f"It is a known defect of {hit.name} {tag}, fixed in {hit.fixed_in}: {hit.cause}",
            evidence=(f"container {container.get('name')}: {image}", f"release note: {hit.line}", hit.cite()),
            action=action,
            fix=f"{fix}   # {hit.name} {hit.fixed_in}, the release that fixed it{back}{values}",
        )
    return None


def set_release(
    ctx: Context, *, pod: Obj, operand: Operand, container: str, image: str, move: Move | None = None
) -> tuple[Fix | None, str]:
    """``container`` of ``pod`` moved to ``image``: the policy's version of ``operand`` where the stack's policy runs
    it (the operator renders its DaemonSet from the policy, and would undo an edit of it), else the DaemonSet's
    image; the action where there is one, and the fix's text. With ``move`` (``image`` is the image that ships the
    component's releases after its own image ended, `MOVED`), the policy names that image too, and the DaemonSet's
    container gets the command that runs the component in it (or, rendered by the nvidia-device-plugin chart, the
    chart release that runs it from that image)."""
    ns = namespace_of(pod) or ctx.namespace
    if ns == ctx.namespace and ctx.policy_obj is not None:
        repository, _, tagged = image.rpartition("/")
        name, _, version = tagged.partition(":")
        where: dict[str, str] = {"repository": repository, "image": name} if move is not None else {}
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {operand.spec_key: {**where, "version": version}}})
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
    running = version_of(tag)
    for component, move in MOVED.items():
        since = version_of(move.since)
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
