"""A node that advertises fewer GPUs than it has, with no health event (issue 26): the GPUs the kubelet does not
list are not visible to the driver (a kernel or driver regression, a PCIe fault, a GPU that never initialised),
since the device plugin advertises every GPU NVML enumerates and marks a failing one unhealthy rather than hiding
it (NVIDIA/k8s-device-plugin internal/rm/health.go@v0.17.1). No link of the GPU stack hides a GPU, so it is the
node's own, and a full node (every GPU allocated) is never this: only capacity is compared."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import PROVIDER_COUNTS, node_finding
from gpuchain.doctor.links.plugin_found import registered_at_start
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.doctor.stacks.base import INSTANCE_TYPE
from gpuchain.kube.gpu_resources import pod_gpu_requests

#: The whole-GPU resource NVIDIA's device plugin advertises.
GPU = "nvidia.com/gpu"
#: The GPUs (count, model as GFD's product label names it) of well-known GPU machine types, from each
#: provider's instance type pages: AWS EC2 accelerated computing (aws.amazon.com/ec2/instance-types/p4, /p5, /g5,
#: /g6, /g4), Azure ND/NC series (learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated), Google Cloud
#: accelerator-optimized (cloud.google.com/compute/docs/gpus; G2's count is fixed per type, 1 L4 up to g2-standard-32).
INSTANCE_GPUS: dict[str, tuple[int, str]] = {
    "p3.8xlarge": (4, "V100"),
    "p3.16xlarge": (8, "V100"),
    "p3dn.24xlarge": (8, "V100"),
    "p4d.24xlarge": (8, "A100"),
    "p4de.24xlarge": (8, "A100"),
    "p5.48xlarge": (8, "H100"),
    "g4dn.12xlarge": (4, "T4"),
    "g4dn.metal": (8, "T4"),
    "g5.12xlarge": (4, "A10G"),
    "g5.24xlarge": (4, "A10G"),
    "g5.48xlarge": (8, "A10G"),
    "g6.12xlarge": (4, "L4"),
    "g6.24xlarge": (4, "L4"),
    "g6.48xlarge": (8, "L4"),
    "Standard_ND96asr_v4": (8, "A100"),
    "Standard_ND96amsr_A100_v4": (8, "A100"),
    "Standard_ND96isr_H100_v5": (8, "H100"),
    "Standard_NC12": (2, "K80"),
    "Standard_NC24": (4, "K80"),
    "Standard_NC24r": (4, "K80"),
    "Standard_NC12s_v3": (2, "V100"),
    "Standard_NC24s_v3": (4, "V100"),
    "Standard_NC24rs_v3": (4, "V100"),
    "Standard_NC64as_T4_v3": (4, "T4"),
    "Standard_NC48ads_A100_v4": (2, "A100"),
    "Standard_NC96ads_A100_v4": (4, "A100"),
    "a2-highgpu-2g": (2, "A100"),
    "a2-highgpu-4g": (4, "A100"),
    "a2-highgpu-8g": (8, "A100"),
    "a2-megagpu-16g": (16, "A100"),
    "a2-ultragpu-8g": (8, "A100"),
    "a3-highgpu-8g": (8, "H100"),
    "g2-standard-4": (1, "L4"),
    "g2-standard-8": (1, "L4"),
    "g2-standard-12": (1, "L4"),
    "g2-standard-16": (1, "L4"),
    "g2-standard-24": (2, "L4"),
    "g2-standard-32": (1, "L4"),
    "g2-standard-48": (4, "L4"),
    "g2-standard-96": (8, "L4"),
}

#: The labels that name a node's GPU model: GFD's product, and the accelerator its managed cloud attached (GKE's
#: pool accelerator, AKS's): either ties a machine type's table row to the node.
MODEL_LABELS = (PRODUCT, "cloud.google.com/gke-accelerator", "kubernetes.azure.com/accelerator")


#: The label prefix each provider's node agent sets, by the prefix of that provider's machine type names: a machine
#: type on a node that carries its provider's labels was set by that provider, not by hand.
PROVIDER_LABELS = {
    "Standard_": "kubernetes.azure.com/",
    "a2-": "cloud.google.com/",
    "a3-": "cloud.google.com/",
    "g2-": "cloud.google.com/",
}


def _managed(view: NodeView, machine: str) -> bool:
    """Whether the node's machine type comes from its managed cloud (the provider's own labels are on it)."""
    prefix = next((p for m, p in PROVIDER_LABELS.items() if machine.startswith(m)), "eks.amazonaws.com/")
    return any(key.startswith(prefix) for key in view.labels)


def expected_gpus(view: NodeView, labelled: int | None) -> tuple[int, str] | None:
    """The GPUs the node has and what says so: its machine type's count where GFD's product label or its cloud's
    accelerator label names the same GPU model (a label that names another model is no machine of that type), else
    GFD's count label (``labelled``), else its cloud's count label. The machine type comes first: a type whose GPU
    count is fixed (G2, P4d, ND) outranks a pool count label that says more than the type can hold."""
    machine = view.labels.get(INSTANCE_TYPE, "")
    count, model = INSTANCE_GPUS.get(machine, (0, ""))
    if count and any(model.lower() in view.labels.get(key, "").lower() for key in MODEL_LABELS):
        return count, f"{INSTANCE_TYPE}={machine} has {count} {model} GPUs"
    return (labelled, f"nvidia.com/gpu.count={labelled}") if labelled else provider_count(view)


def provider_count(view: NodeView) -> tuple[int, str] | None:
    """The GPUs the node's cloud says it attached, from the count label its provider writes (GKE's pool accelerator
    count, Karpenter's instance GPU count), where the node has no GFD count: the machine types whose name gives no
    GPU count (GKE's N1 with attached T4s or V100s) still say it there."""
    for key in PROVIDER_COUNTS:
        value = view.labels.get(key, "")
        if value.isdigit() and int(value) > 0:
            return int(value), f"{key}={value}"
    return None


def sized_to_machine(ctx: Context, view: NodeView, advertised: int) -> tuple[int, str] | None:
    """The GPUs of the node's machine type where nothing names its model but two witnesses agree on the count: the
    type its managed cloud set (its provider's labels on the node) and a pending pod that asks for more GPUs than
    the node advertises and no more than the type has (the pod was sized to the machine); None otherwise."""
    machine = view.labels.get(INSTANCE_TYPE, "")
    count, model = INSTANCE_GPUS.get(machine, (0, ""))
    if not count or not advertised < count or not _managed(view, machine):
        return None
    for pod in ctx.pending:
        asked = pod_gpu_requests(pod).get(GPU, 0)
        if advertised < asked <= count:
            name = f"{pod.get('metadata', {}).get('namespace')}/{pod.get('metadata', {}).get('name')}"
            return count, f"{INSTANCE_TYPE}={machine} has {count} {model} GPUs; pending pod {name} asks for {asked}"
    return None


def missing_gpus(ctx: Context, view: NodeView, *, advertised: int, labelled: int | None) -> Finding | None:
    """The node finding where ``advertised`` (capacity of whole GPUs, none of them unhealthy) is below the GPUs the
    node has; None where it is not or nothing says how many it has."""
    told = expected_gpus(view, labelled)
    expected = told or sized_to_machine(ctx, view, advertised)
    if expected is None or not 0 < advertised < expected[0]:
        return None
    has, source = expected
    # A plugin that announced only the GPUs it found at its start is repaired by a new plugin pod, not the node.
    early = registered_at_start(ctx, view, advertised=advertised, has=has, source=source)
    if early is not None:
        return early
    # A managed cloud's node image carries the kernel and driver: its pool moves to another image, not the node.
    image = node_image(view.node)
    image_update = (
        f"move the node pool to another node image ({image.upgrade})"
        if image is not None and image.upgrade
        else "update the node image or kernel"
    )
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"drain and reboot the node; if it still lists fewer than {has} GPUs (nvidia-smi -L, and "
            f"lspci -d 10de: for the GPUs on the bus), {image_update}, or replace the node",
            NOT_SIMULATED: "GPUs the driver does not see are a fact of the node's hardware and kernel",
        },
    )
    # GFD's count is NVML's own: above capacity, GPUs the driver sees go unadvertised, a fault for sure. Where only
    # the machine type's table says more (GFD agreeing with capacity), the table is the one witness: a warning. With
    # no GFD count, the managed cloud's type and a pod sized to it are two witnesses, and the cloud's own count label
    # is the provider's word on what it attached: a fault too.
    sure = advertised < labelled if labelled is not None else told is None or provider_count(view) is not None
    return node_finding(
        view,
        fid="node.gpus-missing",
        sev=Severity.ERROR if sure else Severity.WARNING,
        link="node",
        cause=f"the node has {advertised} of {has} GPUs usable: the others are not visible to the driver (a kernel "
        "or driver regression, a PCIe fault, or a GPU that never initialised), with no health event for them; "
        "the cluster is not full, the node is short.",
        evidence=[f"capacity nvidia.com/gpu {advertised}", source],
        fix=f"kubectl drain {view.name} --ignore-daemonsets --delete-emptydir-data   # then "
        + ctx.stack.render(action).removeprefix("# "),
        action=action,
    )
