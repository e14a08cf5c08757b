"""A Juju-deployed worker that is an LXD machine without the host's GPU passed in (issue 26). Charmed Kubernetes on
a "localhost" (LXD) cloud installs the NVIDIA userspace, the container runtime's hook and the device plugin inside the
worker's LXD machine, but LXD gives a container or VM no host device until one is added to it: the hook's
libnvidia-container then finds no device to set up ("nvidia-container-cli: initialization error: ..." with CUDA's
"no cuda-capable device" or NVML's "driver not loaded", NVIDIA/libnvidia-container src/cli/configure.c) for every GPU
container. No link of the GPU stack is at fault and no driver change helps: the repair is LXD's GPU device on the
machine (`lxc config device add <machine> gpu gpu`, documentation.ubuntu.com/lxd reference/devices_gpu, the step
charmed-kubernetes/bundle's GPU notes give for localhost deployments).

The machine is known from the node: a Juju charm's worker (the ``juju-application`` label the kubernetes-worker charm
sets) whose hostname is Juju's own machine name, ``juju-<last 6 of the model uuid>-<machine id>`` with ``/`` as ``-``
(juju/juju core/instance/namespace.go): a cloud's VM has its cloud's hostname (ip-..., MAAS's names), while an LXD
machine's hostname is its instance name; and no providerID, which LXD, having no cloud provider, never sets."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import refused_message
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj

#: The label Juju's Kubernetes charms put on their nodes (the charm's application name).
JUJU_APPLICATION = "juju-application"
#: Juju's machine name: "juju-" + the model uuid's last 6 hex digits + "-" + the machine id, "/" written "-"
#: (a container in a machine is "<m>/lxd/<n>").
JUJU_MACHINE = re.compile(r"^juju-[0-9a-f]{6}-\d+(-lxd-\d+)?$")
#: The reasons libnvidia-container gives when the container it sets up sees no GPU device node at all.
NO_DEVICE = re.compile(r"no cuda-capable device|driver not loaded|no nvidia devices? (were )?found", re.IGNORECASE)


def lxd_machine(view: NodeView) -> str:
    """The LXD machine name of a Juju worker that runs in one ("" for any other node): the evidence is Juju's own
    machine naming as the hostname, the charm's label and no cloud providerID."""
    name = view.labels.get("kubernetes.io/hostname", view.name)
    if JUJU_APPLICATION not in view.labels or not JUJU_MACHINE.match(name):
        return ""
    return "" if (view.node.get("spec") or {}).get("providerID") else name


def lxd_without_gpu(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """The node finding where GPU pods on a Juju LXD worker are refused by the runtime hook because no GPU device is
    in the machine; None where the node is no such machine or no pod says so."""
    machine = lxd_machine(view)
    if not machine:
        return None
    refused: list[str] = []
    said: catalog.Match | None = None
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        text = refused_message(view, pod)
        found = catalog.find(text, "libnvidia-container.initialization-error")
        if found is None or not NO_DEVICE.search(found.line):
            continue
        refused.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
        said = said or found
    if said is None:
        return None
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"on the LXD host, give the worker's machine the host's GPU: lxc config device add {machine} "
            f"gpu gpu (each GPU worker, by the machine name juju status shows), restart the machine's container "
            f"runtime, then delete the pods: {', '.join(refused[:3])}",
            "drain": False,
            NOT_SIMULATED: "the LXD machine's devices are a fact of the host, outside the cluster",
        },
    )
    return node_finding(
        view,
        fid="node.lxd-gpu-not-passed",
        sev=Severity.ERROR,
        link="node",
        cause="GPU pods on this node fail to start: the node is a Juju worker in an LXD machine, and the machine has "
        "no GPU device from its host, so the NVIDIA runtime hook finds no GPU to give the container; the GPU "
        "stack inside it is not at fault.",
        evidence=[
            f"GPU pods refused at start: {', '.join(refused[:5])}",
            *said.evidence("runtime says"),
            f"Juju machine {machine} ({JUJU_APPLICATION}={view.labels[JUJU_APPLICATION]}, no providerID)",
        ],
        fix=ctx.stack.render(action),
        action=action,
    )
