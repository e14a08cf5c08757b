"""An nvidia runtime left on a node by a former GPU Operator install.

The GPU Operator's toolkit installs the NVIDIA runtime under its install dir on the host (ClusterPolicy
spec.toolkit.installDir, /usr/local/nvidia by default: its toolkit/nvidia-container-runtime), and points containerd's
nvidia handler at it. Uninstalling the operator leaves that directory. k3s and RKE2 look there first when they write
their containerd config (k3s-io/k3s pkg/agent/containerd/runtimes.go findNvidiaContainerRuntimes: the operator's
/usr/local/nvidia/toolkit before the package's /usr/bin), and a containerd config edited by the operator keeps the
path: the node then runs the stale binary, not the runtime its packages installed (k3s-io/k3s#4391). Where no GPU
Operator toolkit runs on the node, a refusal by that binary is the leftover's, and removing it is the repair.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.node import KUBEADM, distribution_of
from gpuchain.operator.operands import TOOLKIT

#: The operator toolkit's runtime binaries under its default install dir, as a runtime's refusal names them.
OPERATOR_RUNTIME = re.compile(r"(/usr/local/nvidia)/toolkit/nvidia-container-runtime[\w.-]*")


def leftover_runtime(ctx: Context, view: NodeView, text: str, rerun: str) -> Fix | None:
    """The node work that removes a former operator install's runtime named in ``text`` and has the node's
    containerd use its packaged runtime again, then ``rerun``; None where the message names no such binary or a GPU
    Operator toolkit deploys on this node (its runtime is then the live one)."""
    found = OPERATOR_RUNTIME.search(text)
    if found is None or view.pod(TOOLKIT) is not None or ctx.deploys(TOOLKIT):
        return None
    dist = distribution_of(view.node)
    again = (
        f"restart {dist.name} so it finds the packaged runtime in /usr/bin again: {dist.restart}"
        if dist is not KUBEADM
        else "point containerd's nvidia runtime at the packaged one (nvidia-ctk runtime configure "
        f"--runtime=containerd) and {dist.restart}"
    )
    return Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{found.group()} is left from a former GPU Operator install (no GPU Operator toolkit runs "
            f"here): remove it (rm -rf {found.group(1)}), {again}, then {rerun}",
            NOT_SIMULATED: "a host directory left behind is a fact of the node no scenario names",
        },
    )
