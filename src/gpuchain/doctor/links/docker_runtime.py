"""The repair of a toolkit validation that fails on a node whose kubelet runs pods through Docker.

The GPU Operator's validator proves the toolkit link by running nvidia-smi in its own container (NVIDIA/gpu-operator
validator/main.go@v1.11.1, ``Toolkit.validate``: "invoke nvidia-smi command to check if container run with toolkit
injected files", else "toolkit is not ready"), and only the NVIDIA runtime injects it. Through Docker (dockershim,
cri-dockerd) a pod runs under Docker's default runtime, whatever RuntimeClass it names, so on such a node the nvidia
runtime must be Docker's default: ``"default-runtime": "nvidia"`` in /etc/docker/daemon.json. The operator's toolkit
writes that itself when it runs there (its Docker config is /etc/docker/daemon.json, controllers/object_controls.go@
v1.11.1 ``DefaultDockerConfigFile``); with ``toolkit.enabled=false`` the operator expects the host's toolkit to have
done it, and a Docker left on runc keeps every operand waiting in toolkit-validation (NVIDIA/deepops#381: the nvidia
runtime registered, "but not the default runtime"). containerd's config, which the generic repair names, is not
Docker's.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.runtime_default import docker_setup
from gpuchain.operator.operands import TOOLKIT


def docker_toolkit_repair(ctx: Context, view: NodeView, *, rewrite: str) -> str:
    """The repair of the nvidia runtime on ``view``'s node where its kubelet runs pods through Docker ("" on other
    runtimes): ``rewrite`` (the operator's toolkit pod restarted, where it runs there), then nvidia made Docker's
    default runtime; where the operator does not deploy its toolkit, also the switch that lets it do so."""
    docker = docker_setup(view.node)
    if not docker:
        return ""
    own = (
        ""
        if ctx.deploys(TOOLKIT) or ctx.policy_obj is None
        else "; or let the GPU Operator install and configure the toolkit itself (toolkit.enabled=true: kubectl "
        f'patch {ctx.policy_ref} --type merge -p \'{{"spec":{{"toolkit":{{"enabled":true}}}}}}\')'
    )
    return f"{rewrite}make nvidia Docker's default runtime on {view.name}: {docker}{own}"
