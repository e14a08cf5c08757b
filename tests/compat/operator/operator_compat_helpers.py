"""NVIDIA's GPU Operator files (see fixtures/SOURCES.md) as the operator compatibility tests read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    """One YAML document from the fixtures."""
    doc: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text())
    return doc


def nvidia_spec_schema() -> dict[str, Any]:
    """The openAPIV3Schema of ``spec`` in NVIDIA's ClusterPolicy CRD."""
    crd = load("nvidia.com_clusterpolicies.yaml")
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def schema_paths(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Every property path of a structural schema (``a.b``, ``a.list[].c``)."""
    out: list[str] = []
    for key, child in (node.get("properties") or {}).items():
        out.append(prefix + key)
        out += schema_paths(child, f"{prefix}{key}.")
    items = node.get("items") or {}
    if items.get("properties"):
        out += schema_paths(items, prefix.rstrip(".") + "[].")
    return out


def olm_example_policy() -> dict[str, Any]:
    """The ClusterPolicy in the ``alm-examples`` annotation of NVIDIA's OLM bundle."""
    csv = load("gpu-operator-certified.clusterserviceversion.yaml")
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    policy: dict[str, Any] = next(e for e in examples if e["kind"] == "ClusterPolicy")
    return policy


def published_policies() -> dict[str, dict[str, Any]]:
    """Every ClusterPolicy NVIDIA publishes in the fixtures, by a short name."""
    return {
        "sample": load("v1_clusterpolicy.yaml"),
        "helm-default": load("helm-default-clusterpolicy.yaml"),
        "olm-example": olm_example_policy(),
    }
