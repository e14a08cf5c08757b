"""A ClusterPolicy object as a user would apply it, for the tests and the operator bench (the operator
only reads policies; nothing in gpuchain writes one)."""

from __future__ import annotations

from typing import Any

from gpuchain.operator.crd import GROUP, KIND, VERSION


def cluster_policy(name: str = "cluster-policy", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ClusterPolicy object (the default one when ``spec`` is None)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec or {}}
