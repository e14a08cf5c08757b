"""Kubernetes name rules, and a check of every manifest the operator renders before it leaves.

The API server would refuse an object with a bad name or a toleration of the wrong shape, but
only at apply time and one object at a time, after others were applied: `operator render`
would print it with exit 0 and the operator would half-apply a policy. So the policy's fields
are checked as names where they become names (`name_problem`), and the rendered objects are
checked as a whole (`manifest_problems`) before anything is printed or applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_LABEL}$")
DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def name_problem(value: str, kind: str = "subdomain") -> str | None:
    """Why ``value`` is not a valid DNS ``label`` (63) or ``subdomain`` (253) name, or None."""
    limit, pattern = (63, DNS_LABEL) if kind == "label" else (253, DNS_SUBDOMAIN)
    if len(value) > limit or not pattern.match(value):
        chars = "lower-case letters, digits and '-'" if kind == "label" else "lower-case letters, digits, '-' and '.'"
        return f"{value!r} is not a valid DNS {kind} name ({chars}, alphanumeric at both ends, at most {limit})"
    return None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and name_problem(prefix) is not None:
        return f"key {key!r}: prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _QUALIFIED.match(name):
        return f"key {key!r}: name must be 1-63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return f"value {value!r}: at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
    return None


def toleration_problem(tol: dict[str, Any]) -> str | None:
    """Why a toleration would be refused by the API server, or None (the rules of core/v1 validation)."""
    for key in ("key", "operator", "value", "effect"):
        if not isinstance(tol.get(key, ""), str):
            return f"{key} must be a string (got {tol[key]!r})"
    seconds = tol.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        return f"tolerationSeconds must be an integer (got {seconds!r})"
    key, op, value, effect = (str(tol.get(k, "")) for k in ("key", "operator", "value", "effect"))
    op = op or "Equal"
    if op not in TOLERATION_OPERATORS:
        return f"operator {op!r} is not one of {', '.join(TOLERATION_OPERATORS)}"
    if key and label_key_problem(key) is not None:
        return str(label_key_problem(key))
    if not key and op != "Exists":
        return "a toleration without a key must use operator Exists"
    if op == "Exists" and value:
        return "value must be empty when operator is Exists"
    if op == "Equal" and label_value_problem(value) is not None:
        return str(label_value_problem(value))
    if effect and effect not in TAINT_EFFECTS:
        return f"effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)} (or empty for all)"
    if seconds is not None and effect != "NoExecute":
        return "tolerationSeconds needs effect NoExecute"
    return None


def _meta_problems(meta: dict[str, Any], namespaced: bool) -> Iterator[str]:
    why = name_problem(str(meta.get("name", "")))
    if why:
        yield f"metadata.name: {why}"
    if namespaced:
        why = name_problem(str(meta.get("namespace", "")), "label")
        if why:
            yield f"metadata.namespace: {why}"
    yield from _map_problems(meta.get("labels") or {}, "metadata.labels", values=True)
    yield from _map_problems(meta.get("annotations") or {}, "metadata.annotations", values=False)


def _map_problems(items: dict[str, Any], where: str, values: bool) -> Iterator[str]:
    for key, value in items.items():
        why = label_key_problem(str(key)) or (label_value_problem(str(value)) if values else None)
        if why:
            yield f"{where}: {why}"


def _pod_problems(spec: dict[str, Any], where: str) -> Iterator[str]:
    for field in ("serviceAccountName", "priorityClassName", "runtimeClassName"):
        if field in spec and (why := name_problem(str(spec[field]))):
            yield f"{where}.{field}: {why}"
    for i, tol in enumerate(spec.get("tolerations") or []):
        if why := toleration_problem(tol):
            yield f"{where}.tolerations[{i}]: {why}"
    for i, secret in enumerate(spec.get("imagePullSecrets") or []):
        if why := name_problem(str(secret.get("name", ""))):
            yield f"{where}.imagePullSecrets[{i}].name: {why}"
    for vol in spec.get("volumes") or []:
        if "configMap" in vol and (why := name_problem(str(vol["configMap"].get("name", "")))):
            yield f"{where}.volumes[{vol['name']}].configMap.name: {why}"
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            for env in c.get("env") or []:
                if not _ENV_NAME.match(str(env.get("name", ""))):
                    yield (
                        f"{where}.{group}[{c['name']}].env: name {env.get('name')!r} must be letters, "
                        "digits, '_', '-' or '.', not starting with a digit"
                    )


def manifest_problems(objs: list[dict[str, Any]]) -> list[str]:
    """Every reason the API server would refuse one of ``objs``, as ``Kind/name: field: reason``."""
    out: list[str] = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        head = f"{obj.get('kind')}/{meta.get('name')}"
        namespaced = obj.get("kind") not in ("RuntimeClass", "ClusterRole", "ClusterRoleBinding", "Namespace")
        out += [f"{head}: {p}" for p in _meta_problems(meta, namespaced)]
        if obj.get("kind") == "RuntimeClass" and (why := name_problem(str(obj.get("handler", "")), "label")):
            out.append(f"{head}: handler: {why}")
        template = (obj.get("spec") or {}).get("template")
        if template:
            tmeta = template.get("metadata") or {}
            where = "spec.template.metadata"
            out += [f"{head}: {p}" for p in _map_problems(tmeta.get("labels") or {}, f"{where}.labels", True)]
            out += [
                f"{head}: {p}" for p in _map_problems(tmeta.get("annotations") or {}, f"{where}.annotations", False)
            ]
            out += [f"{head}: {p}" for p in _pod_problems(template.get("spec") or {}, "spec.template.spec")]
    return out
