"""A node whose containerd runs without its CRI plugin after the NVIDIA runtime was written into its config: the
toolkit link, not the node.

containerd loads each plugin from its config and goes on without one that fails: the CRI plugin refuses a config
whose ``containerd.runtimes`` table has no runtime named by ``default_runtime_name`` (containerd
pkg/cri/config/config.go ValidatePluginConfig@v1.7.24, internal/cri/config/config.go@v2.1.1: "no corresponding
runtime configured in `containerd.runtimes` ..."), logs "failed to load plugin io.containerd.grpc.v1.cri" (from 2.0
the plugin io.containerd.cri.v1.runtime), and every CRI call the kubelet makes is answered ``unknown service
runtime.v1.RuntimeService`` (grpc-go's Unimplemented for a service no one registered): no pod on the node gets a
sandbox. The config was the one the NVIDIA Container Toolkit wrote when the node has its runtime: ``nvidia-ctk
runtime configure`` reads the file by default (--config-source=file, NVIDIA/nvidia-container-toolkit
cmd/nvidia-ctk/runtime/configure/configure.go@v1.17.0 defaultConfigSource) and writes back only what that file held
plus its nvidia runtime, so a config.toml that left runc to containerd's built-in defaults comes back with a
``runtimes`` table holding nvidia alone; ``--config-source=command`` (v1.17.0, NVIDIA/nvidia-container-toolkit#686)
starts from ``containerd config dump``, which carries runc. The GPU Operator's toolkit reads the dump first from
v1.17.0 (links/config_source.py) unless RUNTIME_CONFIG_SOURCE=file.

What says the toolkit configured the node: the stack's toolkit pod on it, or pods there on a RuntimeClass whose
handler is an NVIDIA runtime (nvidia, nvidia-cdi, nvidia-legacy, nvidia-experimental: the handlers nvidia-ctk
writes), or containerd's default runtime named as one of those. Without any, the sandbox failure stays the node's
(node.sandbox-failed), with the catalog entry's repair.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import owner_daemonset, toolkit_env
from gpuchain.doctor.releases import image_version, version_of
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import TOOLKIT

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The catalog's words for containerd without CRI, the one that names the config's fault first.
UNLOADED = ("containerd.default-runtime-undefined", "containerd.cri-plugin-not-loaded", "grpc.cri-unimplemented")
#: The runtime handlers nvidia-ctk writes into containerd's config (one per mode of the NVIDIA Container Runtime).
NVIDIA_HANDLER = re.compile(r"^nvidia(?:-cdi|-legacy|-experimental)?$")
#: The default runtime containerd's refusal names.
DEFAULT_NAMED = re.compile(r'default_runtime_name = \\?"([\w.-]*)')
#: The first toolkit release whose nvidia-ctk and installer read containerd's own config dump.
DUMPS_FROM = (1, 17, 0)
ID = "toolkit.cri-unloaded"


def _said(view: NodeView, failed: Sequence[tuple[Obj, str]]) -> tuple[catalog.Match, str] | None:
    """containerd without CRI, in the sandbox Events, the node's own Events or its conditions' messages, with where
    it was said."""
    texts = [(m, f"event FailedCreatePodSandBox on pod {name_of(p)}") for p, m in failed]
    texts += [
        (str(ev.get("message", "")), f"event {ev.get('reason')}")
        for ev in view.events
        if ev.get("reason") != "FailedCreatePodSandBox"
    ]
    conditions = (view.node.get("status") or {}).get("conditions") or []
    texts += [(str(c.get("message", "")), f"condition {c.get('type')}") for c in conditions]
    for entry_id in UNLOADED:
        for text, where in texts:
            found = catalog.find(text, entry_id)
            if found is not None:
                return found, where
    return None


def _nvidia_classes(ctx: Context, failed: Sequence[tuple[Obj, str]]) -> list[str]:
    """The RuntimeClasses of the pods without a sandbox (or of the DaemonSets that make them) whose handler is an
    NVIDIA runtime (the class's own name where the snapshot did not list RuntimeClasses)."""
    handlers = {name_of(rc): str(rc.get("handler", "")) for rc in ctx.snapshot.runtime_classes}
    out = []
    for pod, _ in failed:
        template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
        rc = str((pod.get("spec") or {}).get("runtimeClassName") or template.get("runtimeClassName") or "")
        if rc and NVIDIA_HANDLER.match(handlers.get(rc, rc)) and rc not in out:
            out.append(rc)
    return out


def _toolkit_release(pod: Obj) -> tuple[int, ...] | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        found = version_of(image_version(str(c.get("image", "")))[1])
        if found is not None:
            return found
    return None


def _source(ctx: Context, pod: Obj) -> str:
    """Where the operator's toolkit reads containerd's config (RUNTIME_CONFIG_SOURCE(S) in the policy's
    spec.toolkit.env or its container's env); "" where unset (v1.18.0's default: command, then file)."""
    env = {e.name: e.value for e in ctx.policy.toolkit.env} if ctx.policy_obj is not None else {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        env |= {str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or []}
    return env.get("RUNTIME_CONFIG_SOURCES") or env.get("RUNTIME_CONFIG_SOURCE") or ""


def _restore(default: str, *, config: str, release: tuple[int, ...] | None) -> str:
    """The node work that gives containerd a config its CRI plugin loads again."""
    section = (
        'plugins."io.containerd.cri.v1.runtime".containerd.runtimes'
        if release is not None and release[0] >= 2
        else 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'
    )
    if NVIDIA_HANDLER.match(default):
        lost = (
            f'default_runtime_name = "{default}" names the NVIDIA runtime, which {config} no longer defines: write '
            f"it again with nvidia-ctk runtime configure --runtime=containerd --set-as-default --config-source=command"
        )
    else:
        lost = (
            f"restore the {default} runtime beside nvidia: rewrite {config} from containerd's own full config with "
            "nvidia-ctk runtime configure --runtime=containerd --config-source=command (NVIDIA Container Toolkit "
            "v1.17.0 or later, from its stable package repository; with the flags it was first run with, e.g. "
            f'--cdi.enabled), or define [{section}.{default}] again with runtime_type = "io.containerd.runc.v2"'
        )
    return f"{lost}; then systemctl restart containerd (its log then has no 'failed to load plugin' for CRI)"


def cri_unloaded(
    ctx: Context,
    view: NodeView,
    *,
    failed: Sequence[tuple[Obj, str]],
    configures: bool,
    config: str,
    release: tuple[int, ...] | None,
) -> Finding | None:
    """The toolkit's finding where the node's pods get no sandbox because containerd runs without CRI and the
    NVIDIA runtime was written into its config (``configures``: the stack's toolkit writes it; ``config``: the
    node's containerd config file; ``release``: containerd's); None otherwise."""
    seen = _said(view, failed)
    if seen is None:
        return None
    said, where = seen
    named = DEFAULT_NAMED.search(said.line)
    default = named.group(1) if named else "runc"
    tk = view.pod(TOOLKIT) if configures else None
    classes = _nvidia_classes(ctx, failed)
    if tk is None and not classes and not NVIDIA_HANDLER.match(default if named else ""):
        return None
    evidence = [f"{where}: {said.line}", said.entry.cite()]
    evidence += [f"pods without a sandbox on RuntimeClass {rc} (an NVIDIA runtime handler)" for rc in classes]
    work = _restore(default, config=config, release=release)
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": work, "drain": False, NOT_SIMULATED: "containerd's plugins and config are not simulated"},
    )
    fix = ctx.stack.render(action)
    writer = "nvidia-ctk runtime configure on the node"
    if tk is not None:
        writer = f"the toolkit pod {name_of(tk)}"
        evidence.append(f"toolkit pod {name_of(tk)} on the node")
        version = _toolkit_release(tk)
        if version is not None and version < DUMPS_FROM:
            fix += (
                "   # and move the toolkit to v1.17.0 or later (ClusterPolicy spec.toolkit.version), which starts from "
                "containerd's config dump and keeps runc"
            )
        elif _source(ctx, tk).startswith("file"):
            switch = toolkit_env(ctx, pod=tk, values={"RUNTIME_CONFIG_SOURCE": "command"})
            fix += f"   # and so the toolkit keeps it: {ctx.stack.render(switch)}"
    return Finding(
        id=ID,
        severity=Severity.ERROR,
        link="toolkit",
        cause=f"containerd on this node runs without its CRI plugin: the config {writer} wrote for the NVIDIA "
        f"runtime has no runtime for default_runtime_name ({default}) or is otherwise refused, so the kubelet's "
        "runtime calls find no CRI service and no pod gets a sandbox; restarting containerd meets the same config.",
        evidence=tuple(evidence),
        fix=fix,
        node=view.name,
        action=action,
    )
