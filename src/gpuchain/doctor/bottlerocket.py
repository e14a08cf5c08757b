"""Bottlerocket's NVIDIA variants (``aws-k8s-<version>-nvidia``): the node image runs NVIDIA's device plugin itself,
as the host service ``nvidia-k8s-device-plugin`` (bottlerocket-os/bottlerocket-core-kit packages/
nvidia-k8s-device-plugin, configured by the ``settings.kubelet-device-plugins`` API), so the cluster needs no plugin
DaemonSet for these nodes, and a DaemonSet's plugin on them registers the same resource beside the host's.

Such a node that announces no GPU is the host service not registered with the kubelet, not a GPU stack missing from
the cluster: its repair is on the node (restart the service from the admin container, replace the node) and in the
node group's Bottlerocket release, which carries the service's fixes (its start order against the kubelet's socket,
bottlerocket-core-kit#228).

AKS's managed GPU node pools (gpuProfile.nvidia.managementMode Managed: MicrosoftDocs/azure-aks-docs
articles/aks/aks-managed-gpu-nodes.md) run the plugin the same way, as the host service ``nvidia-device-plugin.service``
beside DCGM's, with no pod in the cluster; AKS labels such a node ``kubernetes.azure.com/dcgm-exporter=enabled``, and
its Node Problem Detector writes the condition ``UnhealthyNvidiaDevicePlugin`` (False while the service is active,
articles/aks/gpu-health-monitoring.md: "This check applies only to AKS-managed GPU node pools")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpuchain.common.remember import remembered
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, gpus_present, node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import EKS_POOL
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, deploy_label
from gpuchain.remediation.model import find_condition

Check = Callable[[Context, NodeView], Result]

SERVICE = "nvidia-k8s-device-plugin"
#: The label EKS Auto Mode sets on its nodes (docs.aws.amazon.com/eks/latest/userguide/associate-workload.html: "EKS
#: Auto Mode nodes have set the value of the label eks.amazonaws.com/compute-type to auto"). Its node image brings the
#: NVIDIA driver and plugin (auto-accelerated.html: "EKS Auto Mode includes the NVIDIA device plugin for Kubernetes.
#: This plugin runs automatically and isn't visible as a daemon set in your cluster").
AUTO_MODE = ("eks.amazonaws.com/compute-type", "auto")


#: The label AKS puts on a managed GPU node pool's nodes, and its Node Problem Detector's condition for the plugin
#: service (aks-managed-gpu-nodes.md, gpu-health-monitoring.md).
AKS_MANAGED = ("kubernetes.azure.com/dcgm-exporter", "enabled")
AKS_PLUGIN_CONDITION = "UnhealthyNvidiaDevicePlugin"
AKS_SERVICE = "nvidia-device-plugin.service"


def aks_managed_node(node: Obj) -> bool:
    """Is ``node`` of an AKS managed GPU node pool, whose image runs the device plugin as a host service?"""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(AKS_MANAGED[0]) == AKS_MANAGED[1] or find_condition(node, AKS_PLUGIN_CONDITION) is not None


def auto_mode_node(node: Obj) -> bool:
    """Is ``node`` an EKS Auto Mode node, whose managed image runs the device plugin itself?"""
    return ((node.get("metadata") or {}).get("labels") or {}).get(AUTO_MODE[0]) == AUTO_MODE[1]


@remembered
def host_plugin_node(node: Obj) -> bool:
    """Does the node's image run the device plugin itself (a Bottlerocket NVIDIA variant, an EKS Auto Mode node,
    whose Bottlerocket-based image AWS manages, or a node of an AKS managed GPU pool)? (Asked three times a node:
    answered once a node in a diagnosis.)"""
    image = str(node_info(node).get("osImage", ""))
    return (
        (image.startswith("Bottlerocket OS") and "nvidia" in image.lower())
        or auto_mode_node(node)
        or aks_managed_node(node)
    )


def host_plugin(view: NodeView) -> bool:
    """`host_plugin_node` of the node a view is about."""
    return host_plugin_node(view.node)


def unregistered(ctx: Context, views: list[NodeView]) -> list[Finding]:
    """For each node whose Bottlerocket image runs the plugin and whose capacity announces no GPU: the host service
    not registered, with the node's repair and the node group's update."""
    out = []
    for view in views:
        if not host_plugin(view):
            continue
        # AKS's Node Problem Detector says when the service is down; its GPU then stays in capacity, not allocatable.
        npd = find_condition(view.node, AKS_PLUGIN_CONDITION)
        down = npd is not None and npd.status == "True"
        if not down and any(n > 0 for n in node_gpu_resources(view.node).values()):
            continue
        image = str(node_info(view.node).get("osImage", ""))
        group = labels_of(view.node).get(EKS_POOL) or "<node group>"
        aks = aks_managed_node(view.node)
        service = AKS_SERVICE if aks else SERVICE
        repair = (
            # Auto Mode nodes take no admin access: AWS replaces a node deleted, with its current image.
            f"replace the node: kubectl delete node {view.name} (EKS Auto Mode has no admin access to its nodes; it "
            "launches a new one from its current node image for the pods that wait)"
            if auto_mode_node(view.node)
            else f"restart AKS's managed device plugin service on the node: az vmss run-command invoke -g "
            "<node resource group> -n <scale set> --instance-id <instance> --command-id RunShellScript --scripts "
            f"'systemctl restart {AKS_SERVICE}' (or from kubectl debug node/{view.name} -it --image=ubuntu: chroot "
            f"/host systemctl restart {AKS_SERVICE}); if it does not stay active, reimage the node (az vmss reimage) "
            "so AKS installs its managed GPU stack again"
            if aks
            else f"restart the image's device plugin service: from the node's admin container (sudo "
            f"sheltie) systemctl restart {SERVICE}.service, or replace the node; then update node group {group} "
            "to the newest Bottlerocket release (aws eks update-nodegroup-version --cluster-name <cluster> "
            f"--nodegroup-name {group}), whose plugin service carries its fixes"
        )
        action = Fix(
            FixOp.NODE,
            view.name,
            {"action": repair, "drain": False, NOT_SIMULATED: "a host service of the node image is not simulated"},
        )
        present = gpus_present(view)
        out.append(
            Finding(
                id="device-plugin.not-registered",
                severity=Severity.ERROR,
                link="device-plugin",
                node=view.name,
                cause=f"the node runs {image}, whose image runs NVIDIA's device plugin itself (the host service "
                f"{service}, no DaemonSet), and "
                + (
                    "AKS's Node Problem Detector says that service is not active, so the kubelet offers none of the "
                    "node's GPUs"
                    if down
                    else "its capacity announces no GPU: that service is not registered with the kubelet (as when it "
                    "starts before the kubelet's device-plugin socket and misses it)"
                )
                + "; no GPU stack is missing from the cluster.",
                evidence=tuple(
                    e
                    for e in (
                        f"osImage {image}",
                        f"condition {AKS_PLUGIN_CONDITION}=True: {npd.message}".rstrip(": ")
                        if down and npd is not None
                        else "capacity: no nvidia.com/gpu (or 0)",
                        f"GPUs present: {present}" if present else "",
                        "no device plugin DaemonSet in the cluster",
                    )
                    if e
                ),
                fix=ctx.stack.render(action),
                root=True,
                action=action,
            )
        )
    return out


def _kept_off(ctx: Context, ds: Obj, hosts: list[Obj]) -> Fix:
    """The change that keeps the plugin DaemonSet ``ds`` off the nodes ``hosts`` whose image runs its own plugin: the
    operator's per-node deploy label where an operator owns the DaemonSet (it would undo a patch), else a required
    node affinity term on the DaemonSet, ANDed into each term it has, on their node groups (else their names)."""
    if ctx.policy_obj is not None and namespace_of(ds) == ctx.namespace:
        return Fix(FixOp.LABEL_NODE, name_of(hosts[0]), {deploy_label(DEVICE_PLUGIN): "false"})
    if all(auto_mode_node(n) for n in hosts):
        # AWS's own way to keep a workload off Auto Mode nodes (associate-workload.html).
        return away_from(ds, {"key": AUTO_MODE[0], "operator": "NotIn", "values": [AUTO_MODE[1]]})
    groups = sorted({labels_of(n).get(EKS_POOL, "") for n in hosts})
    others = {labels_of(n).get(EKS_POOL, "") for n in ctx.snapshot.nodes if n not in hosts}
    if all(groups) and not others & set(groups):
        away = {"key": EKS_POOL, "operator": "NotIn", "values": groups}
    else:
        away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(name_of(n) for n in hosts)}
    return away_from(ds, away)


def away_from(ds: Obj, away: Mapping[str, object]) -> Fix:
    """A patch of DaemonSet ``ds`` that ANDs the node selector requirement ``away`` into each term of its required
    node affinity (a term of its own where it has none), so its pods leave the nodes ``away`` excludes."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = [
        {**t, "matchExpressions": [*(t.get("matchExpressions") or []), away]}
        for t in required.get("nodeSelectorTerms") or [{}]
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return Fix(
        FixOp.PATCH_DAEMONSET,
        f"{namespace_of(ds)}/{name_of(ds)}",
        {"spec": {"template": {"spec": {"affinity": affinity}}}},
    )


def beside_host_plugin(check: Check) -> Check:
    """``check`` (the device-plugin link's) with, first, a DaemonSet's plugin pod on a node whose image runs its own:
    two plugins registering the same resource with one kubelet, which keeps one registration and drops the other's
    devices, so the node's GPUs come and go or stay unallocatable; the repair keeps the DaemonSet off such nodes."""

    def checked(ctx: Context, view: NodeView) -> Result:
        pod = view.pod(DEVICE_PLUGIN)
        ds = owner_daemonset(ctx, pod) if pod is not None and host_plugin(view) else None
        if not ds:
            return check(ctx, view)
        hosts = [n for n in ctx.snapshot.nodes if host_plugin_node(n)]
        action = _kept_off(ctx, ds, hosts)
        capacity, allocatable = node_gpu_resources(view.node), node_gpu_resources(view.node, "allocatable")
        shown = ", ".join(f"{k} {allocatable.get(k, 0)}/{v}" for k, v in sorted(capacity.items())) or "none"
        image = str(node_info(view.node).get("osImage", ""))
        finding = node_finding(
            view,
            fid="device-plugin.beside-host-plugin",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"the node runs {image}, whose image runs NVIDIA's device plugin itself (the host service "
            f"{SERVICE}), and DaemonSet {namespace_of(ds)}/{name_of(ds)} runs a second plugin there: both register "
            "the same resource with the kubelet, which keeps one registration and drops the other's devices, so the "
            "node's GPUs come and go or stay unallocatable for workloads.",
            evidence=[
                f"osImage {image}",
                f"plugin pod {name_of(pod or {})} of DaemonSet {name_of(ds)}",
                f"allocatable/capacity: {shown}",
            ],
            fix=ctx.stack.render(action) + "   # keep the DaemonSet off the Bottlerocket nodes, whose image runs its "
            f"own plugin, so only the image's serves their GPUs ({', '.join(name_of(n) for n in hosts[:5])}); where "
            "every GPU node runs Bottlerocket, uninstall the chart's device plugin instead; then restart that service "
            "or replace the node if their GPUs stay unallocatable",
            action=action,
        )
        return Result(LinkState.BROKEN, "a second device plugin beside the node image's own", (finding,))

    return checked
