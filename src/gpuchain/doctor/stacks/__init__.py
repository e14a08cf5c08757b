"""Which GPU stack runs the cluster, and its objects mapped onto the doctor's one view of a node.

The checks know links (driver, toolkit, device plugin, ...), never a stack. Each adapter here
(`gpuchain`, `gpu_operator`, `device_plugin` for NVIDIA's standalone chart and the managed clouds
that use it, `gke`) recognises its stack from a snapshot and says, as a `Stack`, where its objects
live: the namespace, the DaemonSet (and main container) behind each link, whether the driver is
the host's, and the policy its switches come from. `detect` asks them in order; the first that
recognises the cluster wins. An API group or namespace that is absent only means "not this stack".
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuchain.common.labels import GPU_PRESENT
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
from gpuchain.operator.operands import NFD_GPU_LABELS
from gpuchain.operator.policy import ClusterPolicySpec

if TYPE_CHECKING:
    from gpuchain.doctor.snapshot import Snapshot

# NVIDIA's GPU Operator CRDs (nvidia.com), as the operator's import registers them; a cluster
# without them answers 404, which `gather` reads as "not the GPU Operator".
__all__ = ["NVIDIA_CLUSTER_POLICY", "NVIDIA_DRIVER", "Stack", "detect", "is_gpu_node"]

#: Node labels that say "this node has NVIDIA GPUs" whichever stack runs it.
GPU_NODE_LABELS = (
    *NFD_GPU_LABELS,
    GPU_PRESENT,
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "kubernetes.azure.com/accelerator",
    "accelerator",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.product",
)


#: The validations NVIDIA's validator runs as init containers (gpu-operator's
#: assets/state-operator-validation, cmd/nvidia-validator): the init container's name -> the link
#: it proves. Operand pods carry the same names as init containers that only wait for the ready file.
VALIDATIONS = {
    "driver-validation": "driver",
    "toolkit-validation": "toolkit",
    "cuda-validation": "toolkit",
    "plugin-validation": "device-plugin",
    "mofed-validation": "driver",
}
#: Images of operands a stack may find installed beside it as their own release, in any namespace
#: (dcgm-exporter's own Helm chart beside the GPU Operator, NVIDIA/dcgm-exporter deployment/).
STANDALONE_IMAGES = {"dcgm-exporter": "dcgm-exporter", "gpu-feature-discovery": "gpu-feature-discovery"}


#: Cloud instance types that come with NVIDIA GPUs (AWS p/g families from g3's Tesla M60 on, but not
#: g4ad's AMD Radeon; Azure NC/ND/NV, GCP a2/a3/g2).
GPU_INSTANCE = re.compile(r"^(p[2-6][a-z]*\.|g[3-6](?!ad)[a-z]*\.|Standard_N[CDV]|a[23]-|g2-)")


@dataclass(frozen=True)
class Stack:
    """One stack's names for the links, as the checks and the fixes need them."""

    id: str  #: gpuchain, gpu-operator, nvidia-device-plugin, gke, eks, aks, none
    title: str  #: what the output calls it
    namespace: str
    daemonsets: dict[str, str]  #: operand state -> DaemonSet name (the names this stack uses)
    containers: dict[str, str]  #: operand state -> main container name
    policy: ClusterPolicySpec  #: the switches: which links this stack deploys
    policy_obj: Obj | None = None
    policy_resource: str = ""  #: e.g. clusterpolicies.nvidia.com (for kubectl), "" without a policy
    policy_problems: tuple[str, ...] = ()
    host_driver: bool = False  #: the driver is the node's own (managed image, pre-installed)
    prefixes: dict[str, str] = field(default_factory=dict)  #: DaemonSet name prefix -> operand state
    notes: tuple[str, ...] = ()  #: what the adapter saw, for the report header
    #: validator init container name -> the link it proves (NVIDIA's names by default)
    validations: dict[str, str] = field(default_factory=lambda: dict(VALIDATIONS))
    #: what to put on a node whose image should carry the driver and runtime and does not ("" when
    #: the stack installs them itself or the image is the user's own)
    node_image: str = ""
    #: where the node image installs the driver on the host, for operands that must mount it ("" = /)
    driver_root: str = ""
    #: how a user installs the driver on a node of this stack where it is missing ("" = the generic advice)
    driver_install: str = ""
    #: prefix of driver DaemonSets made per kernel and OS for precompiled drivers ("" = none)
    precompiled_prefix: str = ""
    #: the OS families the stack publishes driver container images for (() = it publishes none)
    driver_image_os: tuple[str, ...] = ()
    #: "namespace/name" of an operand DaemonSet outside the stack's namespace -> its operand state
    #: (a second release of an operand, e.g. dcgm-exporter's own chart beside the operator)
    elsewhere: dict[str, str] = field(default_factory=dict)

    def operand_in(self, namespace: str, ds_name: str) -> str | None:
        """The operand state of DaemonSet ``namespace/ds_name``: the stack's own (in its namespace) or
        another release of an operand found elsewhere (None: not one of the chain's)."""
        if namespace == self.namespace:
            return self.operand_of(ds_name)
        return self.elsewhere.get(f"{namespace}/{ds_name}")

    def operand_of(self, ds_name: str) -> str | None:
        """The operand state a DaemonSet of this stack stands for (None: not one of the chain's)."""
        for state, name in self.daemonsets.items():
            if name == ds_name:
                return state
        return next((state for prefix, state in self.prefixes.items() if ds_name.startswith(prefix)), None)

    def ds(self, state: str) -> str:
        """The DaemonSet name of an operand in this stack."""
        return self.daemonsets.get(state, state)

    def container(self, state: str) -> str:
        """The main container name of an operand in this stack."""
        return self.containers.get(state, self.ds(state))

    @property
    def policy_name(self) -> str:
        """The active policy's name ("" when the stack has none)."""
        return name_of(self.policy_obj) if self.policy_obj else ""

    def patch_policy(self, patch: str) -> str:
        """The kubectl command that merge-patches this stack's policy."""
        return f"kubectl patch {self.policy_resource} {self.policy_name} --type merge -p '{patch}'"

    def render(self, fix: Fix) -> str:
        """The fix as the commands a person runs on this stack (its names, its namespace)."""
        ch = fix.changes
        if fix.op is FixOp.LABEL_NODE:
            parts = [f"{k}-" if v is None else f"{k}={v}" for k, v in ch.items()]
            overwrite = " --overwrite" if any(v is not None for v in ch.values()) else ""
            return f"kubectl label node {fix.target} {' '.join(parts)}{overwrite}"
        if fix.op is FixOp.PATCH_POLICY:
            return (
                f"kubectl patch {self.policy_resource or 'clusterpolicy'} {fix.target} --type merge "
                f"-p '{json.dumps(ch, separators=(',', ':'))}'"
            )
        if fix.op is FixOp.PATCH_DAEMONSET:
            ns, _, name = fix.target.partition("/")
            return f"kubectl -n {ns} patch ds {name} --type merge -p '{json.dumps(ch, separators=(',', ':'))}'"
        if fix.op is FixOp.CREATE:
            return f"kubectl apply -f - <<< '{json.dumps(ch, separators=(',', ':'))}'"
        # Work outside the cluster is said as a shell comment, so the whole line still pastes.
        if fix.op is FixOp.NODE and ch.get("drain") is False:
            return f"# on node {fix.target} (outside the cluster): {ch['action']}"
        if fix.op is FixOp.NODE:
            drain = f"kubectl cordon {fix.target} && kubectl drain {fix.target} --ignore-daemonsets"
            return f"{drain}   # then on the node (outside the cluster): {ch['action']}"
        if fix.op is FixOp.HARDWARE:
            return f"# hardware, no command fixes it: {ch['action']}"
        if fix.op is FixOp.DELETE:
            scope = f"-n {ch['namespace']} " if ch.get("namespace") else ""  # cluster-scoped: no namespace
            return f"kubectl {scope}delete {str(ch['kind']).lower()} {ch['name']}"
        verb = "upgrade --install" if ch.get("upgrade") else "install"
        flags = f" {ch['flags']}" if ch.get("flags") else ""
        return f"helm {verb} {ch['release']} {ch['chart']} -n {ch['namespace']} --create-namespace{flags}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``doctor -o json``)."""
        return {
            "id": self.id,
            "title": self.title,
            "namespace": self.namespace,
            "policy": f"{self.policy_resource}/{self.policy_name}" if self.policy_obj else None,
            "hostDriver": self.host_driver,
            "daemonsets": dict(self.daemonsets),
            "notes": list(self.notes),
        }


def is_gpu_node(node: Obj) -> bool:
    """Any stack's sign of NVIDIA GPUs: detection labels, cloud accelerator labels, or GPU capacity."""
    labels = labels_of(node)
    if any(labels.get(k) not in (None, "", "false") for k in GPU_NODE_LABELS if k != "accelerator"):
        return True
    if labels.get("accelerator", "").startswith("nvidia"):
        return True
    if GPU_INSTANCE.match(labels.get("node.kubernetes.io/instance-type", "")):
        return True
    capacity = (node.get("status") or {}).get("capacity") or {}
    return any(str(k).startswith(("nvidia.com/gpu", "nvidia.com/mig-")) for k in capacity)


def provider_of(nodes: list[Obj]) -> str:
    """eks, aks, gke or "" from the nodes' providerID (aws://, azure://, gce://)."""
    for node in nodes:
        pid = str((node.get("spec") or {}).get("providerID") or "")
        for prefix, provider in (("aws://", "eks"), ("azure://", "aks"), ("gce://", "gke")):
            if pid.startswith(prefix):
                return provider
    return ""


Adapter = Callable[["Snapshot"], Stack | None]


def adapters() -> list[Adapter]:
    """The adapters in the order they are asked (policy-backed stacks first)."""
    from gpuchain.doctor.stacks import device_plugin, gke, gpu_operator, gpuchain

    return [gpuchain.detect, gpu_operator.detect, gke.detect, device_plugin.detect]


def _template_images(ds: Obj) -> str:
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return " ".join(str(c.get("image", "")) for c in [*(spec.get("containers") or [])])


def elsewhere(snapshot: Snapshot, stack: Stack) -> dict[str, str]:
    """Operand DaemonSets outside the stack's namespace, by image (a separate dcgm-exporter release)."""
    found = {}
    for ds in snapshot.daemonsets:
        ns = str((ds.get("metadata") or {}).get("namespace") or "")
        if ns == stack.namespace:
            continue
        images = _template_images(ds)
        for marker, state in STANDALONE_IMAGES.items():
            if marker in images or name_of(ds).endswith(marker):
                found[f"{ns}/{name_of(ds)}"] = state
    return found


def detect(snapshot: Snapshot) -> Stack:
    """The stack that runs this cluster; ``none`` (every link off) when no adapter recognises it."""
    for adapter in adapters():
        stack = adapter(snapshot)
        if stack is not None:
            more = elsewhere(snapshot, stack)
            return dataclasses.replace(stack, elsewhere=more) if more else stack
    provider = provider_of(snapshot.nodes)
    off = ClusterPolicySpec.model_validate(
        {k: {"enabled": False} for k in ("driver", "toolkit", "validator", "devicePlugin", "gfd", "dcgmExporter")}
        | {"migManager": {"enabled": False}}
    )
    return Stack(
        "none",
        "no GPU stack found",
        "",
        {},
        {},
        off,
        host_driver=True,
        notes=(f"cloud: {provider}",) if provider else (),
    )


def daemonsets_in(snapshot: Snapshot, namespace: str) -> dict[str, Obj]:
    """The snapshot's DaemonSets of one namespace by name."""
    return {name_of(d): d for d in snapshot.daemonsets if (d.get("metadata") or {}).get("namespace") == namespace}
