"""The Kubernetes port: the one place gpuchain talks to the Kubernetes API.

Use it as::

    from gpuchain.kube import NODE, POD, MemoryCluster, LiveCluster, EvictionBlockedError

    cluster = MemoryCluster()                      # tests, simulator, benchmarks
    cluster = LiveCluster()                        # in-cluster config or ~/.kube/config
    nodes = cluster.list(NODE, label_selector="nvidia.com/gpu.present=true")
    pods = cluster.list(POD, field_selector="spec.nodeName=node-1")
    pods = cluster.list_readonly(POD)              # a reader's list: may share the store's objects
    cluster.patch(NODE, "node-1", {"metadata": {"labels": {"nvidia.com/mig.config.state": "success",
                                                           "stale-label": None}}})   # None deletes
    result = cluster.apply(desired_daemonset)      # result.changed is False on a no-op
    cluster.evict("train-0", "ml")                 # EvictionBlockedError(pdb=...) if a PDB forbids it
    cluster.set_condition(NODE, "node-1", {"type": "GPUHealthy", "status": "False", ...})  # others kept
    cluster.logs("nvidia-driver-x", "gpu-operator", container="nvidia-driver-ctr", tail_lines=50)
    cluster.record_event(node, "GpuLost", "GPU 3 fell off the bus", type="Warning")
    async for ev in cluster.watch(NODE, timeout=5): ...   # ev.type, ev.object, ev.resource_version
    cluster.calls.writes, cluster.calls.by_verb    # API requests made, per verb

Objects are plain Kubernetes JSON dicts; kinds are `Kind` constants (`NODE`, `POD`, `DAEMONSET`,
`CLUSTER_POLICY`, ...; `register_kind()` adds more).

Sync or async: every verb is synchronous and only ``watch`` is an async iterator. The CLI, the
doctor, benchmarks and pure reconcile loops are simpler and easier to test synchronously, and a
verb is one short request; the things that genuinely wait (watch streams, the kopf operator) are
async. Async code calls the sync verbs from a worker thread (kopf runs sync handlers in its
executor; elsewhere use ``asyncio.to_thread``), and MemoryCluster is thread-safe for that.

``apply`` is create-or-merge-patch with a client-side diff (not server-side apply field
ownership): it writes only when the desired fields are not already present, so a reconcile that
changes nothing makes zero writes on both adapters.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from gpuchain.kube.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    EvictionBlockedError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KubeError,
    NotFoundError,
    UnknownKindError,
)
from gpuchain.kube.kinds import (
    CLUSTER_POLICY,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIGMAP,
    CRD,
    DAEMONSET,
    DEPLOYMENT,
    EVENT,
    NAMESPACE,
    NODE,
    NODE_FEATURE,
    PDB,
    POD,
    ROLE,
    ROLE_BINDING,
    RUNTIME_CLASS,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
    kind_of,
    register_kind,
)
from gpuchain.kube.objects import (
    annotations_of,
    diff_patch,
    labels_of,
    merge_patch,
    name_of,
    namespace_of,
    needs_apply,
    resource_version_of,
    strategic_merge_patch,
)
from gpuchain.kube.port import WRITE_VERBS, ApiCalls, ApplyResult, Cluster, WatchEvent
from gpuchain.kube.selectors import match_label_selector_object, match_labels

if TYPE_CHECKING:
    from gpuchain.kube.lean import LeanCluster
    from gpuchain.kube.live import LiveCluster
    from gpuchain.kube.memory import MemoryCluster

# lightkube asks for httpx2[http2], so h2 is installed wherever gpuchain is, and httpcore2 imports it
# (with hpack: 1.2 MiB in every agent that talks to the API server) as soon as it finds it. LiveCluster
# speaks HTTP/1.1 only (lightkube's ``ConnectionParams.http2`` is off and gpuchain never turns it on),
# so unless something in the process loaded h2 already, httpcore2 is told there is none (and keeps
# its stand-in, which would say so were HTTP/2 ever asked for).
sys.modules.setdefault("h2", None)  # type: ignore[arg-type]


def __getattr__(name: str) -> Any:
    """The adapters load on first use: LiveCluster pulls in lightkube and httpx, which a node agent
    (on LeanCluster) or a command that never talks to a cluster does not need."""
    if name == "LeanCluster":
        from gpuchain.kube.lean import LeanCluster

        return LeanCluster
    if name == "LiveCluster":
        from gpuchain.kube.live import LiveCluster

        return LiveCluster
    if name == "MemoryCluster":
        from gpuchain.kube.memory import MemoryCluster

        return MemoryCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLUSTER_POLICY",
    "CLUSTER_ROLE",
    "CLUSTER_ROLE_BINDING",
    "CONFIGMAP",
    "CRD",
    "DAEMONSET",
    "DEPLOYMENT",
    "EVENT",
    "NAMESPACE",
    "NODE",
    "NODE_FEATURE",
    "PDB",
    "POD",
    "ROLE",
    "ROLE_BINDING",
    "RUNTIME_CLASS",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "WRITE_VERBS",
    "AlreadyExistsError",
    "ApiCalls",
    "ApplyResult",
    "BadRequestError",
    "Cluster",
    "ConflictError",
    "EvictionBlockedError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "Kind",
    "KubeError",
    "LeanCluster",
    "LiveCluster",
    "MemoryCluster",
    "NotFoundError",
    "UnknownKindError",
    "WatchEvent",
    "annotations_of",
    "diff_patch",
    "kind_of",
    "labels_of",
    "match_label_selector_object",
    "match_labels",
    "merge_patch",
    "name_of",
    "namespace_of",
    "needs_apply",
    "register_kind",
    "resource_version_of",
    "strategic_merge_patch",
]
