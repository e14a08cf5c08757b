"""The node under the chain: conditions that keep GPU pods off it, its container runtime, and
which Kubernetes distribution runs it (where its containerd keeps its socket and config).

Every link of the chain is a pod on the node, so a node that is not Ready, or under memory, disk
or PID pressure, or without a network, breaks them all at once; these are checked before the
chain and, when they hold, are the node's root cause. Conditions and taints are read as the
kubelet and the node lifecycle controller write them (kubernetes/kubernetes
``pkg/kubelet/nodestatus/setters.go``, ``pkg/controller/nodelifecycle``; taint keys from
``k8s.io/api/core/v1/well_known_taints.go``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.common.remember import remembered
from gpuchain.doctor import catalog
from gpuchain.doctor.cdi_runtime import runtime_no_cdi
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.cri_unloaded import ID as CRI_UNLOADED
from gpuchain.doctor.cri_unloaded import cri_unloaded
from gpuchain.doctor.kubelet_dirs import K3S_OLD_ROOT, RKE_ANNOTATION, UNWATCHED, hostpath_patch, kubelet_root
from gpuchain.doctor.kubelet_state import bad_checkpoint
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.operator_says import operator_line
from gpuchain.doctor.owners import owner_daemonset, toolkit_env
from gpuchain.doctor.pods import pod_state, start_refused
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, MIG_MANAGER, TOOLKIT, deploy_label

#: Node conditions other than Ready that block new pods, with the taint the node lifecycle
#: controller adds for each (TaintNodesByCondition) and what the kubelet does under it.
PRESSURE = {
    "MemoryPressure": ("node.kubernetes.io/memory-pressure", "the kubelet evicts pods to reclaim memory"),
    "DiskPressure": ("node.kubernetes.io/disk-pressure", "the kubelet evicts pods and deletes images to free disk"),
    "PIDPressure": ("node.kubernetes.io/pid-pressure", "the kubelet evicts pods to free process IDs"),
}
NETWORK_UNAVAILABLE = ("NetworkUnavailable", "node.kubernetes.io/network-unavailable")
#: Ready=False / Unknown: the taints the node lifecycle controller adds.
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

#: Container runtimes NVIDIA's GPU Operator can configure, by the scheme of
#: ``status.nodeInfo.containerRuntimeVersion`` (NVIDIA/gpu-operator controllers/state_manager.go
#: getRuntimeString at a22dbf6: anything else is "runtime not recognized").
RECOGNISED_RUNTIMES = ("containerd", "cri-o", "docker")


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Where a distribution's containerd keeps its socket and config (the toolkit must be told)."""

    name: str
    marker: str  #: what ``status.nodeInfo.kubeletVersion`` carries, e.g. ``+k3s1``
    containerd_config: str
    containerd_socket: str
    #: how its containerd is restarted so it reads its config (and, on k3s and RKE2, finds the runtimes) again
    restart: str = "systemctl restart containerd"


#: NVIDIA's toolkit writes /etc/containerd/config.toml and signals /run/containerd/containerd.sock
#: unless told otherwise (NVIDIA/gpu-operator controllers/object_controls.go
#: DefaultContainerdSocketFile at a22dbf6). k3s and RKE2 run their own containerd elsewhere: the
#: paths NVIDIA's maintainers give in NVIDIA/gpu-operator#406 and controllers/transforms_test.go,
#: RKE2's data dir /var/lib/rancher/rke2 and socket per docs.rke2.io (reference/cli_tools).
KUBEADM = Distribution(
    name="kubeadm",
    marker="",
    containerd_config="/etc/containerd/config.toml",
    containerd_socket="/run/containerd/containerd.sock",
)
DISTRIBUTIONS = (
    KUBEADM,
    Distribution(
        name="k3s",
        marker="+k3s",
        containerd_config="/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        containerd_socket="/run/k3s/containerd/containerd.sock",
        # k3s-killall.sh (installed with k3s) stops its containerd and the containers' shims too
        restart="k3s-killall.sh; systemctl start k3s (k3s-agent on an agent)",
    ),
    Distribution(
        name="rke2",
        marker="+rke2",
        containerd_config="/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        containerd_socket="/run/k3s/containerd/containerd.sock",
        restart="rke2-killall.sh; systemctl start rke2-server (rke2-agent on an agent)",
    ),
)


def node_info(node: Obj) -> dict[str, str]:
    """status.nodeInfo (empty when the node never reported)."""
    return dict(_node_info(node))


@remembered
def _node_info(node: Obj) -> dict[str, str]:
    """`node_info`, worked out once per node in a diagnosis (its checks ask some ten times a node), for the
    readers here that only read it (`node_info` hands out copies)."""
    return {str(k): str(v) for k, v in (((node.get("status") or {}).get("nodeInfo") or {}).items())}


def distribution_of(node: Obj) -> Distribution:
    """The distribution the node's kubelet version names (kubeadm and the like: the default paths)."""
    kubelet = _node_info(node).get("kubeletVersion", "")
    return next((d for d in DISTRIBUTIONS if d.marker and d.marker in kubelet), KUBEADM)


#: ``1.6.39`` of ``containerd://1.6.39`` (`runtime_version`), compiled once, not looked up in re's cache each node.
RUNTIME_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@remembered
def runtime_version(node: Obj) -> tuple[int, ...] | None:
    """(1, 6, 39) of ``containerd://1.6.39`` (or of k3s' ``1.7.20-k3s1``); None when unreadable (asked twice a
    node: answered once a node in a diagnosis)."""
    raw = _node_info(node).get("containerRuntimeVersion", "").partition("://")[2]
    match = RUNTIME_VERSION.match(raw)
    return tuple(int(g or 0) for g in match.groups()) if match else None


def runtime_scheme(node: Obj) -> str:
    """``containerd`` of ``containerd://1.7.13`` ("" when the node reports none)."""
    return _node_info(node).get("containerRuntimeVersion", "").partition("://")[0]


#: Where the toolkit's CRI-O hook mode writes its OCI hook: NVIDIA/nvidia-container-toolkit's CRI-O installer
#: (flag --hooks-dir, env CRIO_HOOKS_DIR, default /usr/share/containers/oci/hooks.d; file oci-nvidia-hook.json).
CRIO_HOOK = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def runtime_setup(node: Obj, default: bool = False) -> str:
    """How a person gives this node's container runtime the NVIDIA runtime (as its default where
    ``default``) and makes it read that: CRI-O where the node reports ``cri-o://`` (its runtime handler, or
    the toolkit's OCI hook, which CRI-O reads only from a directory of its hooks_dir), else containerd.
    A fix that says "restart containerd" on a CRI-O node repairs nothing."""
    flag = " --set-as-default" if default else ""
    if runtime_scheme(node) == "cri-o":
        return (
            f"nvidia-ctk runtime configure --runtime=crio{flag} (a [crio.runtime.runtimes.nvidia] drop-in under "
            f"/etc/crio/crio.conf.d/), or in the toolkit's CRI-O hook mode (CRIO_CONFIG_MODE=hook) make sure "
            f"{CRIO_HOOK} exists and its directory is in hooks_dir of [crio.runtime] in /etc/crio/crio.conf or "
            "a drop-in; then systemctl restart crio"
        )
    return f"nvidia-ctk runtime configure --runtime=containerd{flag} && systemctl restart containerd"


@dataclass(frozen=True, kw_only=True)
class Condition:
    """One node condition that keeps pods off the node, with the taint that goes with it."""

    type: str
    status: str
    reason: str
    message: str
    taint: str  #: the taint key present on the node for it ("" if none)

    def describe(self) -> str:
        """``DiskPressure=True (KubeletHasDiskPressure): kubelet has disk pressure``."""
        why = f" ({self.reason})" if self.reason else ""
        return f"condition {self.type}={self.status}{why}: {self.message}".rstrip(": ")


def blocking_conditions(node: Obj) -> list[Condition]:
    """Ready not True, then each pressure or network condition that is True (node status order)."""
    listed = (node.get("status") or {}).get("conditions") or []
    if all((c.get("type") == "Ready") is (c.get("status") == "True") for c in listed):
        return []  # Ready True and nothing else True (most nodes): no condition blocks, no taint to read
    conditions = {str(c.get("type")): c for c in listed}
    taints = {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []}
    out = []
    ready = conditions.get("Ready")
    if ready is not None and ready.get("status") != "True":
        taint = next((t for t in NOT_READY_TAINTS if t in taints), "")
        out.append(_condition(ready, taint))
    for kind, (taint, _) in PRESSURE.items():
        c = conditions.get(kind)
        if c is not None and c.get("status") == "True":
            out.append(_condition(c, taint if taint in taints else ""))
    network = conditions.get(NETWORK_UNAVAILABLE[0])
    if network is not None and network.get("status") == "True":
        out.append(_condition(network, NETWORK_UNAVAILABLE[1] if NETWORK_UNAVAILABLE[1] in taints else ""))
    return out


def _condition(c: Obj, taint: str) -> Condition:
    return Condition(
        type=str(c.get("type")),
        status=str(c.get("status")),
        reason=str(c.get("reason") or ""),
        message=str(c.get("message") or ""),
        taint=taint,
    )


# -- the checks ---------------------------------------------------------------------------------

#: What a person does on the node for each condition (nothing in the cluster's objects clears them).
_ACTIONS = {
    "Ready": "systemctl restart containerd kubelet on the node, or power-cycle it through its BMC if it does not "
    "answer",
    "MemoryPressure": "free memory on the node: lower the memory limits of its largest pods (kubectl top pods -A "
    "--sort-by=memory names them) or move them to other nodes",
    "DiskPressure": "free the node's disk: remove unused images (crictl rmi --prune) and old logs, or grow the "
    "disk; the kubelet lifts DiskPressure once usage falls below its eviction threshold",
    "PIDPressure": "raise the node's PID limits (kubelet podPidsLimit, sysctl -w kernel.pid_max=4194304) or stop "
    "the pod that forks without bound",
    "NetworkUnavailable": "restart the CNI pod on this node (kubectl -n kube-system delete pod, the one with "
    "spec.nodeName=NODE) and give the node's pod CIDR its cloud route",
}
#: The scenario fact each condition stands for (what the simulator clears when the work is done).
_FACTS = {
    "Ready": "kubelet-stopped",
    "MemoryPressure": "memory-pressure",
    "DiskPressure": "disk-pressure",
    "PIDPressure": "pid-pressure",
    "NetworkUnavailable": "network-unavailable",
}


#: A node whose spec.providerID is a cloud's is an instance of a node group (an Auto Scaling group, a managed
#: instance group, a VM scale set, Karpenter's NodePool) that replaces an instance it loses.
CLOUD_PROVIDER_IDS = ("aws://", "gce://", "azure://")
#: The labels a node group's provisioner puts on its nodes (Karpenter, EKS managed node groups, GKE node pools, AKS
#: agent pools), where a dump has lost the providerID.
NODE_GROUP_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)
#: The MIG manager's line for a host systemd service it stops before it changes the MIG layout and starts again
#: after (NVIDIA/mig-parted's MIG manager, its host GPU clients: "Stopping %s (active, will-restart)").
STOPS_KUBELET = re.compile(r"\b(?:Stopping|stop|pause) kubelet(?:\.service)? \(active, will-restart\)", re.IGNORECASE)


def _not_ready_work(ctx: Context, view: NodeView) -> tuple[str, list[str]]:
    """What brings a NotReady node back, and what on the node says why: a kubelet that names a checkpoint file it
    cannot restore is repaired as it says (`kubelet_state`), a cloud instance that does not answer is
    replaced by its node group, and a MIG manager whose host GPU clients include kubelet.service stopped the
    kubelet itself (its log), which the next MIG change does again unless kubelet leaves that list."""
    work = _ACTIONS["Ready"]
    checkpoint = bad_checkpoint(view)
    if checkpoint is not None:
        # The kubelet names the file it cannot restore: restarting it, or replacing the instance, meets it again.
        return checkpoint.work(view.name), [checkpoint.said]
    provider_id = str((view.node.get("spec") or {}).get("providerID") or "")
    if provider_id.startswith(CLOUD_PROVIDER_IDS) or any(k in view.labels for k in NODE_GROUP_LABELS):
        work = (
            "systemctl restart containerd kubelet on the node; if it does not come back, replace the instance: "
            f"kubectl delete node {view.name} and terminate the instance, and its node group starts a new one"
        )
    mig = view.pod(MIG_MANAGER)
    said = STOPS_KUBELET.search(ctx.log(mig, "nvidia-mig-manager")) if mig is not None else None
    if mig is None or said is None:
        return work, []
    work += (
        "; and keep the MIG manager from stopping the kubelet on the next MIG change: take kubelet.service out of "
        "its host GPU clients (the gpu-clients ConfigMap's systemd-services), or turn the MIG manager off for "
        f"the node ({deploy_label(MIG_MANAGER)}=false, migManager.enabled=false for all) and apply the layout "
        "before the kubelet starts (nvidia-mig-parted apply from the node's boot script, with no hooks)"
    )
    return work, [f"MIG manager pod {name_of(mig)} said: {said.group(0)}"]


def check_node(ctx: Context, view: NodeView) -> list[Finding]:
    """The node's own state under the chain: blocking conditions, then a runtime the toolkit cannot
    configure. Each finding is a root cause of the node; the work is on the node, outside the cluster."""
    findings = []
    scheme = runtime_scheme(view.node)
    configures = ctx.deploys(TOOLKIT) and not ctx.stack.host_driver
    sandbox = _sandbox_failed(ctx, view, configures)
    for c in blocking_conditions(view.node):
        if c.type == "Ready" and sandbox is not None and sandbox.id == CRI_UNLOADED:
            continue  # the kubelet is up and its runtime serves no CRI: the config written for NVIDIA's runtime
        stopped = _toolkit_stopped_runtime(ctx, view, configures) if c.type == "Ready" else None
        if stopped is not None:
            findings.append(stopped)
            continue
        work, said = _not_ready_work(ctx, view) if c.type == "Ready" else ("", [])
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": work or _ACTIONS.get(c.type, f"clear {c.type} on the node").replace("NODE", view.name),
                "fact": f"node-problem:{_FACTS.get(c.type, c.type)}",
                "drain": False,
            },
        )
        evidence = [c.describe(), f"taint {c.taint}" if c.taint else "", *said]
        if c.type == "Ready":
            fid, cause = (
                "node.not-ready",
                f"the node is not Ready ({c.status}): the kubelet is down or cannot reach the API server, so no pod "
                "on it runs or starts and every link of the chain shows stale state.",
            )
        elif c.type == NETWORK_UNAVAILABLE[0]:
            fid, cause = (
                "node.network-unavailable",
                "the node's pod network is not configured (NetworkUnavailable), so pods that need it are kept off "
                "the node by its taint and GPU workloads cannot start there.",
            )
        else:
            fid, cause = (
                "node.pressure",
                f"the kubelet reports {c.type}: new pods are kept off the node by its taint and "
                f"{PRESSURE[c.type][1]}, GPU pods included, although the GPU chain itself may be healthy.",
            )
        findings.append(
            Finding(
                id=fid,
                severity=Severity.ERROR,
                link="node",
                cause=cause,
                evidence=tuple(e for e in evidence if e),
                fix=ctx.stack.render(action),
                node=view.name,
                action=action,
            )
        )
    if sandbox is not None:
        findings.append(sandbox)
    gate = _device_plugins_gate_off(ctx, view)
    if gate is not None:
        findings.append(gate)
    unseen = _kubelet_socket_unseen(ctx, view)
    if unseen is not None:
        findings.append(unseen)
    if configures and scheme and scheme not in RECOGNISED_RUNTIMES:
        version = _node_info(view.node).get("containerRuntimeVersion", "")
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "run containerd or CRI-O on this node (the runtimes NVIDIA's container toolkit configures)",
                "fact": "runtime-version:containerd://1.7.13",
            },
        )
        findings.append(
            Finding(
                id="node.runtime-unsupported",
                severity=Severity.ERROR,
                link="toolkit",
                cause=f"the node's container runtime ({scheme}) is not one the container toolkit can configure "
                f"({', '.join(RECOGNISED_RUNTIMES)}), so the GPU stack cannot give containers GPUs here.",
                evidence=(f"status.nodeInfo.containerRuntimeVersion: {version}", *_operator_said_runtime(ctx)),
                fix=ctx.stack.render(action),
                node=view.name,
                action=action,
            )
        )
    no_cdi = runtime_no_cdi(
        ctx,
        view,
        scheme=scheme,
        release=runtime_version(view.node),
        runtime=str(node_info(view.node).get("containerRuntimeVersion", "")),
    )
    if no_cdi is not None:
        findings.append(no_cdi)
    return findings


#: The kubelet releases whose DevicePlugins feature gate is off unless a flag turns it on: alpha, default false, in
#: 1.8 and 1.9 (kubernetes pkg/features/kube_features.go@v1.8.0), beta and on by default from 1.10.
DEVICE_PLUGINS_DEFAULT_ON = (1, 10)
#: The label GCE's and GKE's node bring-up gives a node with accelerators, the same bring-up that turns the kubelet's
#: DevicePlugins gate on there (kubernetes cluster/gce/config-default.sh@v1.9.0: with NODE_ACCELERATORS set,
#: FEATURE_GATES gains DevicePlugins=true and the nodes the label cloud.google.com/gke-accelerator).
GATE_ON_WITH = "cloud.google.com/gke-accelerator"
KUBELET_VERSION = re.compile(r"v?(\d+)\.(\d+)")
#: OpenShift's kubelets report their Kubernetes release with the origin commit after a "+" (v1.9.1+a0ce1bc657); before
#: 1.10 that is OpenShift 3.x, whose node service (origin-node, atomic-openshift-node) reads its kubelet flags from
#: node-config.yaml's kubeletArguments and, installed containerised, runs the kubelet in a container that sees only
#: the host paths its systemd unit mounts into it.
OPENSHIFT_KUBELET = re.compile(r"^v?\d+\.\d+\.\d+\+[0-9a-f]{7,}$")
#: The mount that gives OpenShift 3's containerised node service the host's device plugin directory (its systemd
#: unit's docker run flags).
ORIGIN_NODE_BIND = "-v /var/lib/kubelet/device-plugins/:/var/lib/kubelet/device-plugins/"


@remembered
def _kubelet_release(node: Obj) -> tuple[int, int] | None:
    """The node's kubelet release (major, minor), None where it reports none (asked twice a node: answered once a
    node in a diagnosis)."""
    found = KUBELET_VERSION.match(_node_info(node).get("kubeletVersion", ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def _device_plugins_gate_off(ctx: Context, view: NodeView) -> Finding | None:
    """A device plugin on a node whose kubelet predates the DevicePlugins gate's default (1.10) and that lists no
    nvidia.com resource: the kubelet serves no device plugin registration, so no plugin can announce a GPU. Not on a
    node GCE's or GKE's bring-up labelled as having accelerators (`GATE_ON_WITH`): that bring-up turned the gate on.
    Not where the runtime refused to start the plugin: a plugin that never ran never asked to register, so its
    refusal, which is seen, is the root and the gate, which is only guessed from the version, is not."""
    release = _kubelet_release(view.node)
    capacity = (view.node.get("status") or {}).get("capacity") or {}
    plugin = view.pod(DEVICE_PLUGIN)
    if (
        release is None
        or release >= DEVICE_PLUGINS_DEFAULT_ON
        or plugin is None
        or start_refused(plugin)
        or any(k.startswith("nvidia.com/") for k in capacity)
        or GATE_ON_WITH in view.labels
    ):
        return None
    flags = (
        "turn the kubelet's DevicePlugins feature gate on and let it see the plugin's socket: on this OpenShift 3 node "
        "add feature-gates: [DevicePlugins=true] under kubeletArguments in /etc/origin/node/node-config.yaml, and "
        "where the node service runs containerised (the origin-node / atomic-openshift-node container) bind-mount the "
        f"host's device plugin directory into it ({ORIGIN_NODE_BIND} "
        "in its systemd unit, /etc/systemd/system/origin-node.service), then systemctl daemon-reload && systemctl "
        "restart origin-node (atomic-openshift-node)"
        if OPENSHIFT_KUBELET.match(node_info(view.node).get("kubeletVersion", ""))
        else "turn the kubelet's DevicePlugins feature gate on: add --feature-gates=DevicePlugins=true to its "
        "flags (KUBELET_EXTRA_ARGS in its systemd drop-in, e.g. /etc/systemd/system/kubelet.service.d/"
        "10-kubeadm.conf), then systemctl daemon-reload && systemctl restart kubelet"
    )
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{flags}; or upgrade the kubelet to 1.10 or later, where the gate is on by default",
            NOT_SIMULATED: "the kubelet's flags are a fact of the node no scenario names",
        },
    )
    return Finding(
        id="node.device-plugins-disabled",
        severity=Severity.ERROR,
        link="node",
        cause=f"the node's kubelet ({node_info(view.node).get('kubeletVersion')}) predates 1.10, where its "
        "DevicePlugins feature gate is off unless turned on, and the node lists no nvidia.com resource: the kubelet "
        "takes no device plugin registration, so the plugin cannot announce the GPUs.",
        evidence=(
            f"status.nodeInfo.kubeletVersion: {node_info(view.node).get('kubeletVersion')}",
            "capacity: no nvidia.com/* resource",
            f"device plugin pod {name_of(view.pod(DEVICE_PLUGIN) or {})}",
        ),
        fix=ctx.stack.render(action),
        node=view.name,
        action=action,
    )


#: The plugin's dial of the kubelet's registration socket finding no file there (NVIDIA/k8s-device-plugin
#: internal/plugin/server.go@v0.17.1 "Could not register device plugin: %s", the dial error grpc-go passes on): the
#: socket the kubelet serves is not at the path the plugin's hostPath shows it. A refused connection is a kubelet
#: restarting, not this.
SOCKET_ABSENT = re.compile(r"kubelet\.sock: connect: no such file or directory")


def _kubelet_socket_unseen(ctx: Context, view: NodeView) -> Finding | None:
    """A kubelet of 1.10 or later (the DevicePlugins gate on) listing no nvidia.com resource while the plugin finds no
    kubelet.sock in its device-plugins hostPath (or cannot even watch that directory): the kubelet serves the socket
    at a path the plugin does not see. Either the kubelet runs in a container without the host's device-plugins
    directory bound (RKE1, OpenShift 3's containerised node service: the node link, its kubelet's binds) or its
    --root-dir is not /var/lib/kubelet (k0s, MicroK8s, K3s before 1.17.3: the device plugin link, its hostPath); the
    node's evidence puts the likelier variant first, and the finding is on the link of that repair."""
    pod = view.pod(DEVICE_PLUGIN)
    if pod is None:
        return None
    capacity = (view.node.get("status") or {}).get("capacity") or {}
    if any(k.startswith("nvidia.com/") for k in capacity):
        return None  # most nodes: the plugin registered (asked before the kubelet's release, which is then unread)
    info = _node_info(view.node)
    release = _kubelet_release(view.node)
    if release is not None and release < DEVICE_PLUGINS_DEFAULT_ON:
        return None
    container = pod_state(pod).container or str((((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name"))
    log = ctx.log(pod, container)
    said = catalog.find(log, "k8s-device-plugin.register-failed")
    if said is None or not SOCKET_ABSENT.search(said.line):
        said = catalog.find(log, UNWATCHED)
    if said is None:
        return None
    version = info.get("kubeletVersion", "")
    notes = {**view.labels, **((view.node.get("metadata") or {}).get("annotations") or {})}
    rke = any(k.startswith(RKE_ANNOTATION) for k in notes)
    root_dir = kubelet_root(version, notes)
    bind = (
        "bind the host's /var/lib/kubelet/device-plugins into the kubelet's container: on RKE1 add "
        "/var/lib/kubelet/device-plugins:/var/lib/kubelet/device-plugins to services.kubelet.extra_binds in "
        f"cluster.yml and re-run rke up; for OpenShift 3's containerised origin-node add {ORIGIN_NODE_BIND} to its "
        "systemd unit and restart it"
    )
    where = f"{root_dir}/device-plugins" if root_dir else "<kubelet --root-dir>/device-plugins"
    moved = (
        f"point the plugin DaemonSet's device-plugin hostPath at {where}, where a kubelet whose --root-dir is not "
        "/var/lib/kubelet serves its socket (k0s /var/lib/k0s/kubelet, MicroK8s "
        f"/var/snap/microk8s/common/var/lib/kubelet, K3s before 1.17.3 {K3S_OLD_ROOT}), or link that directory to "
        "/var/lib/kubelet/device-plugins on the node"
    )
    containerised = (
        rke or OPENSHIFT_KUBELET.match(version) or str(info.get("containerRuntimeVersion")).startswith("docker://")
    )
    first, then = (moved, bind) if root_dir or not containerised else (bind, moved)
    # The link is where the first repair acts: the plugin's hostPath, or the kubelet's own container.
    link = "device-plugin" if first is moved else "node"
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": f"{first}; otherwise {then}", NOT_SIMULATED: "the kubelet's mounts and flags"},
    )
    fix = ctx.stack.render(action)
    patch = hostpath_patch(owner_daemonset(ctx, pod), where) if root_dir else None
    if patch is not None:
        action = patch
        fix = f"{ctx.stack.render(patch)}   # where this node's kubelet serves kubelet.sock; otherwise {then}"
    return Finding(
        id="node.kubelet-socket-unseen",
        severity=Severity.ERROR,
        link=link,
        cause=f"the node's kubelet ({version or 'version unknown'}) takes device plugin registrations, but the plugin "
        "finds no kubelet.sock in the device-plugins directory it mounts: the kubelet serves it at a path that "
        "directory does not show (a containerised kubelet without the host's directory, or another --root-dir), so "
        "no plugin can announce the GPUs.",
        evidence=(
            f"status.nodeInfo.kubeletVersion: {version}",
            "capacity: no nvidia.com/* resource",
            *said.evidence(),
            *(f"annotation {k}" for k in sorted(notes) if k.startswith(RKE_ANNOTATION)),
        ),
        fix=fix,
        node=view.name,
        action=action,
    )


#: The kubelet's Event when the runtime cannot create a pod's sandbox (kubernetes pkg/kubelet/events
#: FailedCreatePodSandBox; kuberuntime_manager.go: "Failed to create pod sandbox: %v").
SANDBOX_FAILED = "FailedCreatePodSandBox"
#: The kubelet's Events for a pod whose volumes it cannot mount or attach yet (pkg/kubelet/volumemanager): it makes no
#: sandbox until they are (pkg/kubelet/kubelet.go@v1.37.2 SyncPod waits for them before the runtime's SyncPod).
VOLUME_WAITS = ("FailedMount", "FailedAttachVolume")
#: The runtime's words for a missing nvidia handler (catalog.yaml: containerd's CRI, CRI-O): the toolkit link reads
#: those itself (links/toolkit.py runtime_evidence).
NVIDIA_HANDLER = (
    "containerd.no-runtime-for-handler",
    "containerd.no-runtime-for-nvidia-mode",
    "cri-o.runtime-handler-not-found",
    "cri-dockerd.runtime-handler-not-supported",
)


def _sandbox_failed(ctx: Context, view: NodeView, configures: bool) -> Finding | None:
    """No pod of the node gets a sandbox (the kubelet's FailedCreatePodSandBox Events on pods still not
    running): nothing on the node starts, so no link above can be judged. Where the stack's toolkit rewrites
    the runtime's config here, that rewrite is the cause (the toolkit link); otherwise the node's own
    runtime or CNI setup. A missing nvidia handler is the toolkit check's own finding and left to it."""
    events = [ev for ev in view.events if ev.get("reason") == SANDBOX_FAILED]
    if not events:
        return None  # the usual: no pod to look up by name on this node
    by_name = {(p.get("metadata") or {}).get("name"): p for p in [*view.pods, *view.workloads]}
    failed = []
    for ev in events:
        message = str(ev.get("message", ""))
        pod = by_name.get((ev.get("involvedObject") or {}).get("name"))
        if pod is None or pod_state(pod).ready:
            continue
        if catalog.find(message, *NVIDIA_HANDLER):
            return None
        failed.append((pod, message))
    if not failed:
        return None
    unloaded = cri_unloaded(
        ctx,
        view,
        failed=failed,
        configures=configures,
        config=distribution_of(view.node).containerd_config,
        release=runtime_version(view.node),
    )
    if unloaded is not None:
        return unloaded
    said = next((m for _, m in failed if catalog.known_error(m)), failed[0][1])
    known = catalog.known_error(said)
    names = sorted({str(p["metadata"]["name"]) for p, _ in failed})
    lost = _sandbox_setting_lost(ctx, said, known)
    toolkit = bool(lost) or (view.pod(TOOLKIT) is not None and configures)
    if lost:
        work = lost
    else:
        work = (
            known.entry.fix
            if known is not None
            else "repair the runtime setting the Event names (its CNI plugin, runtime handler or config), then "
            "restart it"
        )
        if toolkit:
            work = "the toolkit rewrote containerd's config on this node: " + work
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": work, "drain": False, NOT_SIMULATED: "a runtime's sandbox and CNI setup are not simulated"},
    )
    return Finding(
        id="node.sandbox-failed",
        severity=Severity.ERROR,
        link="toolkit" if toolkit else "node",
        cause="the container runtime on this node cannot create a pod sandbox, so no pod starts there: every operand "
        "waits in ContainerCreating with no log of its own; "
        + (
            "the toolkit configures this node's runtime and rewrote its config."
            if toolkit
            else "the node's own runtime or CNI setup."
        ),
        evidence=(
            f"event {SANDBOX_FAILED} on pod {names[0]}: {said}",
            *([known.entry.cite()] if known else ()),
            f"{len(names)} pod(s) on {view.name} without a sandbox: {', '.join(names[:5])}",
        ),
        fix=ctx.stack.render(action),
        node=view.name,
        action=action,
    )


#: The sandbox image containerd uses where its config names none (containerd pkg/cri/config/config_unix.go,
#: DefaultConfig SandboxImage: registry.k8s.io/pause, k8s.gcr.io/pause before 1.6.9).
RUNTIME_DEFAULT_SANDBOX = re.compile(r'failed to get sandbox image "(?:registry\.k8s\.io|k8s\.gcr\.io)/pause:')
SANDBOX_UNAVAILABLE = "containerd.sandbox-image-unavailable"


def _sandbox_setting_lost(ctx: Context, said: str, known: catalog.Match | None) -> str:
    """The repair where containerd asks for its built-in sandbox image on a node image whose containerd config
    names its own (`Stack.sandbox_image`): the config the node runs lost that setting, and on a GPU node image the
    config is the one NVIDIA's toolkit wrote when it made nvidia the default runtime (nvidia-ctk runtime
    configure), so the toolkit link, with the image's own setting put back; "" where that is not the case."""
    if not ctx.stack.sandbox_image or known is None or known.entry.id != SANDBOX_UNAVAILABLE:
        return ""
    if not RUNTIME_DEFAULT_SANDBOX.search(said):
        return ""
    return (
        "the NVIDIA toolkit's containerd config on this node image names containerd's default pause image instead "
        f"of the image's own: set sandbox_image back to {ctx.stack.sandbox_image} in /etc/containerd/config.toml "
        "and restart containerd, or move the node group to the previous (or a later, fixed) release of its node "
        "image, whose toolkit keeps the setting"
    )


#: What a NotReady node's Events say of its runtime when the toolkit's config write stopped it (catalog.yaml):
#: containerd refusing the toolkit's drop-in, the kubelet finding no runtime on containerd's socket, and
#: containerd, before it went down, without the nvidia handler the toolkit was to add.
RUNTIME_DOWN = ("containerd.drop-in-version", "grpc.runtime-socket-refused", "containerd.no-runtime-for-handler")
#: containerd's config dump prints config version 4 from containerd 2.3 (version/version.go ConfigVersion@v2.3.4;
#: 3 at v2.2.9), and NVIDIA's toolkit writes its nvidia runtime as a drop-in at that version from v1.18.0 unless
#: its RUNTIME_CONFIG_SOURCE is file (catalog entry containerd.drop-in-version): a root config kept at version 2
#: or 3 then stops containerd.
VERSION_4_CONTAINERD = (2, 3)
#: The toolkit's words as it signals containerd to reload the config it wrote (catalog.yaml).
SIGNALLED = "nvidia-container-toolkit.signal-containerd"
#: The command the toolkit reads containerd's config from by default (its RUNTIME_CONFIG_SOURCE "command"), as its
#: log names it.
DUMPED = "containerd config dump"
DROP_IN_TOOLKIT = (1, 18)
#: The drop-in the toolkit writes (cmd/nvidia-ctk-installer/container/runtime/containerd/containerd.go
#: DefaultDropInConfig): under config.d at v1.18, conf.d from v1.19.
DROP_IN_PATHS: dict[tuple[int, ...], str] = {(1, 18): "/etc/containerd/config.d/99-nvidia.toml"}
DROP_IN_PATH = "/etc/containerd/conf.d/99-nvidia.toml"


def _image(pod: Obj) -> str:
    """The image of the pod's first container ("" when it names none)."""
    return str((((pod.get("spec") or {}).get("containers") or [{}])[0]).get("image", ""))


def _image_version(pod: Obj) -> tuple[int, ...] | None:
    """(1, 19, 1) of the first container's image tag ``...:v1.19.1-ubuntu20.04``; None when the tag names none."""
    match = re.search(r":v?(\d+)\.(\d+)\.(\d+)", _image(pod))
    return tuple(int(g) for g in match.groups()) if match else None


def reads_config_file(ctx: Context, pod: Obj) -> bool:
    """Is the toolkit told to read containerd's config from its file (RUNTIME_CONFIG_SOURCE(S)=file..., in its
    container's env or the policy's spec.toolkit.env)?"""
    env = {e.name: e.value for e in ctx.policy.toolkit.env} if ctx.policy_obj is not None else {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        env |= {str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or []}
    return any(env.get(k, "").startswith("file") for k in ("RUNTIME_CONFIG_SOURCE", "RUNTIME_CONFIG_SOURCES"))


def drop_in_too_new(node: Obj, toolkit: Obj) -> bool:
    """Does the node's containerd dump config version 4 (2.3 and later) to a toolkit that writes its runtime as a
    drop-in at the dumped version (v1.18 and later, or a release its image tag does not name)? containerd then
    refuses the drop-in wherever its root config is kept at version 2 or 3 (catalog containerd.drop-in-version)."""
    release, toolkit_release = runtime_version(node), _image_version(toolkit)
    return (
        runtime_scheme(node) == "containerd"
        and release is not None
        and release[:2] >= VERSION_4_CONTAINERD
        and (toolkit_release is None or toolkit_release[:2] >= DROP_IN_TOOLKIT)
    )


def _toolkit_stopped_runtime(ctx: Context, view: NodeView, configures: bool) -> Finding | None:
    """A NotReady node whose containerd went down after the stack's toolkit wrote its config there: the toolkit
    link, not the node (restarting containerd and the kubelet meets the same config). Told by the node's Events:
    containerd's refusal of the toolkit's drop-in, or the runtime gone (nothing on its socket) or left without
    the nvidia handler, where the node's containerd and the toolkit's release are the pair whose drop-in it
    refuses, or where both show (the handler missing, then the socket refused: the write, then the crash)."""
    pod = view.pod(TOOLKIT)
    if not configures or pod is None or runtime_scheme(view.node) != "containerd":
        return None
    said: dict[str, tuple[catalog.Match, Obj]] = {}
    for ev in view.events:
        found = catalog.find(str(ev.get("message", "")), *RUNTIME_DOWN)
        if found is not None:
            said.setdefault(found.entry.id, (found, ev))
    release, toolkit = runtime_version(view.node), _image_version(pod)
    log = ctx.log(pod, ctx.stack.container(TOOLKIT.state))
    # Its log shows the source where its tag does not name a release that reads it: containerd's config dump.
    dumped = DUMPED in log and release is not None and release[:2] >= VERSION_4_CONTAINERD
    refused = drop_in_too_new(view.node, pod) or dumped
    drop_in = toolkit is None or toolkit[:2] >= DROP_IN_TOOLKIT or dumped
    down = {"grpc.runtime-socket-refused", "containerd.no-runtime-for-handler"}
    # Without Events, the toolkit's own log: it wrote its config and signalled (or restarted) containerd, on the pair
    # whose drop-in containerd refuses -- the write, then the node lost.
    signalled = catalog.find(log, SIGNALLED) if refused else None
    if not (RUNTIME_DOWN[0] in said or (said and refused) or down <= set(said) or signalled):
        return None
    runtime = node_info(view.node).get("containerRuntimeVersion", "")
    evidence = [f"status.nodeInfo.containerRuntimeVersion: {runtime}", f"toolkit pod {name_of(pod)} ({_image(pod)})"]
    for found, ev in said.values():
        ref = (ev.get("involvedObject") or {}).get("name")
        evidence += [f"event {ev.get('reason')} on {ref}: {found.line}", found.entry.cite()]
    evidence += signalled.evidence() if signalled else ()
    dist = distribution_of(view.node)
    if drop_in:
        path = DROP_IN_PATHS.get(toolkit[:2], DROP_IN_PATH) if toolkit else DROP_IN_PATH
        action = toolkit_env(ctx, pod=pod, values={"RUNTIME_CONFIG_SOURCE": "file"})
        then = (
            f"   # then on {view.name}: rm {path} && systemctl restart containerd; the toolkit pod writes its drop-in "
            "again at the version of containerd's root config"
        )
        cause = (
            "the container toolkit writes its nvidia runtime as a drop-in at the config version containerd's config "
            f"dump prints ({'4 on containerd ' + '.'.join(map(str, release)) if refused and release else 'its own'}), "
            "and containerd will not load a drop-in of a higher version than its root config: containerd stopped "
            "after the toolkit's write, so the node is NotReady and nothing starts on it."
        )
    else:
        action = toolkit_env(ctx, pod=pod, values={"CONTAINERD_CONFIG": dist.containerd_config})
        then = (
            f"   # then on {view.name}: take the nvidia runtime section the toolkit added out of "
            f"{dist.containerd_config} and systemctl restart containerd"
        )
        cause = (
            "containerd stopped after the container toolkit wrote its nvidia runtime into its config (the handler "
            "missing, then nothing on containerd's socket), so the node is NotReady and nothing starts on it."
        )
    return Finding(
        id="toolkit.runtime-stopped",
        severity=Severity.ERROR,
        link="toolkit",
        cause=cause + " Restarting containerd and the kubelet meets the same config.",
        evidence=tuple(evidence),
        fix=ctx.stack.render(action) + then,
        node=view.name,
        action=action,
    )


def _operator_said_runtime(ctx: Context) -> tuple[str, ...]:
    """NVIDIA's operator's own line for a runtime it does not recognise (it then configures containerd), where its log
    was read: the evidence that the toolkit was set up for a runtime the node does not run."""
    if ctx.stack.id != "gpu-operator":
        return ()
    found = operator_line(
        ctx.snapshot.pods, namespace=ctx.namespace, log=ctx.log, entry_id="gpu-operator.runtime-unknown"
    )
    return found.evidence("operator log") if found is not None else ()
