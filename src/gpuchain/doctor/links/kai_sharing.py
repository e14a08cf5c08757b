"""KAI Scheduler's GPU sharing: the pods it gives a fraction of a GPU, and those its binder hands the GPU in a form the
node's CDI-mode runtime cannot resolve.

KAI (kai-scheduler/KAI-Scheduler) shares a GPU without the device plugin: its binder places a resource reservation pod
(namespace and app label ``kai-resource-reservation`` by default, pkg/common/constants/constants.go) that requests the
whole ``nvidia.com/gpu`` and carries the GPU's UUID in the annotation ``run.ai/reserve_for_gpu_index``
(pkg/binder/binding/resourcereservation/resource_reservation.go), and gives each pod that asks for a share (annotation
``gpu-fraction`` or ``gpu-memory``) the label ``runai-gpu-group`` of that reservation and, by its gpusharing plugin
(pkg/binder/plugins/gpusharing/gpu_sharing.go PreBind), NVIDIA_VISIBLE_DEVICES naming the reserved GPU: the bare UUID,
or with the binder's ``--cdi-enabled=true`` the CDI name ``k8s.device-plugin.nvidia.com/gpu=<uuid>``. So a fraction pod
sees a GPU it does not request, and rightly: the reservation pod holds and counts it.

A runtime in CDI mode resolves each device as a CDI name, so a bare UUID from a binder without ``--cdi-enabled`` names
no device its specs define and the fraction pod's container is never created (KAI-Scheduler#47, "Adding
`--cdi-enabled=true` to the binder solved the problem."). KAI's own operator decides that mode as its binder should
(pkg/operator/operands/binder/resources.go isCdiEnabled, from v0.10.0): the ClusterPolicy's ``cdi.enabled`` and either
``cdi.default`` or a GPU Operator of v25.10.0 or later. How a user turns the binder's CDI on changed with KAI's chart:
its Deployment's own ``--cdi-enabled`` flag before v0.6.0 (cmd/binder/app/options.go@v0.4.4), the Helm value
``binder.cdi`` from v0.6.0 (deployments/kai-scheduler/templates/services/binder.yaml@v0.6.0), ``binder.cdiEnabled``
(the kai-config's spec.binder.cdiEnabled) from v0.14.0 (templates/kai-config.yaml@v0.14.0).
"""

from __future__ import annotations

import re
from typing import Any

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import refused_message
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.releases import operator_release
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.releases import release_of
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

RESERVATION_ANNOTATION = "run.ai/reserve_for_gpu_index"
GPU_GROUP = "runai-gpu-group"
#: The annotations with which a pod asks KAI for a share of a GPU (a portion, or an amount of its memory).
SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
#: The CDI name KAI's binder gives the shared GPU with --cdi-enabled (gpu_sharing.go CdiDeviceNameBase).
CDI_NAME = "k8s.device-plugin.nvidia.com/gpu="
BINDER_IMAGE = "kai-scheduler/binder"
BINDER_FLAG = "--cdi-enabled"
#: The first GPU Operator release whose ``cdi.enabled`` alone puts the runtime in CDI mode (KAI's
#: gpuOperatorVersionDefaultCDIDeprecated).
CDI_BY_DEFAULT_OPERATOR = "v25.10.0"
#: The binder's CDI switch by KAI release, newest first: (since, Helm value), "" for the Deployment's own flag.
CDI_SWITCHES = (((0, 14), "binder.cdiEnabled"), ((0, 6), "binder.cdi"), ((0, 0), ""))
#: The runtime's words for a CDI device no spec defines (catalog.yaml).
UNRESOLVABLE = "cdi.unresolvable-devices"
_TAG = re.compile(re.escape(BINDER_IMAGE) + r":v?(\d+)\.(\d+)")


def _annotations(pod: Obj) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def reserved_groups(pods: list[Obj]) -> set[str]:
    """The ``runai-gpu-group`` of each KAI reservation pod among ``pods`` (one node's): the GPUs KAI shares there."""
    return {
        str(labels_of(p).get(GPU_GROUP))
        for p in pods
        if RESERVATION_ANNOTATION in _annotations(p) and labels_of(p).get(GPU_GROUP)
    }


def kai_share(pod: Obj, groups: set[str]) -> bool:
    """Is ``pod`` one KAI gave a share of a GPU a reservation pod on its node holds (``groups``: `reserved_groups`)?"""
    return any(a in _annotations(pod) for a in SHARE_ANNOTATIONS) and str(labels_of(pod).get(GPU_GROUP)) in groups


def runtime_cdi_mode(ctx: Context) -> str:
    """Why the node's runtime resolves devices as CDI names, as KAI's operator reads the ClusterPolicy ("" where it
    does not): ``cdi.enabled`` with ``cdi.default``, or with a GPU Operator of v25.10.0 or later."""
    cdi = (((ctx.policy_obj or {}).get("spec") or {}).get("cdi")) or {}
    if cdi.get("enabled") is not True:
        return ""
    if cdi.get("default") is True:
        return "ClusterPolicy spec.cdi.enabled=true, cdi.default=true"
    running = release_of(operator_release(ctx)[0], "gpu-operator")
    least = release_of(CDI_BY_DEFAULT_OPERATOR, "gpu-operator")
    if running is not None and least is not None and not running < least:
        return f"ClusterPolicy spec.cdi.enabled=true on GPU Operator {operator_release(ctx)[0]}"
    return ""


def _binder(ctx: Context) -> Obj | None:
    """KAI's binder pod, by its image (looked for once a diagnosis, and only once a fraction pod failed)."""
    if "kai_binder" not in ctx.memo:
        ctx.memo["kai_binder"] = next(
            (p for p in ctx.snapshot.pods if any(BINDER_IMAGE in str(c.get("image", "")) for c in _containers(p))),
            None,
        )
    found = ctx.memo["kai_binder"]
    return found if isinstance(found, dict) else None


def _containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _cdi_flag(binder: Obj) -> str:
    """The binder's ``--cdi-enabled`` argument as given ("" where it has none)."""
    for c in _containers(binder):
        for arg in c.get("args") or []:
            if str(arg).startswith(BINDER_FLAG):
                return str(arg)
    return ""


def _switch(binder: Obj | None) -> tuple[Fix | None, str]:
    """The change that starts ``binder`` with CDI on, by its KAI release, and the words for it."""
    tag = next((m for c in _containers(binder or {}) if (m := _TAG.search(str(c.get("image", ""))))), None)
    release = (int(tag.group(1)), int(tag.group(2))) if tag else None
    value = next((v for since, v in CDI_SWITCHES if release is not None and release >= since), None)
    if binder is not None and value == "":
        owner: dict[str, Any] = next(iter((binder.get("metadata") or {}).get("ownerReferences") or ()), {})
        deployment = str(owner.get("name", "binder")).rsplit("-", 1)[0] if owner.get("kind") == "ReplicaSet" else ""
        target = f"Deployment/{namespace_of(binder) or 'kai-scheduler'}/{deployment or 'binder'}"
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": f"{BINDER_FLAG}=true"}]
        action = Fix(
            FixOp.PATCH_WORKLOAD,
            target,
            {"patch": patch, "type": "json", "recreate": False, NOT_SIMULATED: "KAI's binder is not simulated"},
        )
        return action, f"adds {BINDER_FLAG}=true to KAI's binder"
    if value:
        return None, (
            f"helm upgrade kai-scheduler <KAI's chart> -n {namespace_of(binder or {}) or 'kai-scheduler'} "
            f"--reuse-values --set {value}=true   # starts KAI's binder with {BINDER_FLAG}=true"
        )
    return None, (
        f"start KAI's binder with {BINDER_FLAG}=true (Helm value binder.cdiEnabled=true from KAI v0.14.0, "
        f"binder.cdi=true from v0.6.0, the binder Deployment's own {BINDER_FLAG}=true argument before)"
    )


def binder_without_cdi(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """KAI fraction pods on ``view``'s node that the runtime refuses for an unresolvable CDI device, the runtime in CDI
    mode (`runtime_cdi_mode`) and KAI's binder not started with ``--cdi-enabled=true``: the binder handed the shared
    GPU as a bare UUID. The root is the toolkit link (the runtime that fails to inject the device, as the case of a
    reservation pod on runc); the repair is the binder's flag, or the runtime out of CDI mode."""
    groups = reserved_groups(view.workloads)
    shares = [p for p in apps if any(a in _annotations(p) for a in SHARE_ANNOTATIONS) and GPU_GROUP in labels_of(p)]
    refused = [(p, m) for p in shares if (m := catalog.find(refused_message(view, p), UNRESOLVABLE)) is not None]
    if not refused:
        return None
    mode = runtime_cdi_mode(ctx)
    binder = _binder(ctx)
    flag = _cdi_flag(binder) if binder is not None else ""
    if not mode or flag.endswith("=true") or CDI_NAME in refused[0][1].line:
        return None
    action, how = _switch(binder)
    again = " && ".join(f"kubectl delete pod -n {namespace_of(p)} {name_of(p)}" for p, _ in refused[:3])
    fix = f"{ctx.stack.render(action)}   # {how}" if action is not None else how
    fix += (
        f"; then {again} (KAI binds them again with the GPU's CDI name {CDI_NAME}<uuid>); or take the runtime out of "
        "CDI mode (ClusterPolicy cdi.default=false) where nothing else needs it"
    )
    held = [p for p in refused if str(labels_of(p[0]).get(GPU_GROUP)) in groups]
    return node_finding(
        view,
        fid="toolkit.kai-share-not-cdi",
        sev=Severity.ERROR,
        link="toolkit",
        cause="pods that KAI Scheduler gave a share of a GPU cannot start: the node's runtime resolves devices as CDI "
        "names, and KAI's binder, not started with --cdi-enabled=true, handed them the shared GPU as a bare UUID, "
        "which no CDI spec on the node defines, so the runtime cannot inject it.",
        evidence=[
            "fraction pods refused: " + ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p, _ in refused[:5]),
            *refused[0][1].evidence("runtime says"),
            f"runtime in CDI mode: {mode}",
            f"KAI binder {namespace_of(binder)}/{name_of(binder)}: {flag or f'no {BINDER_FLAG} argument (false)'}"
            if binder is not None
            else "KAI's binder pod not in the dump",
            f"GPU held for them by a KAI reservation pod on this node (label {GPU_GROUP})" if held else "",
        ],
        fix=fix,
        action=action,
    )
