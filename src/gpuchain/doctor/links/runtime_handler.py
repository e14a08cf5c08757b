"""An NVIDIA runtime handler other than ``nvidia`` that k3s's or RKE2's containerd was never given.

The NVIDIA Container Toolkit ships one runtime per mode, each a containerd handler a RuntimeClass may name:
``nvidia`` (nvidia-container-runtime), ``nvidia-cdi``, ``nvidia-legacy`` and ``nvidia-experimental``. k3s and
RKE2 write their embedded containerd's config.toml afresh at every start and add only the handlers their runtime
autodetect knows (links/runtime_autodetect.py): up to their October 2024 patch releases that list is ``nvidia``
and ``nvidia-experimental`` (k3s-io/k3s pkg/agent/containerd/nvidia.go@2570a9b potentialRuntimes); the change of
k3s-io/k3s#11065 ("Add the nvidia runtime cdi"; backports #11092-#11095) adds ``nvidia-cdi`` from v1.31.2+k3s1,
v1.30.6+k3s1, v1.29.10+k3s1 and v1.28.15+k3s1 (RKE2 runs k3s's agent: the rke2r1 releases of those versions). A pod
on a RuntimeClass whose handler the list lacks gets no sandbox: containerd says `no runtime for "<handler>" is
configured` (containerd internal/cri/config/config.go). What repairs is a release that registers the handler, the
handler in the template they render from (config.toml.tmpl), or the pod on the ``nvidia`` RuntimeClass.

On a node whose kubelet reaches Docker (containerRuntimeVersion docker://) a runtime handler is Docker's: the kubelet's
dockershim (to Kubernetes 1.23) and cri-dockerd before v0.4.0 refuse every handler but ``docker`` (`RuntimeHandler %q
not supported`, Mirantis/cri-dockerd core/sandbox_run.go@v0.3.9); cri-dockerd from v0.4.0 (#350) runs the pod's
sandbox and containers under the Docker runtime the handler names and says `no runtime for %q is configured` where
Docker has none (core/sandbox_helpers.go@v0.4.0). GPU pods on Docker get the GPU through Docker's default runtime
(nvidia in /etc/docker/daemon.json, the device plugin's documented Docker setup), with no RuntimeClass at all.

NVIDIA's GPU Operator configures one container runtime for the whole cluster: containerd where any GPU node runs it,
else the runtime the nodes report (controllers/state_manager.go getRuntime; `gpuchain.operator.migrate.runtime_of`),
and puts its operands on its RuntimeClass. A Docker node in a cluster it runs on containerd gets operands it cannot
sandbox, and no setting of the operator gives that one node Docker's way: mixed runtimes are not supported.
"""

from __future__ import annotations

import re

from gpuchain.common.labels import OPERANDS_LABEL
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.runtime_default import DOCKER_DEFAULT
from gpuchain.doctor.node import KUBEADM, Distribution, runtime_scheme
from gpuchain.operator.migrate import runtime_of

#: The toolkit's runtime modes other than plain ``nvidia`` (nvidia-container-toolkit cmd/nvidia-ctk runtime
#: configure; the RuntimeClasses the GPU Operator and the device plugin chart may name).
NVIDIA_MODES = ("nvidia-cdi", "nvidia-legacy", "nvidia-experimental")
#: containerd's CRI words for a missing handler ('no runtime for %q is configured'), the handler captured.
MISSING = re.compile(r'no runtime for \\?"([\w.-]+)\\?" is configured')
#: dockershim's and cri-dockerd's (before v0.4.0) refusal of a handler other than ``docker``, the handler captured.
REFUSED = re.compile(r'RuntimeHandler \\?"([\w.-]+)\\?" not supported')
#: The first cri-dockerd release that hands a RuntimeClass's handler to Docker (Mirantis/cri-dockerd#350).
CRI_DOCKERD_HANDLERS = "v0.4.0"
#: The executable each mode's handler runs (nvidia-container-toolkit's packages install them in /usr/bin).
RUNTIME = "nvidia-container-runtime"
BINARY = {
    "nvidia-cdi": RUNTIME + ".cdi",
    "nvidia-legacy": RUNTIME + ".legacy",
    "nvidia-experimental": RUNTIME + "-experimental",
}
#: The first releases whose autodetect registers nvidia-cdi (k3s-io/k3s#11065 and its backports), per minor.
CDI_FROM = {"1.28": 15, "1.29": 10, "1.30": 6, "1.31": 2}


def missing_mode(text: str) -> str:
    """The NVIDIA mode handler (nvidia-cdi, ...) containerd says it has no runtime for in ``text``; "" if none."""
    m = MISSING.search(text)
    return m.group(1) if m and m.group(1) in NVIDIA_MODES else ""


def _cdi_release(dist: Distribution, version: str) -> str:
    """The release of the node's minor that registers nvidia-cdi, or the list of them where the minor is unknown."""
    suffix = "rke2r1" if dist.name.lower() == "rke2" else "k3s1"
    m = re.search(r"v?1\.(\d+)\.", version or "")
    minor = f"1.{m.group(1)}" if m else ""
    if minor in CDI_FROM:
        return f"v{minor}.{CDI_FROM[minor]}+{suffix}"
    return ", ".join(f"v{k}.{v}+{suffix}" for k, v in CDI_FROM.items()) + " or any later minor"


def mode_handler_repair(dist: Distribution, handler: str, version: str = "") -> str | None:
    """The node work that gives k3s's or RKE2's containerd the NVIDIA ``handler`` a RuntimeClass names; None on a
    distribution whose containerd config is not rendered by k3s/RKE2, or for a handler that is not an NVIDIA mode."""
    if dist is KUBEADM or handler not in NVIDIA_MODES:
        return None
    upgrade = (
        f"upgrade {dist.name} to a release whose runtime autodetect registers nvidia-cdi (k3s-io/k3s#11065: "
        f"{_cdi_release(dist, version)} or later), or "
        if handler == "nvidia-cdi"
        else ""
    )
    return (
        f"{dist.name}'s containerd has no {handler} runtime handler: its runtime autodetect registers only the "
        f"NVIDIA runtimes it knows, and {dist.containerd_config} is rewritten at every start: {upgrade}add the "
        f"{handler} runtime (runtime_type io.containerd.runc.v2, options BinaryName /usr/bin/{BINARY[handler]}) "
        f"to {dist.containerd_config}.tmpl, then {dist.restart}; or run the pod with runtimeClassName: nvidia "
        "instead"
    )


def docker_handler_repair(scheme: str, said: list[str]) -> str | None:
    """The node work for pods whose NVIDIA RuntimeClass handler a Docker node cannot run, by what its CRI shim said in
    ``said`` (the sandbox Events): a shim that takes no handler at all (then the pods must name no RuntimeClass and
    Docker's default runtime gives them the GPU, or the shim must be one that passes handlers on), or a cri-dockerd
    that passes it to a Docker without that runtime (then Docker needs the runtime registered). None on a node that
    does not run pods through Docker (``scheme`` is the node's containerRuntimeVersion scheme)."""
    if scheme != "docker":
        return None
    refused = next((m.group(1) for m in map(REFUSED.search, said) if m), "")
    if refused:
        return (
            f"this node's kubelet reaches Docker through a CRI shim that takes no runtime handler (dockershim, or "
            f"cri-dockerd before {CRI_DOCKERD_HANDLERS}), so no pod with a RuntimeClass starts here: remove "
            f"runtimeClassName: {refused} from the GPU pods' spec (their Deployment's or DaemonSet's pod template) "
            f"and make nvidia Docker's default runtime, which then gives every container the GPU: {DOCKER_DEFAULT}; "
            f"or upgrade cri-dockerd to {CRI_DOCKERD_HANDLERS} or later, which hands the {refused} handler to the "
            f"Docker runtime of that name (registered by nvidia-ctk runtime configure --runtime=docker)"
        )
    missing = next((m.group(1) for m in map(MISSING.search, said) if m), "nvidia")
    return (
        f"cri-dockerd hands the RuntimeClass's {missing} handler to Docker, which has no runtime of that name: "
        f"register it with nvidia-ctk runtime configure --runtime=docker (it adds the {missing} runtime to "
        f"/etc/docker/daemon.json), then systemctl restart docker and systemctl restart cri-docker; or remove "
        f"runtimeClassName from the GPU pods and make nvidia Docker's default runtime: {DOCKER_DEFAULT}"
    )


def mixed_runtime_repair(ctx: Context, view: NodeView) -> str | None:
    """The node work for a Docker node among GPU nodes that NVIDIA's operator runs on containerd: the operator chose
    containerd for the whole cluster and its operands' RuntimeClass cannot run here, so the node joins the others'
    runtime, or the operator keeps off it until then. None on a node that is not Docker's, or where the stack has no
    operator or the operator chose Docker itself."""
    if not ctx.stack.policy_resource or runtime_scheme(view.node) != "docker":
        return None
    if runtime_of(ctx.snapshot.nodes) != "containerd":
        return None
    return (
        "NVIDIA's GPU operator configures one container runtime for the whole cluster, containerd here because other "
        "GPU nodes run it, and puts every operand on its RuntimeClass, which this Docker node cannot run (mixed "
        f"runtimes are not supported): move {view.name} to containerd like the cluster's other GPU nodes (install "
        "containerd, point the kubelet's --container-runtime-endpoint at unix:///run/containerd/containerd.sock, "
        f"restart the kubelet), or keep the operator off it until then: kubectl label node {view.name} "
        f"{OPERANDS_LABEL}=false"
    )
