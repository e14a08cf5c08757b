"""Resource kinds the project talks about, with what a REST client needs to address them.

A `Kind` names a resource type by apiVersion and kind (what objects carry) and also knows its
plural and scope (what URLs need). Both adapters key everything by `Kind`, so a caller never
spells a URL and a typo in a kind fails loudly at `kind_of()` rather than as a 404 at runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuchain.kube.errors import UnknownKindError


@dataclass(frozen=True)
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


NAMESPACE = Kind("v1", "Namespace", "namespaces", namespaced=False)
NODE = Kind("v1", "Node", "nodes", namespaced=False)
POD = Kind("v1", "Pod", "pods", namespaced=True)
EVENT = Kind("v1", "Event", "events", namespaced=True)
CONFIGMAP = Kind("v1", "ConfigMap", "configmaps", namespaced=True)
SERVICE = Kind("v1", "Service", "services", namespaced=True)
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts", namespaced=True)
DAEMONSET = Kind("apps/v1", "DaemonSet", "daemonsets", namespaced=True)
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments", namespaced=True)
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", namespaced=True)
RUNTIME_CLASS = Kind("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", namespaced=False)
CRD = Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)
CLUSTER_ROLE = Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", "roles", namespaced=True)
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", namespaced=True)
CLUSTER_POLICY = Kind("gpuchain.io/v1", "ClusterPolicy", "clusterpolicies", namespaced=False)
NODE_FEATURE = Kind("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "nodefeatures", namespaced=True)

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
