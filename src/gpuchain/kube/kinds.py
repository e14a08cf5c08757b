"""Resource kinds the project talks about, with what a REST client needs to address them.

A `Kind` names a resource type by apiVersion and kind (what objects carry) and also knows its
plural and scope (what URLs need). Both adapters key everything by `Kind`, so a caller never
spells a URL and a typo in a kind fails loudly at `kind_of()` rather than as a 404 at runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuchain.kube.errors import UnknownKindError


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One resource type: ``Kind("apps/v1", "DaemonSet", "daemonsets", namespaced=True)``."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        """API group; "" for the core group (``v1``)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """API version inside the group (``v1``, ``v1alpha1``)."""
        return self.api_version.rpartition("/")[2]

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"


NAMESPACE = Kind(api_version="v1", kind="Namespace", plural="namespaces", namespaced=False)
NODE = Kind(api_version="v1", kind="Node", plural="nodes", namespaced=False)
POD = Kind(api_version="v1", kind="Pod", plural="pods", namespaced=True)
EVENT = Kind(api_version="v1", kind="Event", plural="events", namespaced=True)
CONFIGMAP = Kind(api_version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)
SERVICE = Kind(api_version="v1", kind="Service", plural="services", namespaced=True)
SERVICE_ACCOUNT = Kind(api_version="v1", kind="ServiceAccount", plural="serviceaccounts", namespaced=True)
DAEMONSET = Kind(api_version="apps/v1", kind="DaemonSet", plural="daemonsets", namespaced=True)
DEPLOYMENT = Kind(api_version="apps/v1", kind="Deployment", plural="deployments", namespaced=True)
PDB = Kind(api_version="policy/v1", kind="PodDisruptionBudget", plural="poddisruptionbudgets", namespaced=True)
RUNTIME_CLASS = Kind(api_version="node.k8s.io/v1", kind="RuntimeClass", plural="runtimeclasses", namespaced=False)
CRD = Kind(
    api_version="apiextensions.k8s.io/v1",
    kind="CustomResourceDefinition",
    plural="customresourcedefinitions",
    namespaced=False,
)
CLUSTER_ROLE = Kind(
    api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole", plural="clusterroles", namespaced=False
)
CLUSTER_ROLE_BINDING = Kind(
    api_version="rbac.authorization.k8s.io/v1",
    kind="ClusterRoleBinding",
    plural="clusterrolebindings",
    namespaced=False,
)
ROLE = Kind(api_version="rbac.authorization.k8s.io/v1", kind="Role", plural="roles", namespaced=True)
ROLE_BINDING = Kind(
    api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding", plural="rolebindings", namespaced=True
)
CLUSTER_POLICY = Kind(api_version="gpuchain.io/v1", kind="ClusterPolicy", plural="clusterpolicies", namespaced=False)
NODE_FEATURE = Kind(api_version="nfd.k8s-sigs.io/v1alpha1", kind="NodeFeature", plural="nodefeatures", namespaced=True)

_REGISTRY: dict[tuple[str, str], Kind] = {}


def register_kind(kind: Kind) -> Kind:
    """Make ``kind`` known to `kind_of()`; returns it so it can be a module constant."""
    _REGISTRY[(kind.api_version, kind.kind)] = kind
    return kind


for _k in (
    NAMESPACE,
    NODE,
    POD,
    EVENT,
    CONFIGMAP,
    SERVICE,
    SERVICE_ACCOUNT,
    DAEMONSET,
    DEPLOYMENT,
    PDB,
    RUNTIME_CLASS,
    CRD,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    ROLE,
    ROLE_BINDING,
    CLUSTER_POLICY,
    NODE_FEATURE,
):
    register_kind(_k)


def kind_of(obj: dict[str, Any]) -> Kind:
    """The `Kind` of a Kubernetes JSON object, from its apiVersion and kind."""
    key = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    try:
        return _REGISTRY[key]
    except KeyError:
        raise UnknownKindError(
            f"unknown kind {key[1]!r} in apiVersion {key[0]!r}: register it with gpuchain.kube.register_kind(Kind(...))"
        ) from None


def listed_with_kind(obj: dict[str, Any], kind: Kind) -> dict[str, Any]:
    """A listed object with its apiVersion and kind, as ``get`` returns it.

    A List response names the kind once, on the list; the API server leaves it off every item
    (custom resources excepted), so ``apply`` compared a desired object's ``apiVersion``/``kind``
    with an item that had none and wrote again on every reconcile, and an Event about a listed
    object named no kind. client-go's dynamic client fills them in the same way (first, where
    a dump puts them; an item that carries its own keeps them).
    """
    return {"apiVersion": kind.api_version, "kind": kind.kind, **obj}


def listed_with_kinds(objs: Iterable[dict[str, Any]] | None, kind: Kind) -> list[dict[str, Any]]:
    """`listed_with_kind` of each of ``objs`` (a list response's items), in one pass: a live doctor lists
    75,000 pods, and a call and a hash of ``kind`` for each cost a twentieth of decoding them (bench.doctor.live)."""
    api_version, name = kind.api_version, kind.kind
    return [{"apiVersion": api_version, "kind": name, **obj} for obj in objs or ()]
