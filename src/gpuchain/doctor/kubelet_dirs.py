"""Where a node's kubelet keeps its device plugin directory, and the plugin DaemonSet's hostPath moved there.

The kubelet serves its registration socket, kubelet.sock, in <root-dir>/device-plugins (kubernetes/kubelet
pkg/apis/deviceplugin/v1beta1); a device plugin finds it through the hostPath its DaemonSet mounts. Distributions
that move the kubelet's root, and those that run the kubelet in a container, leave the plugin's default hostPath
(/var/lib/kubelet/device-plugins) without the socket: this module knows the roots they use and writes the change of
the hostPath; `node` judges which variant a node shows."""

from __future__ import annotations

import re
from typing import Any

from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.releases import version_of
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: RKE1 annotates the nodes it provisions (rancher/rke k8s/node.go: InternalAddressAnnotation
#: "rke.cattle.io/internal-ip", ExternalAddressAnnotation "rke.cattle.io/external-ip") and runs their kubelet in a
#: Docker container that sees only the host paths it binds.
RKE_ANNOTATION = "rke.cattle.io/"
#: Distributions that move the kubelet's --root-dir off /var/lib/kubelet, told by their kubeletVersion suffix or label:
#: k0s (its --kubelet-root-dir, /var/lib/k0s/kubelet under its data dir /var/lib/k0s: k0sproject/k0s) and MicroK8s
#: (/var/snap/microk8s/common/var/lib/kubelet; canonical/microk8s docs, label microk8s.io/cluster).
ROOT_DIRS = (("+k0s", "/var/lib/k0s/kubelet"), ("microk8s.io/cluster", "/var/snap/microk8s/common/var/lib/kubelet"))
#: The plugin's failed watch of its device-plugins directory (catalog.yaml): the directory its hostPath shows is none
#: the kubelet made, the same unseen socket before the plugin dials it.
UNWATCHED = "k8s-device-plugin.plugin-dir-unwatched"
#: K3s served the device plugin socket under its own kubelet root, /var/lib/rancher/k3s/agent/kubelet, until its
#: releases of Kubernetes 1.17.3 (k3s-io/k3s#1416, "Use default kubelet device-plugins path", and #1420 for the 1.17
#: branch, merged 2020-02-14); its kubeletVersion carries "k3s" (v1.16.2-k3s.1, v1.17.2+k3s1).
K3S_MARK = re.compile(r"[-+]k3s")
K3S_DEFAULT_PLUGIN_DIR = (1, 17, 3)
K3S_OLD_ROOT = "/var/lib/rancher/k3s/agent/kubelet"
#: The kubelet's device plugin directory, under its root (kubernetes/kubelet pkg/apis/deviceplugin/v1beta1).
DIR = "/device-plugins"


def hostpath_patch(ds: Obj, where: str) -> Fix | None:
    """The plugin DaemonSet ``ds``'s device-plugins hostPath volume pointed at ``where`` (a strategic patch, merged by
    the volume's name), None where it mounts no such volume (or ``ds`` is {}: no DaemonSet owns the pod)."""
    volumes = ((((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes")) or []
    name = next(
        (v.get("name") for v in volumes if str((v.get("hostPath") or {}).get("path", "")).rstrip("/").endswith(DIR)),
        None,
    )
    if not ds or name is None:
        return None
    patch = {"spec": {"template": {"spec": {"volumes": [{"name": name, "hostPath": {"path": where}}]}}}}
    return Fix(FixOp.PATCH_DAEMONSET, f"{namespace_of(ds)}/{name_of(ds)}", patch)


def kubelet_root(version: str, notes: dict[str, Any]) -> str:
    """The kubelet's --root-dir on a node whose kubeletVersion is ``version`` and whose labels and annotations are
    ``notes``, where a distribution moves it off /var/lib/kubelet (k0s, MicroK8s, K3s before 1.17.3); "" otherwise."""
    if K3S_MARK.search(version) and (version_of(version) or (0,)) < K3S_DEFAULT_PLUGIN_DIR:
        return K3S_OLD_ROOT
    return next((d for mark, d in ROOT_DIRS if mark in version or mark in notes), "")
