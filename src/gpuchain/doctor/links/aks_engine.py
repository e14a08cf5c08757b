"""GPU agents of an aks-engine cluster provisioned without the nvidia-device-plugin addon (issue 26). In aks-engine
the addon is not only the plugin's DaemonSet: the agent's provisioning script installs the NVIDIA driver, the
nvidia-container-runtime and Docker's default runtime ``nvidia`` only when the cluster has N-series agents and the
addon is enabled (Azure/aks-engine parts/k8s/cloud-init/artifacts/cse_main.sh: ``{{- if and HasNSeriesSKU
IsNvidiaDevicePluginAddonEnabled}} ... ensureGPUDrivers``; Azure/aks-engine#4358 "nvidia drivers are not installed if
the nvidia-device-plugin addon is disabled"). It is on by default for N-series pools on Azure and off on Azure Stack
Hub, where docs/topics/gpu.md says it "need to be explicitly enabled in apimodel.json" (Azure/aks-engine#4309). So an
agent provisioned with it off has no driver at all: no plugin DaemonSet in the cluster, or the plugin's pod on it
unable to load NVML where a pool came up before the addon was turned on. The repair is the driver, by the addon in the
cluster's apimodel.json and the agents provisioned again, not a runtime edit or a chart of another stack.

The agent is known from the labels aks-engine gives every agent pool (pkg/api/types.go GetKubernetesLabels:
``kubernetes.azure.com/role=agent``, ``agentpool=<pool>``, and ``accelerator=nvidia`` for an NVIDIA SKU) without the
labels of AKS's managed node images (``kubernetes.azure.com/node-image-version``, ``kubernetes.azure.com/mode``),
whose driver comes from the image instead."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import DRIVER_VERSION, node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity

#: The labels aks-engine puts on an NVIDIA agent (pkg/api/types.go GetKubernetesLabels).
AGENT = {"kubernetes.azure.com/role": "agent", "accelerator": "nvidia"}
POOL = "agentpool"
#: Labels only AKS's managed node images carry (learn.microsoft.com/azure/aks/use-labels): not aks-engine's agents.
AKS_MANAGED = ("kubernetes.azure.com/node-image-version", "kubernetes.azure.com/mode", "kubernetes.azure.com/agentpool")
#: What shows an agent has no plugin where no GPU stack runs at all.
NO_PLUGIN = ["no NVIDIA device plugin DaemonSet in the cluster (aks-engine's addon deploys it as nvidia-device-plugin)"]
#: The addon as aks-engine's API model enables it (docs/topics/clusterdefinitions.md, addons).
ADDON = '"addons": [{"name": "nvidia-device-plugin", "enabled": true}]'


def aks_engine_gpu_agent(view: NodeView) -> str:
    """The agent pool of an aks-engine NVIDIA agent ("" for any other node)."""
    labels = view.labels
    if any(labels.get(k) != v for k, v in AGENT.items()) or any(k in labels for k in AKS_MANAGED):
        return ""
    return labels.get(POOL, "")


def provisioned_without_driver(ctx: Context, view: NodeView, *, evidence: list[str]) -> Finding | None:
    """The driver finding for an aks-engine GPU agent provisioned with the nvidia-device-plugin addon off (so with no
    driver or NVIDIA runtime); None for any other node. ``evidence`` is what shows the node has no NVML (the plugin's
    log) or no plugin at all."""
    pool = aks_engine_gpu_agent(view)
    if not pool or view.labels.get(DRIVER_VERSION):
        return None  # not such an agent, or GFD saw a driver on it: the addon's driver step did run
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"enable aks-engine's nvidia-device-plugin addon in the cluster's apimodel.json "
            f"(properties.orchestratorProfile.kubernetesConfig: {ADDON}) and provision the {pool} agents again with "
            "it (aks-engine upgrade --force with that apimodel, or scale the pool to new agents): their provisioning "
            "installs the NVIDIA driver, the nvidia runtime as Docker's default and the plugin; or install the "
            "driver and nvidia-container-runtime on them by hand",
            "drain": True,
            NOT_SIMULATED: "aks-engine's provisioning runs outside the cluster",
        },
    )
    return node_finding(
        view,
        fid="driver.aks-engine-addon-off",
        sev=Severity.ERROR,
        link="driver",
        cause="the node is an aks-engine GPU agent provisioned with the nvidia-device-plugin addon off: in aks-engine "
        "that addon is what installs the NVIDIA driver and runtime on the agent, so the node has no driver and no "
        "device plugin can announce its GPUs.",
        evidence=[
            *evidence,
            f"aks-engine agent of pool {pool} (kubernetes.azure.com/role=agent, accelerator=nvidia, no AKS node image)",
        ],
        fix=ctx.stack.render(action),
        action=action,
    )
