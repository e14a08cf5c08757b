"""Host directories the chain's links make on a node, and operand pods whose sandbox waits on one.

An operand mounts what a lower link makes on the host (the driver's root, the toolkit's install directory) as a
hostPath; where that link has not made it, the kubelet cannot mount the volume and the operand never starts. The
kubelet says so in a FailedMount Event (`evidence.mount_waits`); once the Event has expired, the pod's state and its
volumes still say it (`waits_on_host_path`)."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.owners import runtime_class_of, volumes_spec
from gpuchain.doctor.pods import container_ran, lacks_sandbox
from gpuchain.kube.objects import Obj, is_ready

#: Host directories that a lower link creates and operands mount (hostPath type Directory): the
#: operator's driver root (NVIDIA/gpu-operator assets, driverInstallDir /run/nvidia/driver) and
#: the toolkit's install dir (toolkit.installDir /usr/local/nvidia); a stack's own driver root is
#: added from the adapter (GKE's /home/kubernetes/bin/nvidia).
PROVIDED_BY = (("/run/nvidia/driver", "driver"), ("/usr/local/nvidia", "toolkit"), ("/run/nvidia/toolkit", "toolkit"))


def link_making(ctx: Context, path: str) -> str | None:
    """The link that creates host directory ``path`` (None when no link of the chain does)."""
    owners = ((ctx.stack.driver_root, "driver"), *PROVIDED_BY) if ctx.stack.driver_root else PROVIDED_BY
    return next((link for root, link in owners if path == root or path.startswith(root.rstrip("/") + "/")), None)


#: hostPath types whose path the kubelet checks before it mounts the volume (kubernetes pkg/volume/hostpath/
#: host_path.go checkType@v1.37.2): one that is missing fails the mount, and the kubelet makes no sandbox for a pod
#: before its volumes are mounted (pkg/kubelet/kubelet.go SyncPod, WaitForAttachAndMount before the runtime's
#: SyncPod). An untyped or *OrCreate hostPath never fails for a missing path.
MUST_EXIST = frozenset({"Directory", "File", "Socket", "CharDevice", "BlockDevice"})
#: Volume sources the kubelet always has at hand (a service account's projected token and the cluster's CA, the pod's
#: own fields, scratch space): none of them keeps a pod from its sandbox.
ALWAYS_MOUNTED = frozenset({"hostPath", "emptyDir", "projected", "downwardAPI"})


def waits_on_host_path(ctx: Context, view: NodeView, pod: Obj) -> str:
    """The host directory a lower link makes that ``pod``'s sandbox waits on, read from state alone (for a dump whose
    Events have expired): the pod has no sandbox (PodReadyToStartContainers False, none of its containers ever ran)
    on a Ready node, names no RuntimeClass (whose missing handler would be the runtime's), mounts nothing but
    hostPaths and volumes that are always there, and every hostPath it needs to exist is one a link of the chain makes
    (the same link for all): that path is what the kubelet could not mount. "" where any of that does not hold."""
    status = pod.get("status") or {}
    # A pod without a sandbox is Pending: most are not, or have one, or a kubelet that writes no such condition.
    if status.get("phase") != "Pending" or not lacks_sandbox(pod):
        return ""
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    if any(container_ran(c) for c in statuses) or runtime_class_of(ctx, pod):
        return ""
    spec = volumes_spec(ctx, pod)
    if not is_ready(view.node):
        return ""
    volumes = spec.get("volumes") or []
    if any(not ALWAYS_MOUNTED & set(v) for v in volumes):
        return ""
    needed = [
        str(v["hostPath"].get("path") or "")
        for v in volumes
        if "hostPath" in v and (v["hostPath"].get("type") or "") in MUST_EXIST
    ]
    links = {link_making(ctx, path) for path in needed}
    return needed[0] if needed and len(links) == 1 and None not in links else ""
