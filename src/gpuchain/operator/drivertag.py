"""NVIDIA's driver image tag: the driver version plus the node's OS, e.g. ``570.124.06-ubuntu22.04``.

NVIDIA publishes one driver image per driver version and OS (``nvcr.io/nvidia/driver:
550.90.07-ubuntu22.04``, ``...-rhel9.4``); there is no tag without the OS. gpu-operator
(``controllers/object_controls.go``: ``resolveDriverTag`` and ``kernelFullVersion``) builds the
reference as ``<repository>/<image>:<version>`` and, unless the version is a digest
(``sha256:...``, then ``@`` instead of ``:`` and nothing appended), appends ``-<ID><VERSION_ID>``
from Node Feature Discovery's labels ``feature.node.kubernetes.io/system-os_release.ID`` and
``.VERSION_ID`` of a GPU node (``ubuntu`` + ``22.04`` -> ``ubuntu22.04``). A ClusterPolicy that
names the driver ``version: "570.124.06"`` therefore means a different image on Ubuntu 22.04
than on RHEL 9.4, exactly as with gpu-operator.

Pure functions: the operator passes the GPU nodes' labels in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"


class DriverTagError(ValueError):
    """A GPU node lacks the OS labels the driver tag needs."""


def os_tag(labels: Mapping[str, str], node: str = "the node") -> str:
    """``ubuntu22.04`` from a node's NFD OS labels; raises DriverTagError naming what is missing and the fix."""
    missing = [k for k in (OS_ID_LABEL, OS_VERSION_LABEL) if not labels.get(k)]
    if missing:
        raise DriverTagError(
            f"{node} has no {' or '.join(missing)} label, so the driver image tag (version-<os>) cannot be "
            "chosen: is Node Feature Discovery running on it? (kubectl get pods -A -l app.kubernetes.io/name="
            "node-feature-discovery)"
        )
    return f"{labels[OS_ID_LABEL]}{labels[OS_VERSION_LABEL]}"


def driver_image(repository: str, *, image: str, version: str, tag_os: str) -> str:
    """The driver image reference for nodes whose OS tag is ``tag_os`` (gpu-operator's rule).

    A digest (``version`` starting ``sha256:``) names one exact image and gets no OS suffix; an
    empty ``tag_os`` (no GPU node labelled yet) leaves the tag as given.
    """
    base = f"{repository.rstrip('/')}/{image}" if repository else image
    if version.startswith("sha256:"):
        return f"{base}@{version}"
    if not version:
        return base
    return f"{base}:{version}-{tag_os}" if tag_os else f"{base}:{version}"


def driver_os(gpu_nodes: Iterable[tuple[str, Mapping[str, str]]]) -> str:
    """The OS tag the driver DaemonSet is rendered for: that of the first GPU node by name.

    gpu-operator renders its single driver DaemonSet from the first GPU node's labels too
    (assuming one OS across GPU nodes). Nodes without the labels are skipped; with none
    labelled the answer is ``""`` and the tag stays as given.
    """
    for name, labels in sorted(gpu_nodes, key=lambda n: n[0]):
        try:
            return os_tag(labels, f"node {name}")
        except DriverTagError:
            continue
    return ""
