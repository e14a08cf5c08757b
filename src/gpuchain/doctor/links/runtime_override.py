"""GPU pods started by another NVIDIA runtime than the one the container toolkit configured: the node's container
runtime config keeps its own default over the toolkit's edit.

The toolkit (the GPU Operator's toolkit container, or ``nvidia-ctk runtime configure``) adds a runtime ``nvidia``
whose binary reads the toolkit's config.toml and sets containerd's ``default_runtime_name`` to it
(NVIDIA/nvidia-container-toolkit internal/config/engine/containerd/config_v1.go and config_v2.go@v1.13.0). containerd
does not always start pods with it:

- a config of schema version 1 (``version = 1``, or no version at all) keeps the CRI plugin's settings under
  ``[plugins.cri]``; where it also has the deprecated ``[plugins.cri.containerd.default_runtime]`` table, containerd
  makes that table the default and ignores ``default_runtime_name`` (containerd pkg/cri/config/config.go
  ValidatePluginConfig@v1.6.19: "`default_runtime` is deprecated ..." then DefaultRuntimeName = "default"); a
  version-2 file's CRI settings are under ``[plugins."io.containerd.grpc.v1.cri"]`` instead, so keys written for one
  schema are not read under the other (services/server/config/config.go Decode: the plugin's ID for version 1, its
  URI for version 2);
- files in ``imports`` are merged after the file that imports them, so a drop-in read after the toolkit's that sets
  ``default_runtime_name`` (or a ``default_runtime`` table) wins (config.go LoadConfig@v1.6.19).

Then the runtime that starts GPU pods is the node image's own, with its own config.toml: settings made through the
toolkit (accept-nvidia-visible-devices-as-volume-mounts for the device plugin's volume-mounts list) do not hold, and
the hook refuses the plugin's list as an unknown device.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.config_source import given_env
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import distribution_of, node_info, runtime_scheme
from gpuchain.doctor.node_image import node_image, os_release
from gpuchain.operator.operands import TOOLKIT

#: Where the device plugin's volume-mounts strategy points NVIDIA_VISIBLE_DEVICES (k8s-device-plugin
#: deviceListStrategy volume-mounts: /var/run/nvidia-container-devices/<id> mounts).
VOLUME_MOUNTS_PATH = "/var/run/nvidia-container-devices"
AS_MOUNTS_ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"
UNKNOWN_DEVICE = "libnvidia-container.unknown-device"


def _override_work(ctx: Context, view: NodeView) -> str:
    """What makes the node's containerd start pods with the toolkit's runtime: the config keys that override it,
    and, on an EKS node image that carries its own runtime and containerd config, the image's own way out."""
    config = distribution_of(view.node).containerd_config
    work = (
        f"on the node, read what containerd loaded (containerd config dump): its default runtime must be the "
        f"toolkit's nvidia runtime (default_runtime_name = \"nvidia\", BinaryName under the toolkit's install dir). "
        f"Where {config} is a version 1 config (version = 1 or none; [plugins.cri] sections) with a "
        "[plugins.cri.containerd.default_runtime] table, that deprecated table wins over the default_runtime_name "
        "the toolkit writes: remove the default_runtime table (or move the file to version = 2 with "
        '[plugins."io.containerd.grpc.v1.cri"] sections) and let the toolkit write its runtime again; where a file '
        "in its imports, read after the toolkit's, sets default_runtime_name or a default_runtime table, remove that "
        "override; then restart containerd and the toolkit pod, and recreate the GPU pods"
    )
    image = node_image(view.node)
    os_id, version = os_release(view.node)
    if image is not None and image.cloud == "EKS" and os_id == "amzn":
        work = (
            f"the node runs an EKS GPU AMI (Amazon Linux {version}) that writes its own containerd config with its "
            "own nvidia-container-runtime as the default: move the node group to a newer EKS GPU AMI whose "
            f"containerd config is version 2 and imports drop-ins ({image.upgrade}), or run the operator without its "
            "toolkit (ClusterPolicy toolkit.enabled=false) and set the runtime options in the AMI's "
            f"/etc/nvidia-container-runtime/config.toml; otherwise {work}"
        )
    return work


def runtime_overridden(ctx: Context, view: NodeView, *, said: catalog.Match, refused: list[str]) -> Finding | None:
    """The hook refused the device plugin's volume-mounts list as an unknown device while the toolkit this cluster
    deploys on the node is set to accept that list: the runtime that ran is not the toolkit's. None for any other
    refusal, a toolkit not set so, or a node whose runtime is not containerd."""
    if said.entry.id != UNKNOWN_DEVICE or VOLUME_MOUNTS_PATH not in said.line:
        return None
    pod = view.pod(TOOLKIT)
    env = given_env(ctx, pod)
    if env.get(AS_MOUNTS_ENV, "").lower() != "true" or runtime_scheme(view.node) != "containerd":
        return None
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": _override_work(ctx, view),
            "drain": False,
            NOT_SIMULATED: "the node's containerd config files are not a scenario fact",
        },
    )
    where = f"the toolkit pod {pod['metadata']['name']}" if pod is not None else "the toolkit"
    return node_finding(
        view,
        fid="toolkit.runtime-overridden",
        sev=Severity.ERROR,
        link="toolkit",
        cause=f"GPU pods on this node fail to start: the NVIDIA runtime that starts them takes the device plugin's "
        f"volume-mounts list ({VOLUME_MOUNTS_PATH}) for a device name, although {where} sets "
        "accept-nvidia-visible-devices-as-volume-mounts = true for the runtime it configures. So containerd starts "
        "them with another runtime: its config keeps its own default over the toolkit's (a version 1 config's "
        "default_runtime table, or a drop-in read after the toolkit's).",
        evidence=[
            f"GPU pods refused at start: {', '.join(refused[:5])}",
            *said.evidence("runtime says"),
            f"toolkit env {AS_MOUNTS_ENV}=true",
            f"status.nodeInfo.containerRuntimeVersion: {node_info(view.node).get('containerRuntimeVersion', '')}",
        ],
        fix=ctx.stack.render(action),
        action=action,
    )
