"""The container toolkit pointed at k3s's or RKE2's Go template (config.toml.tmpl) instead of a TOML file: what it
says, and the two repairs, the rendered config.toml or the template made plain TOML."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.node import DISTRIBUTIONS, KUBEADM, distribution_of
from gpuchain.doctor.owners import toolkit_env
from gpuchain.operator.operands import TOOLKIT

#: A TOML parser meeting a Go template's ``{{`` where a key should start (pelletier/go-toml's "keys cannot contain {
#: character", its v2's "invalid character at start of key: {"): the file is k3s's or RKE2's config.toml.tmpl.
TEMPLATE = re.compile(r"keys cannot contain \{ character|start of key: \{|\{\{")


def template_repair(ctx: Context, view: NodeView, found: catalog.Match) -> Known:
    """The toolkit was pointed at a Go template (k3s's and RKE2's config.toml.tmpl, which they render into the
    config.toml their containerd loads): its TOML parser stops at the template's first ``{{``. The file containerd
    loads is the one to give it, or the template made plain TOML (what the report behind rancher/rke2#3385 did):
    k3s and RKE2 render a template without expressions to itself."""
    dist = distribution_of(view.node)
    pod = view.pod(TOOLKIT) or {}
    given = {e.name: e.value for e in ctx.policy.toolkit.env} if ctx.policy_obj is not None else {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        given |= {str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or [] if "value" in e}
    named = (given.get(k, "") for k in ("CONTAINERD_CONFIG", "RUNTIME_CONFIG"))
    template = next((v for v in named if v.endswith(".tmpl")), "")
    # k3s and RKE2 render config.toml.tmpl into config.toml beside it; elsewhere, the distribution's own file.
    loaded = template.removesuffix(".tmpl") or dist.containerd_config
    action = toolkit_env(ctx, pod=pod, values={"CONTAINERD_CONFIG": loaded})
    # A template is k3s's or RKE2's; where neither the node nor the env says which, each one's rendered file.
    each = ", ".join(f"on {d.name} CONTAINERD_CONFIG={d.containerd_config}" for d in DISTRIBUTIONS if d is not KUBEADM)
    rendered = "" if template or dist is not KUBEADM else f"; a config.toml.tmpl is k3s's or RKE2's: {each}"
    # Where the template's place is known, the other repair: the template made plain TOML, which renders to itself.
    plain = (
        ""
        if not template and dist is KUBEADM
        else "; or keep the toolkit on the template and make it plain TOML with concrete values, no {{ }} expressions "
        f"(on the node: cp {loaded} {template or loaded + '.tmpl'}), which k3s and RKE2 still render containerd's "
        "config from, so the nvidia runtime the toolkit writes there survives their restarts"
    )
    return Known(
        cause="the container toolkit was pointed at a Go template, not at containerd's config: its TOML parser stops "
        "at the template's first '{', so it configures no nvidia runtime (k3s and RKE2 render config.toml.tmpl "
        f"into the config.toml beside it, the file their containerd loads: here {loaded}).",
        evidence=(*found.evidence(), *([f"toolkit env CONTAINERD_CONFIG={template}"] if template else [])),
        action=action,
        fix=ctx.stack.render(action)
        + "   # the file containerd loads, which the toolkit reads as TOML"
        + rendered
        + plain,
    )
