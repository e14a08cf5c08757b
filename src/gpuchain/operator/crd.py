"""The ClusterPolicy CRD (gpuchain.io/v1, cluster-scoped), its schema derived from the spec model.

Deriving the openAPIV3Schema from `ClusterPolicySpec` keeps the CRD and the parser from
drifting apart: a key the operator reads is a key the API server keeps (unknown keys are pruned).
"""

from __future__ import annotations

from typing import Any

from gpuchain.operator.policy import ClusterPolicySpec

GROUP = "gpuchain.io"
VERSION = "v1"
KIND = "ClusterPolicy"
PLURAL = "clusterpolicies"
#: kubectl's other names for gpuchain's ClusterPolicy. Not ``clusterpolicy``: NVIDIA's CRD
#: (clusterpolicies.nvidia.com) has that singular, and where both CRDs are installed kubectl gives a
#: name both share to the group first by name, gpuchain.io, so NVIDIA's documented
#: ``kubectl patch clusterpolicy/cluster-policy`` changed gpuchain's policy. These names are
#: gpuchain's alone. The plural, the CRD's identity, stays (docs/operator.md, "Names").
SINGULAR = "gpuchainpolicy"
SHORT_NAMES = ["gcpol"]


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a Kubernetes structural-schema node."""
    if "$ref" in node:
        return _structural(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:
        types = {t.get("type") for t in node["anyOf"]}
        if types == {"integer", "string"}:
            return {"x-kubernetes-int-or-string": True}
        return _structural(next(t for t in node["anyOf"] if t.get("type") != "null"), defs)
    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = " ".join(str(node["description"]).split())
    if "enum" in node:
        out["type"] = "string"
        out["enum"] = list(node["enum"])
        return out
    kind = node.get("type")
    if kind == "object":
        out["type"] = "object"
        if "properties" in node:
            out["properties"] = {k: _structural(v, defs) for k, v in node["properties"].items()}
        elif isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"]:
            out["additionalProperties"] = _structural(node["additionalProperties"], defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["type"] = "array"
        out["items"] = _structural(node.get("items") or {"type": "object"}, defs)
    elif kind in ("string", "integer", "boolean", "number"):
        out["type"] = kind
        if "minimum" in node:
            out["minimum"] = node["minimum"]
    else:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def spec_schema() -> dict[str, Any]:
    """openAPIV3Schema of ClusterPolicy.spec."""
    raw = ClusterPolicySpec.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition manifest (the Helm chart ships the same one)."""
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    printer = [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "GPU nodes", "type": "integer", "jsonPath": ".status.gpuNodes"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer,
                }
            ],
        },
    }
