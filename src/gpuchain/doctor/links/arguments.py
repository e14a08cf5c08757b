"""An operand that refuses its own arguments: the image and the arguments it is started with are of two releases.

Go's flag package (which urfave/cli, the CLI library of NVIDIA's device plugin, GFD and dcgm-exporter, parses with)
stops a program at an argument it does not define: "flag provided but not defined: -<name>", urfave/cli's
"Incorrect Usage:" and the usage text after it (golang/go src/flag/flag.go, urfave/cli command.go@v2.27.1). An
operator renders each operand's arguments for the releases it ships; a version pinned in its ClusterPolicy from an
older operator keeps an image that does not know them. The repair is the pin dropped (the operator's own release of
the operand runs), or, on a stack without a policy, the DaemonSet's image and arguments from one release.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, container_image
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import PodState
from gpuchain.operator.operands import Operand

#: The flag package's refusal (catalog.yaml).
UNDEFINED = "go.flag-not-defined"


def arguments_refused(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """The operand exiting on an argument its image does not define, with the pin that keeps the old image dropped
    from the ClusterPolicy where one pins it (an action), else the image and arguments set from one release; None
    where its log says nothing of the kind."""
    found = catalog.find(log, UNDEFINED)
    if found is None:
        return None
    pod = view.pod(operand)
    image = container_image(pod, state.container or ctx.container(operand))
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get(operand.spec_key) or {}
    pinned = str(spec.get("version") or "") if isinstance(spec, dict) else ""
    cause = (
        f"the {operand.state} container exits on an argument its image{f' {image}' if image else ''} does not define: "
        "the image is another release than the one its arguments were written for"
    )
    evidence = (*found.evidence(), f"image: {image}" if image else "")
    if pinned and ctx.policy_obj is not None and ctx.stack.policy_names_images:
        unpin = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {operand.spec_key: {"version": None}}})
        return Known(
            cause=f"{cause}: {ctx.policy_ref} pins spec.{operand.spec_key}.version={pinned}, an older release than the "
            "one the operator renders the arguments for.",
            evidence=tuple(e for e in (*evidence, f"spec.{operand.spec_key}.version: {pinned}") if e),
            action=unpin,
            fix=ctx.stack.render(unpin) + f"   # drops spec.{operand.spec_key}.version (the pin {pinned}): the "
            "operator runs its own release of the operand, whose arguments it writes; or pin the operator to the "
            "release that pin belongs to",
        )
    ds = owner_ds(pod or {}) or ctx.ds(operand)
    return Known(
        cause=f"{cause}.",
        evidence=tuple(e for e in evidence if e),
        action=None,
        fix=f"# set the image and the arguments of DaemonSet {ds} from one release: the image its chart or operator "
        "ships with these arguments, or the arguments of the image's own release (its --help lists them)",
    )
