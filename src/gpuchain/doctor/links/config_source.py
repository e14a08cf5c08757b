"""Where the container toolkit reads the runtime config it extends: from v1.17.0 the output of the runtime's own
`config dump`, run on the host, before the file its CONTAINERD_CONFIG names.

Toolkit v1.17.0 builds the nvidia runtime from `containerd config dump` run in the host's root
(NVIDIA/nvidia-container-toolkit tools/container/runtime/containerd/containerd.go WithConfigSource
(CommandLineSource)@v1.17.0; from v1.17.1 the file only where the command fails, toml.LoadFirst). The host's
`containerd` on the PATH is not always the containerd the kubelet talks to: k0s, k3s, RKE2 and MicroK8s run their own
from their data directories, beside a distribution's or Docker's containerd whose config disables the CRI plugin. The
toolkit then writes the dumped config, not the one the node's CRI containerd loads, to the file it was pointed at,
and that containerd gets no nvidia runtime. Toolkit v1.18.0 lets RUNTIME_CONFIG_SOURCE=file skip the command
(cmd/nvidia-ctk-installer/container/runtime/runtime.go, flag --config-source); the GPU Operator releases before
v24.9.0 ship a toolkit before v1.17.0 (v24.6.2: v1.16.2), which reads the file.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.node import Distribution
from gpuchain.doctor.releases import image_version, version_of
from gpuchain.kube.objects import Obj

#: The first toolkit release that reads the runtime's config from its `config dump`.
DUMPS_FROM = (1, 17, 0)
#: The first toolkit release with RUNTIME_CONFIG_SOURCE.
SOURCE_FROM = (1, 18, 0)


def given_env(ctx: Context, pod: Obj | None) -> dict[str, str]:
    """The toolkit's env as given: the policy's spec.toolkit.env, then its pod's containers' values."""
    given = {e.name: e.value for e in ctx.policy.toolkit.env} if ctx.policy_obj is not None else {}
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        given |= {str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or [] if "value" in e}
    return given


def _version(ctx: Context, pod: Obj | None) -> tuple[int, ...] | None:
    """The toolkit's release: its pod's image tag, else the policy's spec.toolkit.version."""
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        found = version_of(image_version(str(c.get("image", "")))[1])
        if found is not None:
            return found
    return version_of(ctx.policy.toolkit.version or "") if ctx.policy_obj is not None else None


def dumped_config(ctx: Context, *, view: NodeView, pod: Obj | None, dist: Distribution) -> tuple[str, list[str]] | None:
    """The repair, and its evidence, where the runtime has no nvidia handler although a toolkit that reads
    `containerd config dump` was pointed at a config of its own (CONTAINERD_CONFIG other than the node's
    distribution's file): the dump is then likely another containerd's than the one it was pointed at. None where
    the toolkit predates the dump, reads the file already, or was left on the distribution's own file."""
    env = given_env(ctx, pod)
    config = env.get("CONTAINERD_CONFIG") or env.get("RUNTIME_CONFIG") or ""
    source = env.get("RUNTIME_CONFIG_SOURCE", "")
    version = _version(ctx, pod)
    if not config or config == dist.containerd_config or source.startswith("file") or version is None:
        return None
    if version < DUMPS_FROM:
        return None
    shown = ".".join(str(n) for n in version[:3])
    evidence = [
        f"toolkit v{shown} (reads `containerd config dump` from v1.17.0)",
        f"toolkit env CONTAINERD_CONFIG={config}",
    ]
    switch = (
        "set RUNTIME_CONFIG_SOURCE=file in the toolkit's env (ClusterPolicy spec.toolkit.env)"
        if version >= SOURCE_FROM
        else "move the toolkit to v1.18.0 or later and set RUNTIME_CONFIG_SOURCE=file in its env (ClusterPolicy "
        "spec.toolkit.version and spec.toolkit.env), or roll back to a toolkit before v1.17.0 (GPU Operator v24.6.2's "
        "v1.16.2), which reads the file"
    )
    work = (
        f"the toolkit v{shown} builds the nvidia runtime from the host's `containerd config dump`, which is not the "
        f"config of the containerd this node's kubelet uses (the one {config} belongs to): {switch}, so it extends "
        "the file CONTAINERD_CONFIG names; then delete the toolkit pod so it writes the runtime again, and restart "
        "that containerd"
    )
    return work, evidence
