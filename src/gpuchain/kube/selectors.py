"""Label and field selectors, parsed and matched as the API server does.

MemoryCluster filters with these; the operator and other layers can use `match_labels()` to
apply the same selector to objects they already hold (one list, many questions).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Matcher = Callable[[Mapping[str, str]], bool]

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_./-]*)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value lists."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


@dataclass(frozen=True)
class Requirement:
    """One parsed selector term: ``op`` is one of =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Does a label set (or a field, given as {path: value}) satisfy this term?"""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return value == self.values[0]
        if self.op == "!=":
            return value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _requirement(text: str) -> Requirement:
    eq = _EQ_RE.match(text)
    if eq:
        key, op, value = eq.groups()
        return Requirement(key, "!=" if op == "!=" else "=", (value,))
    st = _SET_RE.match(text)
    if st:
        neg, key, op, values = st.groups()
        if op:
            return Requirement(key, op, tuple(v.strip() for v in values.split(",") if v.strip()))
        return Requirement(key, "!exists" if neg else "exists")
    raise ValueError(f"bad label selector requirement {text!r}: use k=v, k!=v, k, !k, k in (a,b) or k notin (a,b)")


def parse_requirements(selector: str | None) -> list[Requirement]:
    """Parse a label selector string into its terms (ValueError naming the bad term)."""
    return [_requirement(part) for part in _split(selector or "")]


def parse_label_selector(selector: str | None) -> Matcher:
    """Compile a label selector string (``a=b,!c,d in (x,y)``); empty matches everything."""
    reqs = parse_requirements(selector)
    return lambda labels: all(r.matches(labels) for r in reqs)


def match_labels(selector: str | None, labels: Mapping[str, str] | None) -> bool:
    """Does a label set satisfy a selector string?"""
    return parse_label_selector(selector)(labels or {})


def match_label_selector_object(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Match a structured LabelSelector (matchLabels + matchExpressions) as PDBs and DaemonSets use.

    A null selector matches nothing and an empty one everything, as in the API.
    """
    if selector is None:
        return False
    have = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if have.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and have.get(key) not in values:
            return False
        if op == "NotIn" and key in have and have[key] in values:
            return False
        if op == "Exists" and key not in have:
            return False
        if op == "DoesNotExist" and key in have:
            return False
    return True


def _field(obj: Mapping[str, Any], path: list[str]) -> str:
    cur: Any = obj
    for part in path:
        if type(cur) is not dict and not isinstance(cur, Mapping):  # the ABC check only off the fast path
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a field selector (``spec.nodeName=n1,status.phase!=Succeeded``) over whole objects.

    Any dotted path is accepted here; the real API server allows only a per-kind subset
    (for pods: metadata.name/namespace, spec.nodeName, spec.restartPolicy, spec.schedulerName,
    spec.serviceAccountName, status.phase, status.podIP, status.nominatedNodeName).
    """
    # Each path split once and read once per object (``status.phase!=Succeeded,status.phase!=Failed``
    # is two terms on one field): a list of 100,000 pods asks every term of every pod.
    terms: dict[str, list[tuple[bool, str]]] = {}
    for r in parse_field_requirements(selector):
        terms.setdefault(r.key, []).append((r.op == "=", r.values[0]))
    paths = [(key.split("."), wanted) for key, wanted in terms.items()]

    def match(obj: Mapping[str, Any]) -> bool:
        for path, wanted in paths:
            value = _field(obj, path)
            for equal, want in wanted:
                if (value == want) is not equal:
                    return False
        return True

    return match


def parse_field_requirements(selector: str | None) -> list[Requirement]:
    """Parse a field selector (only = and != exist for fields)."""
    reqs: list[Requirement] = []
    for part in _split(selector or ""):
        m = _EQ_RE.match(part)
        if not m:
            raise ValueError(f"bad field selector requirement {part!r}: use path=value or path!=value")
        reqs.append(Requirement(m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
    return reqs
