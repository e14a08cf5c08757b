"""A time-slicing (or MPS) config whose per-resource ``rename`` NVIDIA's device plugin ignores.

NVIDIA's device plugin switches per-resource renaming off when it loads its config, in every release since its config
file (v0.12.0, cmd/nvidia-device-plugin/main.go disableResourceRenamingInConfig; v0.20.0 api/config/v1/replicas.go
disableResoureRenaming): with ``renameByDefault`` false it clears each ``sharing.<strategy>.resources[].rename``, with
it true it sets each to ``<name>.shared`` (ResourceName.DefaultSharedRename), and it warns "Setting the 'rename' field
in sharing.%s.resources is not yet supported in the config. Ignoring..." (NVIDIA/k8s-device-plugin#353, answered with
``renameByDefault``). So a config that renames ``nvidia.com/gpu`` to ``nvidia.com/gpu.shared`` per resource gets its
replicas advertised as ``nvidia.com/gpu``, and a pod that asks for the name the config meant waits forever. The config
the node's plugin reads says so: the key its node label (or the policy's default) names, in the ConfigMap it reads.
"""

from __future__ import annotations

from typing import Any, cast

import yaml

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.doctor.releases import image_version
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: NVIDIA's device plugin image (the GPU Operator's and the chart's); other plugins read renames their own way.
NVIDIA_PLUGIN = "k8s-device-plugin"
#: The sharing strategies whose resources take a ``rename`` (api/config/v1 Sharing: timeSlicing, mps).
STRATEGIES = ("timeSlicing", "mps")
#: DefaultSharedResourceNameSuffix (api/config/v1/resources.go@v0.20.0).
SHARED_SUFFIX = ".shared"


def _ignored(config: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(strategy, resource, rename asked, name advertised) for each per-resource rename the plugin overrides."""
    out = []
    found = config.get("sharing")
    sharing: dict[str, Any] = found if isinstance(found, dict) else {}
    for strategy in STRATEGIES:
        part = sharing.get(strategy)
        if not isinstance(part, dict):
            continue
        by_default = bool(part.get("renameByDefault"))
        for resource in part.get("resources") or []:
            if not isinstance(resource, dict):
                continue
            name, asked = str(resource.get("name") or ""), str(resource.get("rename") or "")
            served = name + SHARED_SUFFIX if by_default else name
            if name and asked and asked != served:
                out.append((strategy, name, asked, served))
    return out


def _nvidia_plugin(view: NodeView) -> bool:
    pod = view.pod(DEVICE_PLUGIN) or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(image_version(str(c.get("image", "")))[0] == NVIDIA_PLUGIN for c in containers)


def _asked(pod: Obj) -> set[str]:
    """The extended resources ``pod``'s containers ask for, by name (a rename may leave the nvidia.com/gpu forms)."""
    spec = pod.get("spec") or {}
    return {
        str(name)
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        for part in ("limits", "requests")
        for name in ((c.get("resources") or {}).get(part) or {})
    }


def _waiting_for(ctx: Context, names: set[str]) -> list[str]:
    """The Pending pods that ask for one of ``names`` and wait on "Insufficient" for it (``namespace/name``)."""
    out = []
    for pod in ctx.pending:
        said = unschedulable_message(pod) or ""
        if any(f"Insufficient {n}" in said for n in names) and _asked(pod) & names:
            out.append(f"{namespace_of(pod)}/{name_of(pod)}")
    return out


def _read(ctx: Context, key: str) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The renames config ``key`` asks for that the plugin ignores, and the pods waiting for them: worked out once
    per key in a diagnosis (`Context.memo`), as most nodes of a cluster read one of a few configs."""
    known = cast("dict[str, tuple[list[tuple[str, str, str, str]], list[str]]]", ctx.memo.setdefault("renames", {}))
    if key not in known:
        text = (ctx.plugin_configs() or {}).get(key)
        try:
            config = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            config = None  # a config the plugin cannot read fails on its own (plugin_config)
        ignored = _ignored(config) if isinstance(config, dict) else []
        waiting = _waiting_for(ctx, {asked for _, _, asked, _ in ignored}) if ignored else []
        known[key] = (ignored, waiting)
    return known[key]


def rename_ignored(ctx: Context, view: NodeView) -> Finding | None:
    """The renames of the config ``view``'s node reads that NVIDIA's plugin ignores: an error where pods wait for a
    name the config meant to create, a warning otherwise; None where the config renames nothing it ignores."""
    key = view.labels.get(DEVICE_PLUGIN_CONFIG) or ctx.policy.device_plugin.config.default
    if not key or not _nvidia_plugin(view):
        return None
    ignored, waiting = _read(ctx, key)
    if not ignored:
        return None
    names = sorted(ctx.plugin_configmaps())
    where = f"key {key!r} of ConfigMap {ctx.namespace}/{names[0]}" if names else f"config {key!r}"
    ns = namespace_of(view.pod(DEVICE_PLUGIN) or {}) or ctx.namespace
    ds = owner_ds(view.pod(DEVICE_PLUGIN) or {}) or ctx.ds(DEVICE_PLUGIN)
    strategy = ignored[0][0]
    edit = f"kubectl -n {ctx.namespace} edit configmap {names[0]}" if names else "edit the plugin's config"
    said = "; ".join(f"sharing.{s} {n} rename {a!r}: advertised as {v}" for s, n, a, v in ignored)
    return node_finding(
        view,
        fid="device-plugin.rename-ignored",
        sev=Severity.ERROR if waiting else Severity.WARNING,
        link="device-plugin",
        cause="the device plugin's sharing config renames a resource per resource (`rename`), which NVIDIA's device "
        "plugin does not support and ignores with a warning: it advertises the replicas under the resource's own "
        "name (or <name>.shared with renameByDefault), not the name the config asks for"
        + (", so the pods that ask for that name wait for ever." if waiting else "."),
        evidence=[
            f"config: {where}: {said}",
            f"pods waiting for the renamed resource: {', '.join(waiting[:5])}" if waiting else "",
        ],
        fix=f"# set renameByDefault: true under sharing.{strategy} and drop the per-resource rename in {where} "
        f"({edit}), so the replicas are advertised as <name>.shared, then restart the plugin (kubectl -n {ns} "
        f"rollout restart ds/{ds}); or request {ignored[0][3]}, the name the plugin advertises",
        action=None,
    )
