"""A validation pod of the GPU Operator Pending on a taint of the GPU nodes that it does not tolerate: the link it
validates is the root on those nodes, and the repair is the tolerations the operator gives it.

Besides its DaemonSets, NVIDIA's operator (and from v1.7 its validator) creates bare pods that validate a link: the
1.x operator's ``nvidia-driver-validation`` and ``nvidia-device-plugin-validation`` (assets/state-driver-validation,
state-device-plugin-validation@1.4.0), the validator's ``nvidia-cuda-validator`` and
``nvidia-device-plugin-validator`` workloads (validator/*-workload-validation.yaml@v1.7.0). Each carries only the
``nvidia.com/gpu`` toleration of its manifest in the releases before validation_pods.yaml's ``fixed``; from then on
the validation takes tolerations from the ClusterPolicy. The operator moves on only once the validation passes (its
states are applied in order, each waiting for the last to be ready), so a GPU node tainted for its GPU workloads,
whose taint the policy lets every operand DaemonSet tolerate, still waits forever for the validation: whatever the
links after it show there (no plugin, no capacity) is that wait, never a root of its own.
"""

from __future__ import annotations

from typing import Any

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.releases import operator_release
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.placement import Blocker, pod_blocker, taint_text, tolerations_for
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.doctor.releases import release_of
from gpuchain.doctor.scheduling import Owner, patch_fix
from gpuchain.doctor.validation_pods import ValidationPod, validation_of
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The scheduler's words for a node whose taint the pod does not tolerate (kube-scheduler's TaintToleration plugin,
#: before and after v1.26's rewording).
UNTOLERATED = ("untolerated taint", "that the pod didn't tolerate")


def _kept_off(ctx: Context) -> list[tuple[Obj, ValidationPod, str]]:
    """The operator's validation pods the scheduler leaves Pending on an untolerated taint, with the scheduler's
    words; worked out once per diagnosis from the Pending pods (`Context.pending`), not from every pod."""
    known = ctx.memo.get("validation_kept_off")
    if isinstance(known, list):
        return known
    found = []
    for pod in ctx.pending:
        said = unschedulable_message(pod)
        validation = validation_of(ctx, pod) if said and any(w in said for w in UNTOLERATED) else None
        if validation is not None:
            found.append((pod, validation, str(said)))
    ctx.memo["validation_kept_off"] = found
    return found


def untolerated_validation(ctx: Context, *, view: NodeView, link: str) -> Finding | None:
    """The root of ``link`` on this GPU node where a validation of it (one of the operator's bare validation pods)
    is Pending because a taint of this node is not tolerated, and the taint is all that keeps it off; None
    otherwise."""
    for pod, validation, said in _kept_off(ctx) if ctx.pending else ():
        if validation.link != link:
            continue
        spec = pod.get("spec") or {}
        block = pod_blocker(spec, view.node)
        if block is None or block.kind != "taint":
            continue
        added = tolerations_for(block)
        if pod_blocker({**spec, "tolerations": [*(spec.get("tolerations") or []), *added]}, view.node) is not None:
            continue  # a selector keeps it off too: not this node's validation
        return _finding(ctx, view=view, pod=pod, validation=validation, block=block, added=added, said=said)
    return None


def spec_of(pod: Obj) -> Obj:
    """The pod's spec ({} where it has none)."""
    return pod.get("spec") or {}


def _finding(
    ctx: Context,
    *,
    view: NodeView,
    pod: Obj,
    validation: ValidationPod,
    block: Blocker,
    added: list[dict[str, Any]],
    said: str,
) -> Finding:
    """The finding on ``view`` for ``pod`` kept off by ``block``: on a release that takes the policy's tolerations,
    the policy key given them; on an older release (or one not shown), the release that does, and until then the
    pod's own tolerations."""
    ns, name = namespace_of(pod) or ctx.namespace, name_of(pod)
    taints = ", ".join(taint_text(t) for t in block.taints or (block.detail,))
    running = operator_release(ctx)[0]
    seen, fixed = release_of(running, "gpu-operator"), release_of(validation.fixed, "gpu-operator")
    evidence = [
        f"pod {ns}/{name} Pending: {said}",
        f"taints of {view.name} it does not tolerate: {taints}",
        f"GPU Operator {running}" if running else "",
        f"change: {validation.line} ({validation.source})",
    ]
    cause = (
        f"the operator's {validation.app} pod, which validates the {validation.link} link, is Pending: {view.name} "
        f"carries {taints}, which the pod does not tolerate, so the {validation.link} link is never validated here and "
        "the operator waits for it before the operands that come after (what they lack on this node is that wait)."
    )
    if seen is not None and fixed is not None and not seen < fixed:
        path = validation.key.split(".")
        have = (ctx.policy_obj or {}).get("spec") or {}
        for key in path:
            have = have.get(key) if isinstance(have, dict) else None
        tolerations = [*(have if isinstance(have, list) else []), *added]
        section: dict[str, Any] = {path[-1]: tolerations}
        for key in reversed(path[:-1]):
            section = {key: section}
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": section})
        return node_finding(
            view,
            fid="operand.not-scheduled",
            sev=Severity.ERROR,
            link=validation.link,
            cause=f"{cause} From GPU Operator {validation.fixed} {validation.then}, and it lacks that toleration.",
            evidence=evidence,
            fix=ctx.stack.render(action) + f"   # adds tolerations for {taints}; the operator recreates {name}",
            action=action,
        )
    tolerations = [*(spec_of(pod).get("tolerations") or []), *added]
    action = patch_fix(Owner("Pod", ns, name), {"tolerations": tolerations})
    older = f"GPU Operator {running}" if running else "a GPU Operator release before " + validation.fixed
    return node_finding(
        view,
        fid="operand.not-scheduled",
        sev=Severity.ERROR,
        link=validation.link,
        cause=f"{cause} On {older} the pod takes no toleration from the ClusterPolicy.",
        evidence=evidence,
        fix=f"# upgrade the GPU Operator to {validation.fixed} or later, where {validation.then}; until then: "
        + ctx.stack.render(action)
        + f"   # (or remove the taint {taints} from the GPU nodes)",
        action=action,
    )
