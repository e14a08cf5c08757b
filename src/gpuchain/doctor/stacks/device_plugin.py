"""NVIDIA's standalone device plugin (its Helm chart or static manifest) on a host driver, and
the managed clouds that run it that way (EKS with its accelerated AMIs, AKS GPU node pools).

Names as NVIDIA/k8s-device-plugin's deployments render them (commit 1b826ac): the static
manifest's DaemonSet ``nvidia-device-plugin-daemonset`` in ``kube-system`` (container
``nvidia-device-plugin-ctr``); the chart's ``<release>-nvidia-device-plugin`` (same container)
and, with GFD on, ``<release>-gpu-feature-discovery``. No driver or toolkit DaemonSet: the node
image has both. NVIDIA's DRA driver alone on such nodes (its chart's ``<name>-kubelet-plugin``, container
``gpus``) is the same stack with the kubelet plugin in the device plugin's place.
"""

from __future__ import annotations

from gpuchain.doctor.stacks.base import images_of, is_dra_plugin, provider_of, runs_nvidia_plugin
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.policy import ClusterPolicySpec

PLUGIN = "nvidia-device-plugin"
#: The image NVIDIA's plugin chart runs (nvcr.io/nvidia/k8s-device-plugin); GKE's own plugin image is another stack's.
CHART_IMAGE = frozenset({"k8s-device-plugin"})
CONTAINER = "nvidia-device-plugin-ctr"
#: The container of NVIDIA's DRA driver kubelet plugin that serves GPUs (its chart's templates/kubeletplugin.yaml).
DRA_CONTAINER = "gpus"
GFD = "gpu-feature-discovery"
#: The node image a managed cloud means to carry the driver and the nvidia runtime (its GPU docs).
NODE_IMAGES = {
    "eks": "the EKS accelerated AMI (amazon-eks-node-al2023-x86_64-nvidia-*, amazon-eks-gpu-node-*, or Bottlerocket's "
    "-nvidia variant) for this node group, which carries the NVIDIA driver and makes nvidia containerd's default "
    "runtime; a standard AMI has neither",
    "aks": "an AKS GPU node image (a GPU VM size AKS provisions as one, with the default --gpu-driver Install, which "
    "installs the NVIDIA driver and runtime; not --gpu-driver None): upgrade the node pool's node image (az aks "
    "nodepool upgrade --node-image-only) or recreate the node pool",
}
#: The sandbox image each managed node image's containerd config names: the EKS AMIs' bootstrap writes the regional
#: ECR pause image into it (awslabs/amazon-eks-ami templates/al2/runtime/bootstrap.sh, sandbox_image =
#: $ECR_URI/eks/pause:<version>), as nodes in private subnets reach no public registry.
SANDBOX_IMAGES = {"eks": "the regional ECR pause image (<account>.dkr.ecr.<region>.amazonaws.com/eks/pause:3.x)"}
DRA_TITLE = "NVIDIA DRA driver (kubelet plugin, host driver)"
TITLES = {
    "nvidia-device-plugin": "NVIDIA device plugin (standalone, host driver)",
    "eks": "Amazon EKS (accelerated AMI driver + NVIDIA device plugin)",
    "aks": "Azure AKS (GPU node pool driver + NVIDIA device plugin)",
}


def plugin_daemonsets(snapshot: Snapshot) -> list[Obj]:
    """NVIDIA device plugin DaemonSets, by name or image, in any namespace."""
    return [
        d
        for d in snapshot.daemonsets
        if (PLUGIN in name_of(d) and "gpu-device-plugin" not in name_of(d)) or runs_nvidia_plugin(d, CHART_IMAGE)
    ]


#: What marks a DaemonSet as a GPU metrics agent beside the plugin: NVIDIA's dcgm-exporter image (K2s' gpu-node addon
#: applies one with its plugin, Siemens-Healthineers/K2s addons/gpu-node/manifests/dcgm-exporter.yaml), or a container
#: that runs DCGM's host engine itself (the EKS node monitoring agent add-on's dcgm-server, whose chart runs
#: ``nv-hostengine -n -b ALL``, aws/eks-node-monitoring-agent charts/.../templates/dcgm-daemonset.yaml).
EXPORTER_IMAGE, HOST_ENGINE = "dcgm-exporter", "nv-hostengine"


def _runs_host_engine(ds: Obj) -> bool:
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(
        HOST_ENGINE in " ".join(map(str, [*(c.get("command") or []), *(c.get("args") or [])]))
        for c in spec.get("containers") or []
    )


def exporter_beside(snapshot: Snapshot, namespace: str, taken: set[str]) -> Obj | None:
    """The GPU metrics DaemonSet in the plugin's namespace (none of the names in ``taken``): the exporter link's
    component there, which the same manifest or add-on set deploys beside the plugin."""
    return next(
        (
            d
            for d in snapshot.daemonsets
            if namespace_of(d) == namespace
            and name_of(d) not in taken
            and (EXPORTER_IMAGE in images_of(d) or EXPORTER_IMAGE in name_of(d) or _runs_host_engine(d))
        ),
        None,
    )


def detect(snapshot: Snapshot) -> Stack | None:
    """A device plugin DaemonSet of NVIDIA's with no operator policy around it; where there is none, NVIDIA's
    DRA driver kubelet plugin, which serves the same link through DRA on the same host driver and runtime."""
    found = plugin_daemonsets(snapshot)
    dra = not found
    if dra:
        found = [d for d in snapshot.daemonsets if is_dra_plugin(d)]
    provider = provider_of(snapshot.nodes)
    if not found:
        return None
    plugin = found[0]
    namespace = namespace_of(plugin) or "kube-system"
    gfd = next(
        (
            name_of(d)
            for d in snapshot.daemonsets
            if namespace_of(d) == namespace and GFD in name_of(d) and name_of(d) != name_of(plugin)
        ),
        None,
    )
    exporter = exporter_beside(snapshot, namespace, {name_of(plugin), gfd or ""})
    spec = ClusterPolicySpec.model_validate(
        {
            "driver": {"enabled": False},
            "toolkit": {"enabled": False},
            "validator": {"enabled": False},
            "dcgmExporter": {"enabled": exporter is not None},
            "gfd": {"enabled": gfd is not None},
            "migManager": {"enabled": False},
        }
    )
    stack_id = provider if provider in ("eks", "aks") else "nvidia-device-plugin"
    daemonsets = {"device-plugin": name_of(plugin)}
    containers = {"device-plugin": DRA_CONTAINER if dra else CONTAINER}
    if gfd:
        daemonsets["gpu-feature-discovery"] = gfd
        containers["gpu-feature-discovery"] = GFD
    if exporter is not None:
        daemonsets["dcgm-exporter"] = name_of(exporter)
        template = ((exporter.get("spec") or {}).get("template") or {}).get("spec") or {}
        containers["dcgm-exporter"] = str(((template.get("containers") or [{}])[0]).get("name", EXPORTER_IMAGE))
    return Stack(
        id=stack_id,
        title=DRA_TITLE if dra else TITLES[stack_id],
        namespace=namespace,
        daemonsets=daemonsets,
        containers=containers,
        policy=spec,
        host_driver=True,
        node_image=NODE_IMAGES.get(stack_id, ""),
        sandbox_image=SANDBOX_IMAGES.get(stack_id, ""),
    )
