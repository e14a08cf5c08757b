"""Where the labels go: an NFD feature file, or the Node's labels through the ``kube`` port.

The feature file is replaced atomically (written beside it, then renamed), because NFD's worker
reads ``features.d`` on its own schedule and must never see half a file. Node patching computes
one merge patch: set what changed, delete labels feature discovery owns that no longer apply
(a MIG profile that went away, ``mig.strategy`` after switching to ``none``), and leave every
other label alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuchain.common.files import atomic_write
from gpuchain.discovery.labels import is_owned
from gpuchain.kube import NODE
from gpuchain.kube.objects import labels_of
from gpuchain.kube.port import Cluster

DEFAULT_FEATURE_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"


def render_feature_file(labels: Mapping[str, str]) -> str:
    """NFD's local-source format: one ``key=value`` line per label."""
    return "".join(f"{k}={v}\n" for k, v in labels.items())


def write_feature_file(path: str | Path, labels: Mapping[str, str]) -> None:
    """Replace ``path`` with the labels in one rename; the directory is created if missing.

    Raises OSError with the path when the directory is not writable.
    """
    atomic_write(path, data=render_feature_file(labels), mode=0o644)


def label_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """The label merge patch from ``current`` to ``desired`` (None deletes); empty when in sync.

    Only labels feature discovery owns are ever deleted.
    """
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in desired and is_owned(k)})
    return patch


def patch_node_labels(cluster: Cluster, *, node: str, labels: Mapping[str, str]) -> dict[str, str | None]:
    """Bring ``node``'s feature-discovery labels to ``labels`` in one patch; returns the patch applied.

    No write is made when the node already carries exactly these labels.
    """
    current = labels_of(cluster.get(NODE, name=node))
    patch = label_patch(current, labels)
    if patch:
        cluster.patch(NODE, name=node, patch={"metadata": {"labels": patch}})
    return patch
